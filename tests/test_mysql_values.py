"""Values a MySQL/MariaDB cdc source once changed or refused (issue 48), through the snapshot
and through the binlog, compared value by value: negative TIMEs with a fraction, and DECIMALs
wider than Spark's 38 digits (carried as their text, recreated in a PostgreSQL target)."""

from __future__ import annotations

import pytest

from tests.helpers import read_parquet_rows, run, wait_until
from tests.mariadbserver import mariadb_binlog  # noqa: F401 (fixture)
from tests.pgserver import pg_shared  # noqa: F401 (fixture)
from tests.test_mysql import binlog_db, pg_db, pg_rows, streaming  # noqa: F401 (fixtures)

pytestmark = pytest.mark.spark

TIMES = [  # (TIME(3), TIME(6)) as MariaDB prints them
    ("-01:59:59.001", "-01:01:01.000001"),
    ("-733:00:00.001", "-838:59:58.999999"),
    ("-00:00:00.500", "-00:00:00.000001"),
    ("-01:00:00.000", "-838:59:59.000000"),
    ("01:59:59.001", "838:59:58.999999"),
]


def test_negative_times_with_a_fraction_read_the_same_from_the_snapshot_and_the_binlog(
    worker,
    binlog_db,  # noqa: F811
):
    binlog_db.sql("CREATE TABLE t (id INT PRIMARY KEY, t3 TIME(3), t6 TIME(6))")
    for i, (t3, t6) in enumerate(TIMES):
        binlog_db.sql("INSERT INTO t VALUES (%s, %s, %s)", (i, t3, t6))
    printed = binlog_db.sql("SELECT CAST(t3 AS CHAR), CAST(t6 AS CHAR) FROM t ORDER BY id")
    assert printed == TIMES  # the server holds what the test says
    run(
        worker,
        f"CREATE SOURCE CONNECTOR src FROM mysql INTO times WITH ({binlog_db.options()},"
        " table = 't')",
    )
    snapshot, binlog = then_through_the_binlog(worker, binlog_db, "t", "times", TIMES)
    assert snapshot == TIMES
    assert binlog == TIMES


def then_through_the_binlog(worker, db, table: str, stream: str, values: list[tuple]):
    """Once the snapshot has ended, the same values inserted again (ids from 100): the two
    value columns as the snapshot and as the binlog read them."""
    wait_until(lambda: streaming(worker, "src"), timeout=90, what="the snapshot to end")
    for i, (a, b) in enumerate(values):
        db.sql(f"INSERT INTO {table} VALUES (%s, %s, %s)", (100 + i, a, b))
    path = worker.home / "streams" / stream
    names = ", ".join(c[0] for c in db.sql(f"SHOW COLUMNS FROM {table}")[1:])
    query = f"SELECT id, __op, {names} FROM t ORDER BY id"
    wait_until(lambda: len(read_parquet_rows(path, query) or []) == 2 * len(values))
    rows = read_parquet_rows(path, query)
    return [(r[2], r[3]) for r in rows if r[1] == "r"], [(r[2], r[3]) for r in rows if r[1] == "c"]


WIDE = [  # DECIMAL(65,18), DECIMAL(65,0) as MariaDB prints them
    ("12345678901234567890123456789012345678901234567.123456789012345678", "9" * 65),
    ("-0.000000000000000001", "-" + "1" + "0" * 64),
    ("0.000000000000000000", "0"),
]


def test_decimals_wider_than_38_digits_arrive_exact_in_a_postgres_target(
    worker,
    binlog_db,  # noqa: F811
    pg_db,  # noqa: F811
    pg_shared,  # noqa: F811
):
    binlog_db.sql("CREATE TABLE w (id INT PRIMARY KEY, a DECIMAL(65,18), b DECIMAL(65,0))")
    binlog_db.sql("CREATE TABLE ok (id INT PRIMARY KEY)")
    for i, (a, b) in enumerate(WIDE):
        binlog_db.sql("INSERT INTO w VALUES (%s, %s, %s)", (i, a, b))
    assert binlog_db.sql("SELECT CAST(a AS CHAR), CAST(b AS CHAR) FROM w ORDER BY id") == WIDE
    name, _info = pg_db
    target = (
        f"host = '{pg_shared.host}', port = {pg_shared.port}, user = '{pg_shared.user}',"
        f" database = '{name}'"
    )
    run(
        worker,
        f"""CREATE SOURCE CONNECTOR src FROM mysql INTO my WITH ({binlog_db.options()},
              table = 'w, ok');
            CREATE SINK CONNECTOR out TO postgres FROM my_w WITH ({target}, table = 'w');""",
    )
    snapshot, binlog = then_through_the_binlog(worker, binlog_db, "w", "my_w", WIDE)
    assert snapshot == WIDE
    assert binlog == WIDE
    shown = "SELECT a::text, b::text FROM w ORDER BY id"
    wait_until(lambda: pg_rows(_info, shown) == WIDE + WIDE, what="the target's rows")
    types = pg_rows(
        _info,
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = 'w'::regclass AND attname IN ('a', 'b') ORDER BY attname",
    )
    assert types == [("numeric(65,18)",), ("numeric(65,0)",)]
