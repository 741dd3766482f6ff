"""A database that goes away and comes back: the connectors using it show RESTARTING (retrying
with backoff) while it is down and RUNNING once it is back, and the exactly-once sink ends equal
to the source with no change applied twice."""

from __future__ import annotations

import pytest

from tests.helpers import read_parquet_rows, run, wait_until
from tests.pgserver import create_database, pg_sql

pytestmark = pytest.mark.spark

CHECKSUM = "SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY id), '')) FROM items t"


def states(worker, name: str) -> list[str]:
    rows = worker.catalog.query(
        "SELECT to_state FROM connector_events WHERE connector = ? ORDER BY time", [name]
    )[1]
    return [r[0] for r in rows]


def test_connectors_restart_through_a_database_outage_without_loss(worker, pg_own):
    src = create_database(pg_own.conninfo(), "src")
    dst = create_database(pg_own.conninfo(), "dst")
    pg_sql(src, "CREATE TABLE items (id int PRIMARY KEY, qty int)")
    pg_sql(src, "INSERT INTO items SELECT g, g FROM generate_series(1, 500) g")
    conn = f"host = '127.0.0.1', port = {pg_own.port}, user = 'postgres'"
    retry = "'errors.retry.backoff.ms' = 300, 'errors.retry.max' = 50"
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR src FROM postgres INTO items_s WITH ({conn}, database = 'src',
          table = 'items', {retry});
        CREATE SINK CONNECTOR dst TO postgres FROM items_s WITH ({conn}, database = 'dst',
          table = 'items', {retry});
        """,
    )
    same = lambda: pg_sql(dst, CHECKSUM) == pg_sql(src, CHECKSUM)  # noqa: E731
    wait_until(same, 120, what="the first copy")

    pg_own.halt()
    wait_until(
        lambda: worker.catalog.get_connector("src").state == "RESTARTING", 60, what="RESTARTING"
    )
    error = worker.catalog.get_connector("src").last_error
    assert "127.0.0.1" in error or "connect" in error.lower(), error
    pg_own.resume()

    pg_sql(src, "INSERT INTO items SELECT g, g FROM generate_series(501, 700) g")
    pg_sql(src, "UPDATE items SET qty = qty * 10 WHERE id % 7 = 0")
    pg_sql(src, "DELETE FROM items WHERE id % 11 = 0")
    wait_until(
        same,
        180,
        what="target equal to source after the outage",
        diagnose=lambda: (
            worker.catalog.query(
                "SELECT name, state, rows_total, rows_written, last_error FROM connectors"
            )[1],
            pg_sql(dst, CHECKSUM),
            pg_sql(src, CHECKSUM),
            read_parquet_rows(
                worker.home / "streams/items_s", "SELECT __op, count(*) FROM t GROUP BY 1"
            ),
            worker.catalog.query(
                "SELECT connector, to_state, reason FROM connector_events ORDER BY time"
            )[1],
        ),
    )
    for name in ("src", "dst"):
        wait_until(
            lambda name=name: worker.catalog.get_connector(name).state == "RUNNING",
            60,
            what=f"{name} RUNNING",
        )
    assert "RESTARTING" in states(worker, "src")
    dupes = read_parquet_rows(
        worker.home / "streams/items_s",
        "SELECT count(*) FROM (SELECT __pos, __op, id FROM t WHERE __op <> 'r'"
        " GROUP BY ALL HAVING count(*) > 1)",
    )
    assert dupes == [(0,)]
    changes = read_parquet_rows(
        worker.home / "streams/items_s", "SELECT __op, count(*) FROM t GROUP BY 1 ORDER BY 1"
    )
    assert dict(changes) == {"r": 500, "c": 200, "u": 100, "d": 63}
