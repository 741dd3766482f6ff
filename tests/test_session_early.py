"""The SparkSession started in the background when a worker starts (connectql run, server): a
Spark SQL setting set after that still reaches the session."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.spark


def test_a_sql_setting_reaches_a_session_started_early(worker):
    from connectql.runtime import session

    worker.start_session_early()
    assert session.starting_or_started()
    for _stmt, result in worker.run_script("SET spark.sql.shuffle.partitions = 3;"):
        assert "takes effect" not in result.message
    try:
        assert worker.engine.spark.conf.get("spark.sql.shuffle.partitions") == "3"
    finally:
        worker.engine.spark.conf.set("spark.sql.shuffle.partitions", "2")
