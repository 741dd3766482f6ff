"""Shared fixtures: one real SparkSession per test session, a fresh connectql home, and a
check after every test that it left no signal handler and no thread behind."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

WATCHED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@pytest.fixture(autouse=True)
def leaves_nothing_behind():
    """A test that changes how this process takes SIGINT/SIGTERM, blocks them, or leaves a
    thread running (a timer firing into the next test) fails here, and the handlers are put
    back so that later tests are not changed by it (e.g. Ctrl-C tests that then see nothing)."""
    handlers = {s: signal.getsignal(s) for s in WATCHED_SIGNALS}
    threads = set(threading.enumerate())
    yield
    changed = [s.name for s, h in handlers.items() if signal.getsignal(s) is not h]
    for s, h in handlers.items():
        signal.signal(s, h)
    blocked = [s.name for s in signal.pthread_sigmask(signal.SIG_BLOCK, []) if s in handlers]
    if blocked:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, WATCHED_SIGNALS)
    left = _threads_left(threads)
    assert not changed, f"the test left its own handler for {changed}"
    assert not blocked, f"the test left {blocked} blocked"
    assert not left, f"the test left threads running: {left}"


def _threads_left(before: set, grace: float = 5.0) -> list[str]:
    """Threads started during the test that are not daemons and still run after `grace`."""
    deadline = time.monotonic() + grace
    while True:
        left = [t for t in threading.enumerate() if t not in before and not t.daemon]
        if not left or time.monotonic() > deadline:
            return [t.name for t in left]
        time.sleep(0.05)


@pytest.fixture(scope="session", autouse=True)
def ctrl_c_is_heard():
    """The tests that press Ctrl-C (in this process, or in a `connectql run` they start) need
    SIGINT handled; a suite started in the background by a shell (`pytest &`) inherits it
    ignored, and so would every process it starts (a Python handler is reset by exec)."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.fixture(scope="session", autouse=True)
def one_jvm_archive():
    """Every connectql process of the suite shares the user's JVM class archive, also those
    that run with a HOME of their own (tests/test_shell.py)."""
    if "CONNECTQL_CACHE_DIR" in os.environ:
        yield
        return
    from connectql.runtime.jvmarchive import cache_root

    os.environ["CONNECTQL_CACHE_DIR"] = cache_root()
    yield
    del os.environ["CONNECTQL_CACHE_DIR"]


@pytest.fixture(scope="session")
def spark():
    """The suite's SparkSession: it reads the JVM's class archive but leaves writing one to the
    short connectql processes the tests start (a writer's archive appears only when it ends)."""
    from connectql.runtime.session import get_session, stop_session

    mode = os.environ.get("CONNECTQL_JVM_ARCHIVE")
    os.environ["CONNECTQL_JVM_ARCHIVE"] = mode or "use"
    try:
        session = get_session({"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2"})
    finally:
        if mode is None:
            del os.environ["CONNECTQL_JVM_ARCHIVE"]
    yield session
    stop_session()


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


@pytest.fixture
def worker(spark, home):
    """A worker on a fresh home, sharing the test session's SparkSession."""
    from connectql.worker.worker import Worker

    w = Worker(home)
    yield w
    w.close(stop_spark=False)


from tests.pgserver import cdc_databases, pg_logical, pg_own, pg_shared  # noqa: E402, F401 (PostgreSQL fixtures)
from tests.sparkcluster import partial_cluster, spark_cluster  # noqa: E402, F401 (Spark clusters)
