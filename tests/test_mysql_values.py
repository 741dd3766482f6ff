"""Values a MySQL/MariaDB cdc source once changed or refused (issue 48), through the snapshot
and through the binlog, compared value by value: negative TIMEs with a fraction, DECIMALs
wider than Spark's 38 digits (carried as their text, recreated in a PostgreSQL target), and
zero dates in a primary key (carried as their text, recreated in a MariaDB target, refused
rows in a PostgreSQL one)."""

from __future__ import annotations

import json
import re

import pymysql
import pytest

from connectql.connectors.mysql.types import ZERO_PART
from tests.helpers import read_parquet_rows, run, wait_until
from tests.mariadbserver import mariadb_binlog  # noqa: F401 (fixture)
from tests.pgserver import pg_shared  # noqa: F401 (fixture)
from tests.test_mysql import My, binlog_db, pg_db, pg_rows, streaming  # noqa: F401 (fixtures)

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


# a primary key of a date (id, d) and one of a DATETIME(3) and a TIMESTAMP(3), holding zero
# dates and ordinary ones; rows as MariaDB prints them in a UTC session
ZERO_KEYED = (
    "CREATE TABLE kd (id INT, d DATE, v VARCHAR(20), PRIMARY KEY (id, d))",
    "CREATE TABLE kt (d DATETIME(3), ts TIMESTAMP(3) NOT NULL DEFAULT 0, v VARCHAR(20),"
    " PRIMARY KEY (d, ts))",
)
KD = [
    (1, "0000-00-00", "zero"),
    (1, "2024-05-01", "plain"),
    (2, "2024-05-00", "zero day"),
    (3, "2024-00-10", "zero month"),
    (4, "0000-01-01", "zero year"),
    (5, "2024-02-29", "leap day"),
]
KT = [
    ("0000-00-00 00:00:00.000", "0000-00-00 00:00:00.000", "zero"),
    ("2024-05-00 10:00:00.500", "2024-05-01 10:00:00.250", "zero day"),
    ("2024-05-01 10:00:00.123", "2038-01-19 03:14:07.999", "last timestamp"),
    ("2024-05-01 10:00:00.123", "1970-01-01 00:00:01.000", "first timestamp"),
]
ZERO_KEYED_CHANGES = (  # through the binlog: inserts, updates (of a key too) and deletes
    "INSERT INTO kd VALUES (6, '0000-00-00', 'new zero'), (7, '2025-01-00', 'new zero day'),"
    " (8, '2025-01-02', 'new plain')",
    "UPDATE kd SET v = 'changed' WHERE (id = 1 AND d = '0000-00-00') OR id = 5",
    "UPDATE kd SET d = '2024-06-00' WHERE id = 2",  # a zero-date key changed: d, then c
    "DELETE FROM kd WHERE id IN (3, 8)",
    "INSERT INTO kt VALUES ('0000-00-00 00:00:00.001', '2024-05-01 00:00:00.000', 'new'),"
    " ('2025-01-01 00:00:00.000', '2025-01-01 00:00:00.001', 'new plain')",
    "UPDATE kt SET v = 'changed' WHERE v IN ('zero day', 'last timestamp')",
    "DELETE FROM kt WHERE v = 'zero'",
)


def zero_keyed_source(worker, db, sink: str) -> None:
    """The tables kd and kt with their rows, a cdc source of both into streams my_kd and my_kt,
    the sink `sink` (a CREATE SINK ... FROM the two streams), and once the snapshot has ended,
    the changes."""
    db.sql("SET time_zone = '+00:00', sql_mode = ''")
    for ddl in ZERO_KEYED:
        db.sql(ddl)
    db.sql("INSERT INTO kd VALUES " + ", ".join(["(%s, %s, %s)"] * len(KD)), sum(KD, ()))
    db.sql("INSERT INTO kt VALUES " + ", ".join(["(%s, %s, %s)"] * len(KT)), sum(KT, ()))
    assert printed(db.sql, "kd") == sorted(KD) and printed(db.sql, "kt") == sorted(KT)
    run(
        worker,
        f"CREATE SOURCE CONNECTOR src FROM mysql INTO my WITH ({db.options()},"
        f" table = 'kd, kt'); {sink}",
    )
    wait_until(lambda: streaming(worker, "src"), timeout=90, what="the snapshot to end")
    for change in ZERO_KEYED_CHANGES:
        db.sql(change)


def printed(fetch, table: str) -> list[tuple] | None:
    """A zero-keyed table's rows as MariaDB prints them (ordered), through `fetch(SQL)`."""
    columns = "id, CAST(d AS CHAR), v" if table == "kd" else "CAST(d AS CHAR), CAST(ts AS CHAR), v"
    rows = fetch(f"SELECT {columns} FROM {table}")
    return None if rows is None else sorted(tuple(r) for r in rows)


def keys_read(worker, table: str) -> dict[str, set[tuple]]:
    """The keys of the rows of a zero-keyed table's stream, by __op."""
    key = "id, d" if table == "kd" else "d, ts"
    rows = read_parquet_rows(worker.home / "streams" / f"my_{table}", f"SELECT __op, {key} FROM t")
    out: dict[str, set[tuple]] = {}
    for op, *k in rows or []:
        out.setdefault(op, set()).add(tuple(k))
    return out


def test_zero_dates_in_a_primary_key_round_trip_into_a_mysql_target(
    worker,
    binlog_db,  # noqa: F811
    mariadb_binlog,  # noqa: F811
):
    """A key's zero dates are carried as their text with the declared type: a MariaDB target
    connectql creates has the source's types and rows, zero dates included, after the
    snapshot and after binlog changes (a zero-keyed row updated, its key changed, deleted),
    even when the server's sql_mode refuses zero dates (as MySQL 8's does)."""
    target = My(mariadb_binlog.host, mariadb_binlog.port)
    target.sql("SET time_zone = '+00:00'")
    modes = binlog_db.sql("SELECT @@GLOBAL.sql_mode")[0][0]
    binlog_db.sql(
        "SET GLOBAL sql_mode = CONCAT(@@GLOBAL.sql_mode, ',NO_ZERO_IN_DATE,NO_ZERO_DATE')"
    )
    try:
        zero_keyed_source(
            worker,
            binlog_db,
            f"CREATE SINK CONNECTOR out TO mysql WITH ({target.options()},"
            " streams = 'my_kd, my_kt', table = '${table}')",
        )

        def fetch(q):
            try:
                return target.sql(q)
            except pymysql.err.ProgrammingError:  # no table yet
                return None

        for table in ("kd", "kt"):
            wait_until(
                lambda t=table: printed(fetch, t) == printed(binlog_db.sql, t),
                timeout=120,
                what=f"{table} in the target to equal the source",
                diagnose=lambda t=table: (printed(fetch, t), printed(binlog_db.sql, t)),
            )
        assert key_columns(target) == key_columns(binlog_db)
    finally:
        binlog_db.sql("SET GLOBAL sql_mode = %s", (modes,))
        target.drop()
    shown = {r[0]: r[1] for r in run(worker, "DESCRIBE STREAM my_kt")[0].rows}
    assert (shown["column d"], shown["column ts"]) == (
        "string (mysql datetime(3))",
        "string (mysql timestamp(3))",
    )
    # a change's key is the snapshot's key of the same row
    kd, kt = keys_read(worker, "kd"), keys_read(worker, "kt")
    assert kd["u"] == {(1, "0000-00-00"), (5, "2024-02-29")} and kd["u"] <= kd["r"]
    assert kd["d"] == {(2, "2024-05-00"), (3, "2024-00-10"), (8, "2025-01-02")}
    assert {(2, "2024-05-00"), (3, "2024-00-10")} <= kd["r"]
    zeros = ("0000-00-00 00:00:00.000", "0000-00-00 00:00:00.000")
    assert kt["d"] == {zeros} and zeros in kt["r"]
    assert ("2024-05-00 10:00:00.500", "2024-05-01 10:00:00.250") in kt["u"] & kt["r"]


def key_columns(db) -> list[tuple]:
    """(table, column, COLUMN_TYPE, place in the primary key) of the zero-keyed tables' keys."""
    return db.sql(
        "SELECT c.TABLE_NAME, c.COLUMN_NAME, c.COLUMN_TYPE, s.SEQ_IN_INDEX"
        " FROM information_schema.COLUMNS c JOIN information_schema.STATISTICS s"
        " ON s.TABLE_SCHEMA = c.TABLE_SCHEMA AND s.TABLE_NAME = c.TABLE_NAME"
        " AND s.COLUMN_NAME = c.COLUMN_NAME AND s.INDEX_NAME = 'PRIMARY'"
        " WHERE c.TABLE_SCHEMA = %s AND c.TABLE_NAME IN ('kd', 'kt') ORDER BY 1, 4",
        (db.name,),
    )


def test_zero_dates_in_a_primary_key_are_refused_rows_in_a_postgres_target(
    worker,
    binlog_db,  # noqa: F811
    pg_db,  # noqa: F811
    pg_shared,  # noqa: F811
):
    """A PostgreSQL target gets the declared types (date, timestamp(3), timestamptz(3)) and
    every row whose key it can hold, exact; a row with a zero date in its key is a refused
    row: with errors.tolerance = 'all', a dead letter (never NULL, never another date), with
    'none' the sink fails naming the value."""
    name, info = pg_db
    target = (
        f"host = '{pg_shared.host}', port = {pg_shared.port}, user = '{pg_shared.user}',"
        f" database = '{name}', streams = 'my_kd, my_kt'"
    )
    zero_keyed_source(
        worker,
        binlog_db,
        f"""CREATE SINK CONNECTOR out TO postgres WITH ({target}, table = '${{table}}',
              'errors.tolerance' = 'all', 'errors.deadletter.stream' = 'rejects');
            CREATE SINK CONNECTOR strict TO postgres WITH ({target},
              table = 'strict_${{table}}', 'errors.retry.max' = 0)""",
    )
    shown = {  # as MariaDB prints them
        "kd": "SELECT id, d::text, v FROM kd",
        "kt": "SELECT to_char(d, 'YYYY-MM-DD HH24:MI:SS.MS'),"
        " to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS'), v FROM kt",
    }
    for table in ("kd", "kt"):
        want = [r for r in printed(binlog_db.sql, table) if not any(map(zero_part, r))]
        wait_until(
            lambda t=table, w=want: sorted(pg_rows(info, shown[t]) or []) == w,
            timeout=120,
            what=f"{table}'s rows without zero dates in the target",
            diagnose=lambda t=table: sorted(pg_rows(info, shown[t]) or []),
        )
    types = pg_rows(
        info,
        "SELECT attrelid::regclass::text, attname, format_type(atttypid, atttypmod)"
        " FROM pg_attribute WHERE attrelid IN ('kd'::regclass, 'kt'::regclass)"
        " AND attname IN ('d', 'ts') ORDER BY 1, 2",
    )
    assert types == [
        ("kd", "d", "date"),
        ("kt", "d", "timestamp(3) without time zone"),
        ("kt", "ts", "timestamp(3) with time zone"),
    ]
    refused = sorted(  # every row of a key with a zero date, snapshot and changes (deletes too)
        (table, key)
        for table in ("kd", "kt")
        for keys in keys_read(worker, table).values()
        for key in keys
        if any(map(zero_part, key))
    )
    wait_until(lambda: len(dead_letters(worker)) >= len(refused), what="the dead letters")
    assert sorted(key for _error, key in dead_letters(worker)) == refused
    assert {error for error, _key in dead_letters(worker)} == {"DatetimeFieldOverflow"}
    assert worker.catalog.get_connector("out").state == "RUNNING"
    strict = wait_until(
        lambda: (c := worker.catalog.get_connector("strict")).state == "FAILED" and c,
        what="the strict sink to fail",
    )
    assert re.search(r'date/time field value out of range: "\d{4}-\d\d-\d\d', strict.last_error)


def dead_letters(worker) -> list[tuple[str, tuple]]:
    """(error class, (table, key)) of each dead letter of the zero-keyed tables' rows."""
    out = []
    for error_class, raw in run(worker, "SELECT error_class, raw_record FROM rejects")[0].rows:
        row = json.loads(raw)
        key = ("kd", (row["id"], row["d"])) if "id" in row else ("kt", (row["d"], row["ts"]))
        out.append((error_class, key))
    return out


def zero_part(value) -> bool:
    """Whether a value is a date's text with a zero year, month or day."""
    return isinstance(value, str) and re.match(ZERO_PART, value) is not None
