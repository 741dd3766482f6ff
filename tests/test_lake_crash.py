"""A MariaDB (and a PostgreSQL) cdc source into a Delta table and an Iceberg table (upsert)
survives `kill -9` of the worker: while a writer commits inserts, updates, deletes and primary-key changes, the worker
(and its JVM) is killed with SIGKILL mid-stream; once a new `connectql run` of the same script
has caught up, both tables equal the source table value by value (decimals, microsecond
datetimes) and the stream holds every committed change exactly once. The scenario and the
writer are the database crash tests' (tests/crash.py, tests/test_mysql_crash.py,
tests/test_postgres_crash.py). A long
scenario: `pytest -m scenario tests/test_lake_crash.py`."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.crash import kill_during_change_capture
from tests.mariadbserver import mariadb_binlog  # noqa: F401 (fixture)
from tests.test_iceberg import rows_of
from tests.test_mysql_crash import ROWS, checksum, pipeline  # noqa: F401 (fixture)
from tests.test_postgres_crash import pipeline as pg_pipeline  # noqa: F401 (fixture)
from tests.test_postgres_crash import sql

pytestmark = pytest.mark.spark

SINKS = """
CREATE SINK CONNECTOR IF NOT EXISTS dst TO delta FROM changes WITH (path = '{lake}/items');
CREATE SINK CONNECTOR IF NOT EXISTS dst_ice TO iceberg FROM changes WITH (
  'catalog.uri' = 'sqlite:///{lake}/catalog.db', warehouse = '{lake}/wh', table = 'shop.items');
"""
SOURCES = {
    "mysql": """
CREATE SOURCE CONNECTOR IF NOT EXISTS src FROM mysql INTO changes WITH (
  host = '{host}', port = {port}, user = '{user}', database = '{src}', table = 'items',
  'batch.rows' = {batch_rows});""",
    "postgres": """
CREATE SOURCE CONNECTOR IF NOT EXISTS src FROM postgres INTO changes WITH (
  host = '{host}', port = {port}, user = '{user}', database = '{src}', table = 'items',
  'slot.name' = '{slot}', 'batch.rows' = {batch_rows});""",
}
COLUMNS = ("id", "name", "qty", "price", "updated")


def lake_checksum(rows: list[dict] | None):
    return (
        None
        if rows is None
        else checksum(tuple(r[c] for c in COLUMNS) for r in sorted(rows, key=lambda r: r["id"]))
    )


def lake_target(lake: Path):
    """The two tables' checksum once they are equal (until then, both)."""
    delta = lake / "items"
    delta_sum = (
        lake_checksum(DeltaTable(str(delta)).to_pyarrow_table().to_pylist())
        if (delta / "_delta_log").exists()
        else None
    )
    options = {"catalog.uri": f"sqlite:///{lake}/catalog.db", "warehouse": str(lake / "wh")}
    ice_sum = (
        lake_checksum(rows_of(options, "shop.items")) if (lake / "catalog.db").exists() else None
    )
    return delta_sum if delta_sum == ice_sum else ("delta", delta_sum, "iceberg", ice_sum)


def into_lakes(crash: dict, tmp_path: Path, source: str, **server) -> dict:
    """A crash pipeline whose targets are a Delta and an Iceberg table (the source's script
    with the lake sinks instead of its own sink)."""
    lake = tmp_path / "lake"
    (lake / "wh").mkdir(parents=True)

    def script(batch_rows: int) -> Path:
        path = tmp_path / "lakes.sql"
        text = SOURCES[source].format(batch_rows=batch_rows, **server) + SINKS.format(lake=lake)
        path.write_text(text)
        return path

    return {**crash, "script": script, "target": lambda: lake_target(lake)}


@pytest.fixture
def lakes(pipeline, tmp_path):  # noqa: F811
    db = pipeline["mariadb"]
    server = {"host": db.host, "port": db.port, "user": db.user, "src": pipeline["src"]}
    return into_lakes(pipeline, tmp_path, "mysql", **server)


@pytest.fixture
def pg_lakes(pg_pipeline, pg_logical, tmp_path):  # noqa: F811
    """PostgreSQL's crash pipeline into the lakes: the source's checksum is taken as the
    lake's is (Python values), not by PostgreSQL's text of the rows."""
    src = pg_pipeline["src"]
    database = sql(src, "SELECT current_database()")[0][0]  # its slots go with it
    server = {"host": pg_logical.host, "port": pg_logical.port, "user": pg_logical.user,
              "src": database, "slot": "cq_lake_" + database[-8:]}  # fmt: skip
    p = into_lakes(pg_pipeline, tmp_path, "postgres", **server)
    return {**p, "source": lambda: checksum(sql(src, ROWS))}


@pytest.mark.scenario  # ~110 s; CI's whole run was at its 35 minutes with it
def test_kill_during_change_capture_into_delta_and_iceberg(lakes):
    kill_during_change_capture(lakes, total=3_000, batch_rows=1_000)


@pytest.mark.scenario  # ~110 s, as the MariaDB one
def test_kill_during_postgres_change_capture_into_delta_and_iceberg(pg_lakes):
    kill_during_change_capture(pg_lakes, total=3_000, batch_rows=1_000)
