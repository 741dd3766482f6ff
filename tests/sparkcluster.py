"""A Spark standalone cluster for tests: a master and two workers (1 core, small memory each)
started from the jars pyspark ships, on free ports, with their work dirs in a temp dir; stopped
and waited for at teardown, nothing left behind."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import pyspark
import pytest

from tests.crash import checkout_env, kill_everything
from tests.servers import free_port

SPARK_HOME = Path(pyspark.__file__).resolve().parent
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


class SparkCluster:
    """`workers` workers of `cores` cores and `memory` each behind one master, all on loopback;
    `url` is the master's spark:// address, `status()` its JSON (workers, apps)."""

    def __init__(
        self, workers: int = 2, cores: int = 1, memory: str = "1g", hide: Path | None = None
    ):
        self.n_workers, self.cores, self.memory = workers, cores, memory
        self.hide = hide  # a folder the workers do not see: an empty tmpfs over it there
        self.base = Path(tempfile.mkdtemp(prefix="connectql-spark-"))
        self.procs: list[subprocess.Popen] = []
        self.port = self.ui_port = 0

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def start(self) -> SparkCluster:
        try:
            self.port, self.ui_port = free_port(), free_port()
            self._spawn(
                "master",
                [MASTER, "--host", "127.0.0.1", "--port", self.port, "--webui-port", self.ui_port],
            )
            self._wait(lambda s: True, "the master's status page")
            for i in range(self.n_workers):
                work = self.base / f"worker{i}"
                work.mkdir()
                args = [WORKER, "--host", "127.0.0.1", "--cores", self.cores]
                args += ["--memory", self.memory, "--webui-port", free_port()]
                args += ["--work-dir", work, self.url]
                self._spawn(f"worker{i}", args, self.hide, SPARK_WORKER_DIR=str(work))
            self._wait(
                lambda s: len([w for w in s["workers"] if w["state"] == "ALIVE"]) == self.n_workers,
                f"{self.n_workers} workers ALIVE",
            )
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, tag: str, args: list, hide: Path | None = None, **env: str) -> None:
        command = [str(SPARK_HOME / "bin/spark-class"), *map(str, args)]
        if hide:  # a mount namespace of its own (root only), as a node without that mount
            mount = f'mount -t tmpfs none {hide} && exec "$@"'
            command = [
                "unshare",
                "-m",
                "--propagation",
                "private",
                "sh",
                "-c",
                mount,
                "sh",
                *command,
            ]
        with (self.base / f"{tag}.log").open("w") as log:
            self.procs.append(
                subprocess.Popen(
                    command,
                    env=checkout_env(SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP="127.0.0.1", **env),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # the JVM and every executor it starts die with it
                )
            )

    def status(self) -> dict:
        url = f"http://127.0.0.1:{self.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return json.loads(resp.read())

    def _wait(self, check, what: str, timeout: float = 90) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [p.args[1] for p in self.procs if p.poll() is not None]
            assert not dead, f"{dead} exited while starting:\n{self.logs()}"
            try:
                status = self.status()
                if check(status):
                    return status
            except (OSError, ValueError):
                pass
            time.sleep(0.5)
        raise AssertionError(f"the Spark cluster did not show {what} in {timeout}s:\n{self.logs()}")

    def logs(self) -> str:
        """The tails of the master's, the workers' and the executors' logs."""
        files = sorted(self.base.glob("*.log")) + sorted(self.base.glob("worker*/app-*/*/stderr"))
        return "\n".join(
            f"--- {f.relative_to(self.base)}\n{f.read_text(errors='replace')[-2000:]}"
            for f in files
        )

    def stop(self) -> None:
        """Workers first (they stop their executors), then the master; whatever is left of a
        process's session is killed; the temp dir goes."""
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
            kill_everything(proc)
        self.procs.clear()
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="module")
def spark_cluster():
    cluster = SparkCluster().start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def partial_cluster():
    """A cluster of one worker that does not see the folder `cluster.hide` (a home there is
    on a disk of this machine only)."""
    hidden = Path(tempfile.mkdtemp(prefix="connectql-local-"))
    cluster = SparkCluster(workers=1, hide=hidden).start()
    yield cluster
    cluster.stop()
    shutil.rmtree(hidden, ignore_errors=True)


def executor_tasks(event_dir: Path) -> dict[str, int]:
    """Tasks that ended, per executor id, in the Spark event logs under `event_dir`."""
    tasks: dict[str, int] = {}
    for log in event_dir.rglob("events_*"):  # spark.eventLog.compress = false
        for line in log.read_text().splitlines():
            event = json.loads(line)
            if event["Event"] == "SparkListenerTaskEnd":
                executor = event["Task Info"]["Executor ID"]
                tasks[executor] = tasks.get(executor, 0) + 1
    return tasks


def on_cluster_env(cluster: SparkCluster, **changes: str | None) -> dict[str, str]:
    """The environment of a `connectql` process that runs on `cluster`."""
    return checkout_env(**{"CONNECTQL_SPARK_MASTER": cluster.url, **changes})
