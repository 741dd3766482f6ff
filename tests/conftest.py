"""Shared fixtures: one real SparkSession per test session, and a fresh connectql home."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from connectql.runtime.session import get_session, stop_session

    yield get_session({"spark.master": "local[2]", "spark.sql.shuffle.partitions": "2"})
    stop_session()


@pytest.fixture
def home(tmp_path):
    return tmp_path / "home"


@pytest.fixture
def worker(spark, home):
    """A worker on a fresh home, sharing the test session's SparkSession."""
    from connectql.server.worker import Worker

    w = Worker(home)
    yield w
    w.close(stop_spark=False)


from tests.pgserver import pg_logical, pg_shared  # noqa: E402, F401 (PostgreSQL fixtures)
