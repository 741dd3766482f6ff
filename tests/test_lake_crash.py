"""A MariaDB cdc source into a Delta table and an Iceberg table (upsert) survives `kill -9` of
the worker: while a writer commits inserts, updates, deletes and primary-key changes, the worker
(and its JVM) is killed with SIGKILL mid-stream; once a new `connectql run` of the same script
has caught up, both tables equal the MariaDB table value by value (decimals, microsecond
datetimes) and the stream holds every committed change exactly once. The scenario and the
writer are the database crash tests' (tests/crash.py, tests/test_mysql_crash.py). A long
scenario: `pytest -m scenario tests/test_lake_crash.py`."""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.crash import kill_during_change_capture
from tests.mariadbserver import mariadb_binlog  # noqa: F401 (fixture)
from tests.test_iceberg import rows_of
from tests.test_mysql_crash import checksum, pipeline  # noqa: F401 (fixture)

pytestmark = pytest.mark.spark

SCRIPT = """
CREATE SOURCE CONNECTOR IF NOT EXISTS src FROM mysql INTO changes WITH (
  host = '{host}', port = {port}, user = '{user}', database = '{src}', table = 'items',
  'batch.rows' = {batch_rows});
CREATE SINK CONNECTOR IF NOT EXISTS dst TO delta FROM changes WITH (path = '{lake}/items');
CREATE SINK CONNECTOR IF NOT EXISTS dst_ice TO iceberg FROM changes WITH (
  'catalog.uri' = 'sqlite:///{lake}/catalog.db', warehouse = '{lake}/wh', table = 'shop.items');
"""
COLUMNS = ("id", "name", "qty", "price", "updated")


def lake_checksum(rows: list[dict] | None):
    return (
        None
        if rows is None
        else checksum(tuple(r[c] for c in COLUMNS) for r in sorted(rows, key=lambda r: r["id"]))
    )


@pytest.fixture
def lakes(pipeline, tmp_path):  # noqa: F811
    """The MariaDB crash pipeline with a Delta and an Iceberg table as its targets: `target` is
    their checksum once they are equal (until then, both)."""
    lake = tmp_path / "lake"
    (lake / "wh").mkdir(parents=True)
    db = pipeline["mariadb"]

    def script(batch_rows: int) -> Path:
        path = tmp_path / "lakes.sql"
        path.write_text(SCRIPT.format(host=db.host, port=db.port, user=db.user,
                                      src=pipeline["src"], lake=lake, batch_rows=batch_rows))  # fmt: skip
        return path

    def target():
        delta = lake / "items"
        delta_sum = (
            lake_checksum(DeltaTable(str(delta)).to_pyarrow_table().to_pylist())
            if (delta / "_delta_log").exists()
            else None
        )
        options = {"catalog.uri": f"sqlite:///{lake}/catalog.db", "warehouse": str(lake / "wh")}
        ice_sum = (
            lake_checksum(rows_of(options, "shop.items"))
            if (lake / "catalog.db").exists()
            else None
        )
        return delta_sum if delta_sum == ice_sum else ("delta", delta_sum, "iceberg", ice_sum)

    return {**pipeline, "script": script, "target": target}


@pytest.mark.scenario  # ~110 s; CI's whole run was at its 35 minutes with it
def test_kill_during_change_capture_into_delta_and_iceberg(lakes):
    kill_during_change_capture(lakes, total=3_000, batch_rows=1_000)
