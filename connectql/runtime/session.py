"""The one SparkSession of a worker, tuned for connectors (settings measured in shared/NOTES.md)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from connectql.runtime import jvmarchive
from connectql.runtime.logs import scrubbed_pipe

DEFAULTS = {
    "spark.master": "local[*]",
    "spark.app.name": "connectql",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.session.timeZone": "UTC",
    # FIFO: FAIR pools of equal weight starve the queries whose names sort last once there
    # are more busy queries than cores (bench.many: 9 of 20 connectors moved).
    "spark.scheduler.mode": "FIFO",
    # Python workers of many queries starting at once miss the default 15 s (NOTES.md).
    "spark.python.authenticate.socketTimeout": "120s",
    "spark.sql.streaming.checkpointFileManagerClass": "org.apache.spark.sql.execution.streaming."
    "checkpointing.FileSystemBasedCheckpointFileManager",
    "spark.sql.streaming.stopTimeout": "30000",
    "spark.driver.memory": "2g",
    "spark.sql.sources.partitionOverwriteMode": "dynamic",
    # an idle query looks for new data this often (Spark: every 10 ms): an idle file source
    # lists its stream's log each time; 5 connectors mostly idle took 1.15 cores at 10 ms,
    # 0.66 at 50 ms, 0.62 at 100 ms (bench in the commit's message)
    "spark.sql.streaming.pollingDelay": "50ms",
}

_lock = threading.Lock()
_session = None
_early: threading.Thread | None = None
_jvm_output: tuple[Path, Callable[[], Iterable[str]]] | None = None


def send_jvm_output_to(path: Path | None, secrets: Callable[[], Iterable[str]] = tuple) -> None:
    """Where the JVM's own standard error goes (its startup warnings, e.g. 'Using incubator
    modules', Spark's Python workers' output, whatever log4j does not catch), from the next
    session on: a file, its lines scrubbed of `secrets()`, or None for this process's standard
    error (connectql --verbose)."""
    global _jvm_output
    _jvm_output = None if path is None else (path, secrets)


@contextlib.contextmanager
def _stderr_to(output: tuple[Path, Callable[[], Iterable[str]]] | None):
    """File descriptor 2 pointed at a scrubbed file while the JVM is launched (it inherits it)."""
    if output is None:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    fd = scrubbed_pipe(*output)
    os.dup2(fd, 2)
    os.close(fd)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def python_data_sources():
    """Every Python data source class connectql registers with Spark."""
    from connectql.connectors.streamsread import StreamsDataSource
    from connectql.toolkit.datasource import ToolkitDataSource

    return [ToolkitDataSource, StreamsDataSource]


def logging_settings(log_dir) -> dict[str, str]:
    """JVM options that send Spark's log4j output to log_dir/spark.log."""
    from importlib.resources import files

    config = files("connectql.runtime").joinpath("log4j2.properties")
    return {
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{config} -Dconnectql.log.dir={log_dir}"
    }


def prepare_environment() -> None:
    """Spark's Python workers must run this interpreter; a slow start must not kill a worker."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_AUTH_SOCKET_TIMEOUT", "120")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # a local worker binds to loopback
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")


def master_of(settings: dict[str, str] | None) -> str:
    """spark.master from `settings` (SET spark.master), else CONNECTQL_SPARK_MASTER, else local."""
    given = (settings or {}).get("spark.master") or os.environ.get("CONNECTQL_SPARK_MASTER")
    return given or DEFAULTS["spark.master"]


def get_session(settings: dict[str, str] | None = None):
    """The process-wide SparkSession, created on first use with DEFAULTS overlaid by `settings`
    and by CONNECTQL_SPARK_MASTER."""
    global _session
    with _lock:
        if _session is None:
            prepare_environment()
            from pyspark.sql import SparkSession

            conf = {**DEFAULTS, **(settings or {}), "spark.master": master_of(settings)}
            conf = jvmarchive.with_options(conf, jvmarchive.plan(conf))
            builder = SparkSession.builder
            for key, value in conf.items():
                builder = builder.config(key, value)
            with _stderr_to(_jvm_output):
                spark = builder.getOrCreate()
            # PySpark's SIGINT handler cancels every running job; Ctrl-C must instead let the
            # worker stop its queries gracefully.
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGINT, signal.default_int_handler)
            spark.sparkContext.setLogLevel("ERROR")
            for source in python_data_sources():
                spark.dataSource.register(source)
            _session = spark
        return _session


def start_early(settings: dict[str, str] | None = None) -> None:
    """Start the session in a background thread now, so that whatever the process does next
    (parsing, the catalog, connecting to the systems) overlaps the JVM's start of ~5 s; the
    first get_session() waits for it. A start that fails here is tried again, and reported, by
    that first use."""
    global _early
    with _lock:
        if _session is not None or _early is not None:
            return

        def start() -> None:
            with contextlib.suppress(Exception):
                get_session(settings)

        _early = threading.Thread(target=start, name="connectql-session-start", daemon=True)
        _early.start()


def starting_or_started() -> bool:
    """Whether a session exists or is being started in the background (a static Spark setting
    can then no longer take effect)."""
    return _session is not None or (_early is not None and _early.is_alive())


def stop_session() -> None:
    global _session, _early
    if _early is not None:  # a background start finishes first, then is stopped
        _early.join()
        _early = None
    with _lock:
        if _session is not None:
            from pyspark import SparkContext

            _session.stop()
            _session = None
            gateway = SparkContext._gateway
            if gateway is not None:  # its callback threads would outlive the interpreter
                gateway.shutdown()
                SparkContext._gateway = SparkContext._jvm = None
