"""PostgreSQL cdc sources of several tables, against a real server: a change one table cannot
read leaves the other tables flowing, that table's too with errors.tolerance = 'all'; with
'none' that table stops until the offsets are reset."""

from __future__ import annotations

import pytest

from tests.helpers import check_poison_isolated, run, wait_until
from tests.test_mysql import streaming
from tests.test_postgres import cdc_dbs, connection, sql, stream_rows  # noqa: F401 (fixture)

pytestmark = pytest.mark.spark


def test_a_change_one_table_cannot_read_leaves_the_other_tables_flowing(
    worker,
    pg_logical,
    cdc_dbs,  # noqa: F811
):
    """An unconstrained numeric too large for its stream's DECIMAL(38,18) in one table of
    three: with errors.tolerance = 'all' that change goes to the dead-letter stream, naming
    its table and position, and every other change flows, of that table too, even in the same
    transaction; with 'none' that table stops and the others go on."""
    (src, info), _ = cdc_dbs
    for t in ("bad", "good1", "good2"):
        sql(info, f"CREATE TABLE {t} (id int PRIMARY KEY, n numeric)")
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
    sql(info, "INSERT INTO good1 VALUES (1, 1.5)")
    sql(info, "BEGIN; INSERT INTO bad VALUES (1, 1e25); INSERT INTO good2 VALUES (1, 2); COMMIT")
    sql(info, "BEGIN; INSERT INTO bad VALUES (2, 3); INSERT INTO good1 VALUES (2, 4); COMMIT")

    message = check_poison_isolated(worker, "public.bad", "LSN")
    assert "1" + "0" * 25 in message  # the value, as PostgreSQL prints it

    # the way back, as the README gives it: fix the value, then read every table again
    sql(info, "UPDATE bad SET n = 1 WHERE id = 1")
    run(worker, "PAUSE CONNECTOR strict; RESET CONNECTOR strict OFFSETS; RESUME CONNECTOR strict")
    snapshot = "SELECT id FROM t WHERE __op = 'r' ORDER BY id"
    wait_until(lambda: stream_rows(worker, "x_bad", snapshot) == [(1,), (2,)], timeout=120)
    assert worker.catalog.get_connector("strict").tables_failed == {}
