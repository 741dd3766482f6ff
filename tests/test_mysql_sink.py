"""The MySQL/MariaDB sink against the shared MariaDB server: exactly-once append and upsert,
a replayed batch skipped, every Spark type by value, deletes and change order, dead letters,
and every bad input named."""

from __future__ import annotations

import json
import uuid
from datetime import date, datetime
from decimal import Decimal

import pymysql
import pytest

from connectql.connectors.relational.sink import stage_name
from connectql.errors import ConnectQLError
from tests.helpers import read_parquet_rows, replay_last_batch, run, run_rejecting_sinks
from tests.mariadbserver import create_database

pytestmark = pytest.mark.spark

HOST, PORT, USER = "127.0.0.1", 3306, "root"


def server(database: str | None = None):
    return pymysql.connect(
        host=HOST, port=PORT, user=USER, database=database, autocommit=True, charset="utf8mb4"
    )


@pytest.fixture
def db():
    """A fresh database on the shared server, dropped afterwards."""
    name = f"cq_{uuid.uuid4().hex[:8]}"
    with server() as conn:
        create_database(conn, name)
    yield name
    with server() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def connection(database: str) -> str:
    return f"host = '{HOST}', port = {PORT}, user = '{USER}', database = '{database}'"


def sql(database: str, statement: str, params=None) -> list[tuple]:
    with server(database) as conn, conn.cursor() as cur:
        cur.execute(statement, params)
        return [tuple(r) for r in cur.fetchall()]


def json_inbox(tmp_path, name: str, rows: list[dict]):
    inbox = tmp_path / name
    inbox.mkdir()
    (inbox / "a.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return inbox


# ------------------------------------------------------------------ append and upsert


def test_datagen_rows_reach_mysql_appended_and_upserted(worker, db):
    conn = connection(db)
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR gen FROM datagen INTO nums WITH ('rows.total' = 3000,
          run = 'once', 'tasks.max' = 2, seed = 3,
          fields = "id BIGINT SEQUENCE, qty INT RANDOM(1, 9), tag STRING CHOICE('a', 'b')");
        CREATE SINK CONNECTOR app TO mysql FROM nums WITH ({conn}, table = 'appended',
          run = 'once', 'tasks.max' = 2);
        CREATE SINK CONNECTOR ups TO mariadb AS SELECT id, qty * 10 AS qty10, tag FROM nums
          WITH ({conn}, table = '{db}.upserted', 'primary.key' = 'id', run = 'once');
        """,
    )
    worker.wait_for_once()
    expected = read_parquet_rows(
        worker.home / "streams/nums",
        "SELECT count(*), sum(qty), sum(id * qty), string_agg(tag, '' ORDER BY id) FROM t",
    )[0]
    assert expected[0] == 3000
    assert sql(
        db,
        "SELECT count(*), sum(qty), sum(id * qty), group_concat(tag ORDER BY id SEPARATOR '')"
        " FROM appended",
    ) == [(3000, Decimal(expected[1]), Decimal(expected[2]), expected[3])]
    assert sql(db, "SELECT count(*), count(DISTINCT id), sum(qty10) FROM upserted") == [
        (3000, 3000, Decimal(expected[1] * 10))
    ]
    assert sql(
        db,
        "SELECT column_name FROM information_schema.key_column_usage WHERE table_schema = %s"
        " AND table_name = 'upserted' AND constraint_name = 'PRIMARY'",
        (db,),
    ) == [("id",)]
    assert sql(db, "SELECT connector, batch_id >= 0 FROM connectql_sink_progress ORDER BY 1") == [
        ("app", 1),
        ("ups", 1),
    ]
    assert sql(db, "SHOW TABLES LIKE 'cq\\_stage\\_%'") == []  # staging tables dropped
    assert {s.name: s.state for s in worker.catalog.connectors()} == {
        "gen": "FINISHED",
        "app": "FINISHED",
        "ups": "FINISHED",
    }


def test_a_replayed_sink_batch_is_skipped_exactly_once(spark, home, db):
    """Spark replays a batch whose commit was not logged (a crash between the database commit
    and Spark's commit log): the progress table in the target makes the replay a no-op."""
    script = f"""
        CREATE SOURCE CONNECTOR IF NOT EXISTS gen FROM datagen INTO nums WITH (
          'rows.total' = 1000, run = 'once', fields = 'id BIGINT SEQUENCE, v INT RANDOM(1, 9)');
        CREATE SINK CONNECTOR IF NOT EXISTS out TO mysql FROM nums
          WITH ({connection(db)}, table = 'appended', run = 'once');
    """

    def lose_a_drop():
        writer = (home / "checkpoints/out/connectql-writer-id").read_text().strip()
        sql(db, f"CREATE TABLE {stage_name(writer, 0, 7)} (id BIGINT)")

    replay_last_batch(home, script, "out", before_replay=lose_a_drop)
    assert sql(db, "SELECT count(*), count(DISTINCT id) FROM appended") == [(1000, 1000)]
    assert sql(db, "SHOW TABLES LIKE 'cq\\_stage\\_%'") == []  # dropped at the next commit


# ------------------------------------------------------------------ values

TYPED = [
    {
        "id": 1,
        "tiny": -128,
        "small": -32768,
        "i": 2147483647,
        "big": -9223372036854775808,
        "f": 1.5,
        "d": -2.25e300,
        "dec": "-12345678901234.567891",
        "s": 'tab\there, line\nbreak, \\ back, "quoted", \\N, ünïcødé ✓ 😀',
        "b": True,
        "dt": "2024-02-29",
        "ts": "2024-01-02T03:04:05.123456+02:00",
        "ntz": "2024-01-02 03:04:05.123456",
        "h": "00ff5c090a0d4e",
        "arr": [1, None, 3],
        "sarr": ["a b", 'c"d', "e\\f"],
    },
    {"id": 2},  # every other column NULL
    {
        "id": 3,
        "tiny": 0,
        "small": 0,
        "i": 0,
        "big": 0,
        "f": 0.0,
        "d": 0.1,
        "dec": "0.000001",
        "s": "",
        "b": False,
        "dt": "1970-01-01",
        "ts": "1969-12-31T23:59:59.999999Z",
        "ntz": "2038-01-19 03:14:08.000001",
        "h": "",
        "arr": [],
        "sarr": [],
    },
    {"id": 4, "s": "NULL", "ts": "2024-06-30T12:00:00Z", "d": 1.7976931348623157e308},
]
TYPED_SCHEMA = (
    "id BIGINT, tiny TINYINT, small SMALLINT, i INT, big BIGINT, f FLOAT, d DOUBLE,"
    " dec DECIMAL(20,6), s STRING, b BOOLEAN, dt DATE, ts TIMESTAMP, ntz TIMESTAMP_NTZ,"
    " h STRING, arr ARRAY<INT>, sarr ARRAY<STRING>"
)
COLUMNS = "id, tiny, small, i, big, f, d, `dec`, s, b, dt, ts, ntz, bin, arr, sarr"


def test_every_spark_type_round_trips_by_value(worker, db, tmp_path):
    inbox = json_inbox(tmp_path, "typed", TYPED)
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR src FROM file INTO typed WITH (path = '{inbox}', format = json,
          schema = '{TYPED_SCHEMA}', run = 'once');
        CREATE SINK CONNECTOR dst TO mysql AS SELECT id, tiny, small, i, big, f, d, dec, s, b,
          dt, ts, ntz, unhex(h) AS bin, arr, sarr FROM typed
          WITH ({connection(db)}, table = 'typed', run = 'once', 'tasks.max' = 2);
        """,
    )
    worker.wait_for_once()
    assert worker.catalog.get_connector("dst").state == "FINISHED"
    got = sql(db, f"SELECT {COLUMNS} FROM typed ORDER BY id")
    assert got[0] == (
        1,
        -128,
        -32768,
        2147483647,
        -9223372036854775808,
        1.5,
        -2.25e300,
        Decimal("-12345678901234.567891"),
        'tab\there, line\nbreak, \\ back, "quoted", \\N, ünïcødé ✓ 😀',
        1,
        date(2024, 2, 29),
        datetime(2024, 1, 2, 1, 4, 5, 123456),  # the UTC wall time of 03:04:05+02:00
        datetime(2024, 1, 2, 3, 4, 5, 123456),  # NTZ as it is
        bytes.fromhex("00ff5c090a0d4e"),
        "[1, null, 3]",
        '["a b", "c\\"d", "e\\\\f"]',
    )
    assert got[1] == (2,) + (None,) * 15
    assert got[2] == (
        3,
        0,
        0,
        0,
        0,
        0.0,
        0.1,
        Decimal("0.000001"),
        "",
        0,
        date(1970, 1, 1),
        datetime(1969, 12, 31, 23, 59, 59, 999999),
        datetime(2038, 1, 19, 3, 14, 8, 1),
        b"",
        "[]",
        "[]",
    )
    assert got[3][8] == "NULL" and got[3][11] == datetime(2024, 6, 30, 12, 0)
    assert got[3][6] == 1.7976931348623157e308
    types = dict(
        sql(
            db,
            "SELECT column_name, column_type FROM information_schema.columns"
            " WHERE table_schema = %s AND table_name = 'typed'",
            (db,),
        )
    )
    assert types["ts"] == types["ntz"] == "datetime(6)"
    assert types["dec"] == "decimal(20,6)" and types["bin"] == "longblob"
    assert types["s"] == "longtext" and types["b"] == "tinyint(1)"


NESTED_SCHEMA = (
    "id BIGINT, m MAP<STRING, STRING>, st STRUCT<a: INT, b: STRING>, l ARRAY<STRUCT<x: INT>>"
)


def test_nested_columns_are_written_as_json(worker, db, tmp_path):
    """A map, a struct and a list of structs (a broker source's headers, a json message's nested
    fields) become JSON columns holding each value's JSON."""
    rows = [
        {
            "id": 1,
            "m": {"k": "v", "é": "ü"},
            "st": {"a": 1, "b": "x"},
            "l": [{"x": 1}, {"x": None}],
        },
        {"id": 2, "m": None, "st": None, "l": []},
    ]
    inbox = json_inbox(tmp_path, "nested", rows)
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR src FROM file INTO nested WITH (path = '{inbox}', format = json,
          schema = '{NESTED_SCHEMA}', run = 'once');
        CREATE SINK CONNECTOR dst TO mysql FROM nested WITH ({connection(db)}, table = 'nested',
          run = 'once');
        """,
    )
    worker.wait_for_once()
    got = sql(db, "SELECT id, m, st, l FROM nested ORDER BY id")
    assert [(i, *(json.loads(v) if v else v for v in r)) for i, *r in got] == [
        (1, {"k": "v", "é": "ü"}, {"a": 1, "b": "x"}, [{"x": 1}, {"x": None}]),
        (2, None, None, []),
    ]
    types = dict(sql(db, "SELECT column_name, data_type FROM information_schema.columns"
                         " WHERE table_schema = %s AND table_name = 'nested'", (db,)))  # fmt: skip
    assert {types[c] for c in "m st l".split()} <= {"json", "longtext"}  # MariaDB's JSON: longtext


def test_upsert_applies_the_last_change_per_key_by_pos_and_deletes(worker, db, tmp_path):
    """Changes arrive out of __pos order in one batch: the newest per key wins; a key whose
    newest change is a delete is gone, also from a target that had it before; keys that differ
    only in case are different keys."""
    changes = [
        {"k": "a", "v": 3, "__op": "u", "__pos": "0003"},
        {"k": "a", "v": 1, "__op": "c", "__pos": "0001"},
        {"k": "a", "v": 2, "__op": "u", "__pos": "0002"},
        {"k": "A", "v": 10, "__op": "c", "__pos": "0004"},
        {"k": "b", "v": 5, "__op": "c", "__pos": "0005"},
        {"k": "b", "v": None, "__op": "d", "__pos": "0006"},
        {"k": "c", "v": 7, "__op": "c", "__pos": "0008"},
        {"k": "c", "v": None, "__op": "d", "__pos": "0007"},
        {"k": "old", "v": None, "__op": "d", "__pos": "0009"},
    ]
    sql(
        db,
        "CREATE TABLE pre (k VARCHAR(255) COLLATE utf8mb4_bin PRIMARY KEY, v INT, w INT)",
    )
    sql(db, "INSERT INTO pre VALUES ('old', 0, 0), ('kept', 1, 1), ('c', 0, 9)")
    inbox = json_inbox(tmp_path, "changes", changes)
    conn = connection(db)
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR src FROM file INTO ch WITH (path = '{inbox}', format = json,
          schema = 'k STRING, v INT, __op STRING, __pos STRING', run = 'once');
        CREATE SINK CONNECTOR pre TO mysql FROM ch WITH ({conn}, table = 'pre',
          'primary.key' = 'k', run = 'once', 'tasks.max' = 2);
        CREATE SINK CONNECTOR fresh TO mysql FROM ch WITH ({conn}, table = 'fresh',
          'primary.key' = 'k', run = 'once');
        CREATE SINK CONNECTOR log TO mysql FROM ch WITH ({conn}, table = 'log', mode = 'append',
          run = 'once');
        """,
    )
    worker.wait_for_once()
    assert sql(db, "SELECT k, v, w FROM pre ORDER BY k") == [
        ("A", 10, None),
        ("a", 3, None),
        ("c", 7, 9),
        ("kept", 1, 1),
    ]
    assert sql(db, "SELECT k, v FROM fresh ORDER BY k") == [("A", 10), ("a", 3), ("c", 7)]
    assert sql(
        db,
        "SELECT column_type, collation_name, column_key FROM information_schema.columns"
        " WHERE table_schema = %s AND table_name = 'fresh' AND column_name = 'k'",
        (db,),
    ) == [("varchar(255)", "utf8mb4_bin", "PRI")]
    assert sql(db, "SELECT count(*), count(__op), min(__pos) FROM log") == [(9, 9, "0001")]


# ------------------------------------------------------------------ dead letters and bad input


def test_rows_the_target_rejects_go_to_the_dead_letter_stream(worker, db):
    for t in ("strict", "tolerant"):
        sql(db, f"CREATE TABLE {t} (id BIGINT PRIMARY KEY, qty INT, CHECK (qty <= 100))")
    over = run_rejecting_sinks(worker, "mysql", connection(db))
    assert sql(db, "SELECT count(*), max(qty) FROM tolerant") == [(2000 - over, 100)]
    strict = worker.catalog.get_connector("strict")
    assert "CONSTRAINT" in strict.last_error
    assert sql(db, "SELECT count(*) FROM strict") == [(0,)]


def test_sink_errors_are_named_at_create(worker, db):
    sql(db, "CREATE TABLE narrow (id BIGINT)")
    sql(db, "CREATE TABLE grows (id BIGINT)")
    sql(db, "CREATE TABLE nokey (id BIGINT, v INT)")
    run(
        worker,
        "CREATE SOURCE CONNECTOR gen FROM datagen INTO nums WITH ('rows.total' = 10,"
        " run = 'once', fields = 'id BIGINT SEQUENCE, v INT RANDOM(1, 9)')",
    )
    conn = connection(db)
    cases = {
        "table = 'narrow', 'auto.evolve' = false": f"table {db}.narrow has no column v",
        "table = 'missing', 'auto.create' = false": f"table {db}.missing does not exist",
        "table = 'nokey', mode = 'upsert', 'primary.key' = 'id'": "needs a primary key or unique",
        "table = 'x', mode = 'upsert'": "needs a key",
        "table = 'x', 'primary.key' = 'nope'": "key column nope is not in the stream",
    }
    for options, message in cases.items():
        with pytest.raises(ConnectQLError, match=message):
            run(worker, f"CREATE SINK CONNECTOR bad TO mysql FROM nums WITH ({conn}, {options})")
        assert not worker.catalog.has_connector("bad")
    with pytest.raises(ConnectQLError, match="column m has type interval day to second"):
        run(  # (a map is written as JSON: test_nested_columns_are_written_as_json)
            worker,
            f"CREATE SINK CONNECTOR bad TO mysql AS SELECT make_dt_interval(id) AS m FROM nums"
            f" WITH ({conn}, table = 'maps')",
        )
    secret = "s3cr3t-pw-4711"
    with pytest.raises(ConnectQLError, match="access denied for user 'root'") as denied:
        run(
            worker,
            f"CREATE SINK CONNECTOR bad TO mysql FROM nums WITH ({conn},"
            f" password = '{secret}', table = 't')",
        )
    assert secret not in str(denied.value)
    gone = connection("no_such_db_here")
    with pytest.raises(ConnectQLError, match="database 'no_such_db_here' does not exist"):
        run(worker, f"CREATE SINK CONNECTOR bad TO mysql FROM nums WITH ({gone}, table = 't')")
    assert [c.name for c in worker.catalog.connectors()] == ["gen"]
    # auto.evolve (the default) adds the missing column at CREATE
    run(
        worker,
        f"CREATE SINK CONNECTOR ok TO mysql FROM nums WITH ({conn}, table = 'grows',"
        " 'initial.state' = 'paused')",
    )
    assert sql(
        db,
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s"
        " AND table_name = 'grows' ORDER BY ordinal_position",
        (db,),
    ) == [("id",), ("v",)]
