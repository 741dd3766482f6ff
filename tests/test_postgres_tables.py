"""PostgreSQL cdc sources of several tables, against a real server: a change one table cannot
read leaves the other tables flowing, that table's too with errors.tolerance = 'all'; with
'none' that table stops until the offsets are reset."""

from __future__ import annotations

import pytest

from tests.helpers import check_poison_isolated, run, wait_until
from tests.test_multitable import stream_rows as rows_of  # None before a column exists
from tests.test_mysql import streaming
from tests.test_postgres import TWO_DIM, cdc_dbs, connection, sql, stream_rows  # noqa: F401

pytestmark = pytest.mark.spark


def test_a_change_one_table_cannot_read_leaves_the_other_tables_flowing(
    worker,
    pg_logical,
    cdc_dbs,  # noqa: F811
):
    """A two-dimensional array in an int[] column (no ARRAY<INT> holds it) in one table of
    three: with errors.tolerance = 'all' that change goes to the dead-letter stream, naming
    its table and position, and every other change flows, of that table too, even in the same
    transaction; with 'none' that table stops and the others go on."""
    (src, info), _ = cdc_dbs
    for t in ("bad", "good1", "good2"):
        sql(info, f"CREATE TABLE {t} (id int PRIMARY KEY, n int[])")
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR tolerant FROM postgres INTO s WITH (
          {connection(pg_logical, src)}, table = 'bad, good*', 'errors.tolerance' = 'all',
          'errors.deadletter.stream' = 'rejects');
        CREATE SOURCE CONNECTOR strict FROM postgres INTO x WITH (
          {connection(pg_logical, src)}, table = 'bad, good*', 'errors.retry.max' = 0);
        """,
    )
    for name in ("tolerant", "strict"):
        wait_until(lambda n=name: streaming(worker, n), timeout=120, what=f"{name} streaming")
    sql(info, "INSERT INTO good1 VALUES (1, '{1}')")
    sql(
        info,
        f"BEGIN; INSERT INTO bad VALUES (1, '{TWO_DIM}'); INSERT INTO good2 VALUES (1, '{{2}}');"
        " COMMIT",
    )
    sql(
        info,
        "BEGIN; INSERT INTO bad VALUES (2, '{3}'); INSERT INTO good1 VALUES (2, '{4}'); COMMIT",
    )

    message = check_poison_isolated(worker, "public.bad", "LSN")
    assert TWO_DIM in message  # the value, as PostgreSQL prints it

    # the way back, as the README gives it: fix the value, then read every table again
    sql(info, "UPDATE bad SET n = '{1}' WHERE id = 1")
    run(worker, "PAUSE CONNECTOR strict; RESET CONNECTOR strict OFFSETS; RESUME CONNECTOR strict")
    snapshot = "SELECT id FROM t WHERE __op = 'r' ORDER BY id"
    wait_until(lambda: stream_rows(worker, "x_bad", snapshot) == [(1,), (2,)], timeout=120)
    assert worker.catalog.get_connector("strict").tables_failed == {}


def test_a_column_added_to_one_table_widens_only_its_stream(worker, pg_logical, cdc_dbs):  # noqa: F811
    """schema.change = 'evolve' (the default) on a source of two tables: a column added to one
    widens that table's stream alone, the row arrives with its value, and the other table's
    changes flow on in its own columns."""
    (src, info), _ = cdc_dbs
    for t in ("ev_a", "ev_b"):
        sql(info, f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
        sql(info, f"INSERT INTO {t} VALUES (1, 'x')")
    run(
        worker,
        f"CREATE SOURCE CONNECTOR grow FROM postgres INTO g WITH ("
        f"{connection(pg_logical, src)}, table = 'ev_*')",
    )
    wait_until(lambda: streaming(worker, "grow"), timeout=120, what="grow streaming")
    sql(info, "ALTER TABLE ev_a ADD COLUMN extra int")
    sql(
        info,
        "BEGIN; INSERT INTO ev_a VALUES (2, 'y', 42); INSERT INTO ev_b VALUES (2, 'z'); COMMIT",
    )
    changes = "SELECT id, {} FROM t WHERE __op = 'c'"
    wait_until(
        lambda: rows_of(worker, "g_ev_a", changes.format("v, extra")) == [(2, "y", 42)],
        timeout=90,
        what="the widened row of ev_a",
    )
    wait_until(lambda: rows_of(worker, "g_ev_b", changes.format("v")) == [(2, "z")], 60)
    assert "`extra` INT" in worker.catalog.get_stream("g_ev_a").schema
    assert "extra" not in worker.catalog.get_stream("g_ev_b").schema
    snapshot = "SELECT id, v, extra FROM t WHERE __op = 'r'"
    assert rows_of(worker, "g_ev_a", snapshot) == [(1, "x", None)]  # old files: NULL
    sql(info, "INSERT INTO ev_b VALUES (3, 'w')")
    wait_until(lambda: len(rows_of(worker, "g_ev_b", changes.format("v"))) == 2, 60)
    assert worker.catalog.get_connector("grow").state == "RUNNING"
