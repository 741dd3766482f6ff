"""connectql.connectors.postgres.pgoutput (the pgoutput message decoder) and pgtext (values from
their text form) against a real PostgreSQL with wal_level=logical."""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import secrets
import uuid
from decimal import Decimal

import psycopg
import pytest
from psycopg import sql

from connectql.connectors.postgres import cdc
from connectql.connectors.postgres.pgoutput import (
    UNCHANGED_TOAST,
    Change,
    Commit,
    Decoder,
)
from connectql.connectors.postgres.pgtext import to_python
from tests.pgserver import PrivatePostgres, create_database

UTC = dt.timezone.utc


# ---------------------------------------------------------------------------------------------
# fixtures and helpers
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def db(pg_logical):  # noqa: F811
    return create_database(pg_logical.conninfo(), "pgoutput_test")


@pytest.fixture
def writer(db):
    """A connection that writes, committing synchronously so a peek sees the commit at once
    (the private server runs with synchronous_commit=off, and peek stops at the WAL flush)."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")
        conn.execute("SET TimeZone = 'Asia/Kolkata'")  # must not matter for the output
        yield conn


@pytest.fixture
def reader(db):
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SET TimeZone = 'UTC'")
        conn.execute("SET DateStyle = 'ISO'")
        conn.execute("SET IntervalStyle = 'postgres'")
        conn.execute("SET bytea_output = 'hex'")
        yield conn


@pytest.fixture
def slot(reader, request):
    name = re.sub(r"[^a-z0-9_]", "_", "s_" + request.node.name.lower())[:60]
    reader.execute(
        "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
        (name,),
    )
    reader.execute(f"DROP PUBLICATION IF EXISTS {name}")
    reader.execute(f"CREATE PUBLICATION {name} FOR ALL TABLES")
    reader.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (name,))
    yield name
    reader.execute("SELECT pg_drop_replication_slot(%s)", (name,))
    reader.execute(f"DROP PUBLICATION {name}")


def peek(conn, slot, upto_lsn=None, upto_nchanges=None):
    """[(lsn, decoded message)] of the slot's changes (cdc.peek: upto_lsn inclusive)."""
    return list(cdc.peek(conn, slot, upto_lsn, upto_nchanges))


def changes(conn, slot, table=None):
    return [
        rec
        for _lsn, rec in peek(conn, slot)
        if isinstance(rec, Change) and (table is None or rec.table == table)
    ]


def same(a, b) -> bool:
    """Equality that also checks types, treats NaN as equal to NaN and -0.0 != 0.0."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, Decimal):
        if a.is_nan() or b.is_nan():
            return a.is_nan() and b.is_nan()
        return a == b
    if isinstance(a, dt.datetime):
        return a == b and a.utcoffset() == b.utcoffset()
    return a == b


def decoded(change_values, types):
    return {c: to_python(v, types[c]) for c, v in change_values.items()}


def assert_row(got: dict, want: dict, what: str):
    assert set(got) == set(want), f"{what}: columns {sorted(got)} != {sorted(want)}"
    bad = {c: (got[c], want[c]) for c in want if not same(got[c], want[c])}
    assert not bad, f"{what}: mismatches (got, want): {bad}"


# ---------------------------------------------------------------------------------------------
# the all-types table
# ---------------------------------------------------------------------------------------------

# (column, DDL type, type name format_type prints)
COLUMNS = [
    ("Order Id", "integer PRIMARY KEY", "integer"),
    ("s", "smallint", "smallint"),
    ("i", "integer", "integer"),
    ("b", "bigint", "bigint"),
    ("r", "real", "real"),
    ("d", "double precision", "double precision"),
    ("n", "numeric", "numeric"),
    ("n2", "numeric(10,2)", "numeric(10,2)"),
    ("bo", "boolean", "boolean"),
    ("t", "text", "text"),
    ("vc", "varchar(40)", "character varying(40)"),
    ("ch", "char(5)", "character(5)"),
    ("nm", "name", "name"),
    ("dte", "date", "date"),
    ("ts", "timestamp", "timestamp without time zone"),
    ("ts3", "timestamp(3)", "timestamp(3) without time zone"),
    ("tz", "timestamptz", "timestamp with time zone"),
    ("tz3", "timestamptz(3)", "timestamp(3) with time zone"),
    ("tm", "time", "time without time zone"),
    ("tm2", "time(2)", "time(2) without time zone"),
    ("by", "bytea", "bytea"),
    ("j", "json", "json"),
    ("jb", "jsonb", "jsonb"),
    ("u", "uuid", "uuid"),
    ("ia", "integer[]", "integer[]"),
    ("sa", "smallint[]", "smallint[]"),
    ("ba", "bigint[]", "bigint[]"),
    ("ra", "real[]", "real[]"),
    ("fa", "double precision[]", "double precision[]"),
    ("na", "numeric[]", "numeric[]"),
    ("boa", "boolean[]", "boolean[]"),
    ("ta", "text[]", "text[]"),
    ("va", "varchar(10)[]", "character varying(10)[]"),
    ("cha", "char(3)[]", "character(3)[]"),
    ("da", "date[]", "date[]"),
    ("tsa", "timestamp[]", "timestamp without time zone[]"),
    ("tza", "timestamptz[]", "timestamp with time zone[]"),
    ("tma", "time[]", "time without time zone[]"),
    ("bya", "bytea[]", "bytea[]"),
    ("ja", "jsonb[]", "jsonb[]"),
    ("ua", "uuid[]", "uuid[]"),
]
TYPES = {c: printed for c, _ddl, printed in COLUMNS}
# how a value goes into the INSERT: a cast to the column type (json needs it for a str)
CASTS = {c: ddl.replace(" PRIMARY KEY", "") for c, ddl, _p in COLUMNS}

IST = dt.timezone(dt.timedelta(hours=5, minutes=30))
NST = dt.timezone(-dt.timedelta(hours=3, minutes=30))
AWKWARD = [
    "it's",
    "''",
    'a "quoted" word',
    "x: y [z] {w} (v)",
    "  spaces  ",
    "",
    "null",
    "NULL",
    "unchanged-toast-datum",
    " new-tuple: x[text]:'y'",
    "line1\nline2\ttab\r",
    "back\\slash \\x41",
    "üñí€😀",
    "a,b",
    "{braces}",
]


def full_row(oid: int) -> dict:
    return {
        "Order Id": oid,
        "s": -32768,
        "i": 2147483647,
        "b": -9223372036854775808,
        "r": 0.1,
        "d": 0.1 + 0.2,
        "n": Decimal("123456789012345678901234567890.000000000123456789"),
        "n2": Decimal("-12345678.90"),
        "bo": True,
        "t": "it's a: \"q\" [x] {y} 'z' \\ ü",
        "vc": " lead and trail ",
        "ch": "ab",
        "nm": "some name",
        "dte": dt.date(2024, 2, 29),
        "ts": dt.datetime(2024, 2, 29, 23, 59, 59, 999999),
        "ts3": dt.datetime(2001, 1, 1, 0, 0, 0, 123000),
        "tz": dt.datetime(2024, 1, 2, 3, 4, 5, 678901, tzinfo=IST),
        "tz3": dt.datetime(1999, 12, 31, 22, 30, 0, 500000, tzinfo=NST),
        "tm": dt.time(23, 59, 59, 999999),
        "tm2": dt.time(0, 0, 0, 120000),
        "by": bytes(range(256)),
        "j": '{"a": "b\'c",  "k": [1, null, "x y"]}',
        "jb": '{"a": "b\'c", "k": [1, null, "x y"]}',
        "u": uuid.UUID("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        "ia": [1, None, -3],
        "sa": [32767],
        "ba": [9223372036854775807, None],
        "ra": [1.5, float("nan"), float("-inf"), 0.1],
        "fa": [float("nan"), float("inf"), -0.0, 1e300, 5e-324],
        "na": [Decimal("1.50"), None, Decimal("NaN"), Decimal("-0.001")],
        "boa": [True, False, None],
        "ta": AWKWARD + [None],
        "va": ["a b", 'c"d', "", None],
        "cha": ["x", "yz", None],
        "da": [dt.date(1, 1, 1), None, dt.date(9999, 12, 31)],
        "tsa": [dt.datetime(2020, 5, 6, 7, 8, 9), None],
        "tza": [dt.datetime(2020, 5, 6, 7, 8, 9, 1, tzinfo=NST), None],
        "tma": [dt.time(1, 2, 3), None],
        "bya": [b"\x00\x01\\\"'", None, b""],
        "ja": ['{"k": "v"}', "[]", None],
        "ua": [uuid.UUID("00000000-0000-0000-0000-000000000001"), None],
    }


def sparse_row(oid: int) -> dict:
    """Mostly NULLs, empty strings, empty arrays, NaN / infinities."""
    row = dict.fromkeys(TYPES)
    row.update(
        {
            "Order Id": oid,
            "r": float("nan"),
            "d": float("-inf"),
            "n": Decimal("NaN"),
            "bo": False,
            "t": "",
            "vc": "",
            "ch": "",
            "by": b"",
            "ia": [],
            "ta": [],
            "fa": [],
            "j": "null",
            "jb": "[]",
        }
    )
    return row


def expected(row: dict) -> dict:
    """What to_python must give back for an inserted row."""
    out = {}
    for c, v in row.items():
        if v is None:
            out[c] = None
        elif c == "ch":
            out[c] = v.ljust(5)
        elif c == "cha":
            out[c] = [None if x is None else x.ljust(3) for x in v]
        elif c in ("tz", "tz3"):
            out[c] = v.astimezone(UTC)
        elif c == "tza":
            out[c] = [None if x is None else x.astimezone(UTC) for x in v]
        elif c == "u":
            out[c] = str(v)
        elif c == "ua":
            out[c] = [None if x is None else str(x) for x in v]
        elif c == "jb":
            out[c] = json.loads(v)  # jsonb is normalized: compare parsed (see check_row)
        elif c == "ja":
            out[c] = [None if x is None else json.loads(x) for x in v]
        else:
            out[c] = v
    return out


def check_values(got_text: dict, types: dict, row: dict, what: str):
    got = decoded(got_text, types)
    for c in ("jb", "ja"):
        if c in got and got[c] is not None:
            assert isinstance(got[c], (str, list)), what
            got[c] = (
                json.loads(got[c])
                if isinstance(got[c], str)
                else [None if x is None else json.loads(x) for x in got[c]]
            )
    assert_row(got, expected(row), what)
    for c in ("tz", "tz3"):
        if got.get(c) is not None:
            assert got[c].tzinfo is UTC, f"{what}: {c} not in UTC: {got[c]!r}"


def insert(conn, table: str, row: dict):
    cols = list(row)
    conn.execute(
        sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(
            sql.Identifier(table),
            sql.SQL(", ").join(map(sql.Identifier, cols)),
            sql.SQL(", ").join(sql.SQL("%s::" + CASTS[c]) for c in cols),
        ),
        [row[c] for c in cols],
    )


@pytest.fixture
def alltypes(writer):
    writer.execute('DROP TABLE IF EXISTS "All Types"')
    writer.execute(
        sql.SQL('CREATE TABLE "All Types" ({})').format(
            sql.SQL(", ").join(
                sql.SQL("{} " + ddl).format(sql.Identifier(c)) for c, ddl, _p in COLUMNS
            )
        )
    )
    return "All Types"


# ---------------------------------------------------------------------------------------------
# tests
# ---------------------------------------------------------------------------------------------


def test_insert_update_delete_roundtrip_every_type(writer, reader, slot, alltypes):
    rows = [full_row(1), sparse_row(2)]
    for row in rows:
        insert(writer, alltypes, row)
    # the inserted values as PostgreSQL itself sees them agree with our expectations
    for row in rows:
        cur = writer.execute(
            'SELECT t, ch, n FROM "All Types" WHERE "Order Id" = %s', (row["Order Id"],)
        )
        t, ch, n = cur.fetchone()
        assert t == row["t"] and n == row["n"] or (n.is_nan() and row["n"].is_nan())
        assert ch == (None if row["ch"] is None else row["ch"].ljust(5))

    # update without key change, then a primary key change
    writer.execute('UPDATE "All Types" SET t = %s WHERE "Order Id" = 1', ("upd ' \" :",))
    writer.execute('UPDATE "All Types" SET "Order Id" = 20 WHERE "Order Id" = 2')
    writer.execute('DELETE FROM "All Types" WHERE "Order Id" = 20')
    # REPLICA IDENTITY FULL: old row images on update and delete
    writer.execute('ALTER TABLE "All Types" REPLICA IDENTITY FULL')
    writer.execute('UPDATE "All Types" SET i = 7 WHERE "Order Id" = 1')
    writer.execute('DELETE FROM "All Types" WHERE "Order Id" = 1')

    got = changes(reader, slot, table="public.All Types")
    assert [c.op for c in got] == ["c", "c", "u", "u", "d", "u", "d"]
    for c in got:
        # a delete's old key in default replica identity only has the key column
        for col, t in c.types.items():
            assert t == TYPES[col], (col, t)
    assert got[0].types == TYPES  # every column, printed type names as listed

    check_values(got[0].values, got[0].types, rows[0], "insert full")
    check_values(got[1].values, got[1].types, rows[1], "insert sparse")
    assert got[1].values["t"] == "" and got[1].values["ch"] == "     "
    assert got[1].values["ia"] == "{}" and got[1].values["s"] is None

    upd = dict(rows[0], t="upd ' \" :")
    assert got[2].old_key is None
    check_values(got[2].values, got[2].types, upd, "update")

    assert got[3].old_key == {"Order Id": "2"}
    check_values(got[3].values, got[3].types, dict(rows[1], **{"Order Id": 20}), "pk update")

    assert got[4].values == {"Order Id": "20"} and got[4].old_key is None
    assert got[4].types == TYPES  # the relation's types, for every column

    # FULL identity: the old image holds every column, NULLs included
    assert got[5].old_key is not None
    check_values(got[5].old_key, TYPES, upd, "full identity old key")
    check_values(got[5].values, got[5].types, dict(upd, i=7), "full identity update")
    check_values(got[6].values, got[6].types, dict(upd, i=7), "full identity delete")


def test_transactions_and_commit_timestamps(writer, reader, slot):
    writer.execute("DROP TABLE IF EXISTS tx")
    writer.execute("CREATE TABLE tx (id int PRIMARY KEY, v text)")
    xids = []
    for k in range(2):
        with writer.transaction():
            xids.append(int(writer.execute("SELECT pg_current_xact_id()::text").fetchone()[0]))
            writer.execute("INSERT INTO tx VALUES (%s, 'a'), (%s, 'b')", (2 * k, 2 * k + 1))
            committed_at = writer.execute("SELECT now()").fetchone()[0]
    writer.execute("TRUNCATE tx")
    writer.execute("SELECT pg_logical_emit_message(true, 'pfx', 'BEGIN 1')")

    recs = [r for _lsn, r in peek(reader, slot)]
    kinds = [type(r).__name__ if r is not None else None for r in recs]
    # a Relation message (None) precedes the first change of each decoding session
    assert kinds[:9] == ["Begin", None, "Change", "Change", "Commit"] + [
        "Begin", "Change", "Change", "Commit"
    ]  # fmt: skip
    assert recs[0].xid == xids[0] and recs[5].xid == xids[1]
    assert [r.values for r in recs[:9] if isinstance(r, Change)] == [
        {"id": str(i), "v": v} for i, v in [(0, "a"), (1, "b"), (2, "a"), (3, "b")]
    ]
    # the TRUNCATE and the logical message carry no change
    assert not any(isinstance(r, Change) for r in recs[9:])
    # commit time: the commit happened just after the transaction's now()
    commit = recs[8]
    assert isinstance(commit, Commit) and commit.lsn < commit.end_lsn
    want = committed_at.timestamp() * 1000
    assert want - 1 <= commit.ts_ms <= want + 5000
    # the session's time zone changes no instant
    reader.execute("SET TimeZone = 'America/St_Johns'")
    again = [r.ts_ms for _l, r in peek(reader, slot) if isinstance(r, Commit)]
    assert again == [r.ts_ms for r in recs if isinstance(r, Commit)]


def test_timestamptz_in_other_session_timezones(writer, reader, slot):
    writer.execute("DROP TABLE IF EXISTS tzs")
    writer.execute("CREATE TABLE tzs (id int PRIMARY KEY, tz timestamptz, tza timestamptz[])")
    v = dt.datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC)
    writer.execute("INSERT INTO tzs VALUES (1, %s, %s)", (v, [v, None]))
    for zone in ("UTC", "America/St_Johns", "Asia/Kathmandu", "Pacific/Kiritimati"):
        reader.execute(sql.SQL("SET TimeZone = {}").format(sql.Literal(zone)))
        (c,) = changes(reader, slot, table="public.tzs")
        got = decoded(c.values, c.types)
        assert got["tz"] == v and got["tz"].tzinfo is UTC, (zone, c.values)
        assert got["tza"] == [v, None], (zone, c.values)


def test_awkward_identifiers_and_other_types(writer, reader, slot):
    writer.execute('DROP SCHEMA IF EXISTS "My Schema" CASCADE')
    writer.execute('CREATE SCHEMA "My Schema"')
    writer.execute("""CREATE TYPE "My Schema"."mood x" AS ENUM ('ok', 'so so')""")
    writer.execute('CREATE DOMAIN "My Schema".posint AS int CHECK (VALUE > 0)')
    writer.execute(
        """CREATE TABLE "My Schema"."we:ird.tbl" (
            "x y: [z]" int PRIMARY KEY, "new-tuple" text, "old-key" text, "select" int,
            "a""b" int, "ÄÖ" text, m "My Schema"."mood x", p "My Schema".posint,
            bt bit(3), vb varbit, iv interval, ttz timetz, c "char", mo money,
            lb int[], md int[], inf_d date, inf_ts timestamp, inf_tz timestamptz, bc date,
            ib int4range)"""
    )
    writer.execute(
        """INSERT INTO "My Schema"."we:ird.tbl" VALUES
           (1, 'old-key: a', 'new-tuple: b', 7, 8, 'ü', 'so so', 5, B'101', B'1', '1 day 02:00',
            '01:02:03+04', 'z', 12.5, '[0:2]={1,2,3}', '{{1,2},{3,NULL}}', 'infinity',
            '-infinity', 'infinity', '0044-03-15 BC', '[1,5)')"""
    )
    writer.execute('ALTER TABLE "My Schema"."we:ird.tbl" REPLICA IDENTITY FULL')
    writer.execute("""UPDATE "My Schema"."we:ird.tbl" SET "new-tuple" = 'x', bc = NULL""")

    ins, upd = changes(reader, slot, table="My Schema.we:ird.tbl")
    assert list(ins.values) == [
        "x y: [z]", "new-tuple", "old-key", "select", 'a"b', "ÄÖ", "m", "p", "bt", "vb", "iv",
        "ttz", "c", "mo", "lb", "md", "inf_d", "inf_ts", "inf_tz", "bc", "ib",
    ]  # fmt: skip
    assert (
        ins.types["m"] == '"My Schema"."mood x"' and ins.types["p"] == "integer"
    )  # a domain: its base type
    assert ins.types["c"] == '"char"' and ins.types["bt"] == "bit(3)"
    assert ins.types["vb"] == "bit varying" and ins.types["ttz"] == "time with time zone"
    got = decoded({c: v for c, v in ins.values.items() if c != "bc"}, ins.types)
    assert got["x y: [z]"] == 1 and got["select"] == 7 and got['a"b'] == 8
    assert got["new-tuple"] == "old-key: a" and got["old-key"] == "new-tuple: b"
    assert got["ÄÖ"] == "ü" and got["m"] == "so so" and got["p"] == 5
    assert got["bt"] == "101" and got["vb"] == "1" and got["iv"] == "1 day 02:00:00"
    assert got["ttz"] == "01:02:03+04" and got["c"] == "z" and got["mo"] == "$12.50"
    assert got["lb"] == [1, 2, 3] and got["md"] == [[1, 2], [3, None]]
    assert got["inf_d"] == dt.date.max and got["inf_ts"] == dt.datetime.min
    assert got["inf_tz"] == dt.datetime.max.replace(tzinfo=UTC)
    assert got["ib"] == "[1,5)"
    assert ins.values["bc"] == "0044-03-15 BC"
    with pytest.raises(ValueError):
        to_python(ins.values["bc"], ins.types["bc"])

    assert upd.old_key is not None and upd.old_key["bc"] == "0044-03-15 BC"
    assert upd.old_key["new-tuple"] == "old-key: a" and upd.values["new-tuple"] == "x"
    assert upd.values["bc"] is None and "bc" in upd.values


def test_unchanged_toast_datum(writer, reader, slot):
    writer.execute("DROP TABLE IF EXISTS toasty")
    writer.execute("CREATE TABLE toasty (id int PRIMARY KEY, big text, n int, bigarr text[])")
    big = secrets.token_hex(20000)  # incompressible enough to be stored out of line
    writer.execute("INSERT INTO toasty VALUES (1, %s, 1, %s)", (big, [big, None]))
    writer.execute("UPDATE toasty SET n = 2")
    ins, upd = changes(reader, slot, table="public.toasty")
    assert ins.values["big"] == big and to_python(ins.values["bigarr"], "text[]") == [big, None]
    assert upd.values["big"] is UNCHANGED_TOAST and upd.values["bigarr"] is UNCHANGED_TOAST
    assert upd.values["n"] == "2" and upd.values["id"] == "1"


@pytest.mark.parametrize(
    "pg_type, literal, want",
    [
        ("smallint", "-5", -5),
        ("real", "'Infinity'", float("inf")),
        ("numeric", "'Infinity'", Decimal("Infinity")),
        ("numeric", "'-Infinity'", Decimal("-Infinity")),
        ("numeric(5,3)", "0.5", Decimal("0.500")),
        ("boolean", "false", False),
        ("bytea", "'\\x'", b""),
        ("date", "'-infinity'", dt.date.min),
        ("timestamp", "'infinity'", dt.datetime.max),
        ("timestamptz", "'-infinity'", dt.datetime.min.replace(tzinfo=UTC)),
        ("time", "'00:00'", dt.time(0)),
        ("text[]", "ARRAY['\"', '\\', ' ', 'NULL', 'null']", ['"', "\\", " ", "NULL", "null"]),
        ("boolean[]", "'{}'", []),
        ("numeric[]", "'{Infinity,-1e-5}'", [Decimal("Infinity"), Decimal("-0.00001")]),
        ("varchar[]", '\'{"}","{"}\'', ["}", "{"]),
    ],
)
def test_single_values(writer, reader, slot, pg_type, literal, want):
    writer.execute("DROP TABLE IF EXISTS one")
    writer.execute(f"CREATE TABLE one (v {pg_type})")
    writer.execute(f"INSERT INTO one VALUES ({literal})")
    (c,) = changes(reader, slot, table="public.one")
    got = to_python(c.values["v"], c.types["v"])
    assert same(got, want), (c.values, got, want)
    # the same value through the type name with its modifier also works
    assert same(to_python(c.values["v"], pg_type), want)


def test_escape_bytea_output(writer, reader, slot):
    writer.execute("DROP TABLE IF EXISTS blob")
    writer.execute("CREATE TABLE blob (v bytea, a bytea[])")
    data = bytes(range(256)) + b"\\\\x"
    writer.execute("INSERT INTO blob VALUES (%s, %s)", (data, [data, b""]))
    reader.execute("SET bytea_output = 'escape'")
    (c,) = changes(reader, slot, table="public.blob")
    assert not c.values["v"].startswith("\\x")
    assert to_python(c.values["v"], "bytea") == data
    assert to_python(c.values["a"], "bytea[]") == [data, b""]


def test_the_decoder_rejects_what_it_cannot_read():
    decoder = Decoder(lambda oid, typmod: "integer")
    with pytest.raises(ValueError, match="Relation"):
        decoder.feed(b"I" + (16384).to_bytes(4, "big") + b"N\x00\x00")
    rel = b"R" + (7).to_bytes(4, "big") + b"public\0x\0d" + (1).to_bytes(2, "big")
    decoder.feed(rel + b"\x01id\0" + (23).to_bytes(4, "big") + (-1).to_bytes(4, "big", signed=True))
    one = (1).to_bytes(2, "big")
    assert decoder.feed(b"I" + (7).to_bytes(4, "big") + b"N" + one + b"t\0\0\0\x015") == Change(
        "public.x", "c", {"id": "5"}, {"id": "integer"}
    )
    with pytest.raises(ValueError, match="value kind"):
        decoder.feed(b"I" + (7).to_bytes(4, "big") + b"N" + one + b"z")
    assert decoder.feed(b"M\x00") is None  # a logical message: no change
    with pytest.raises(ValueError):
        to_python("maybe", "boolean")
    with pytest.raises(ValueError):
        to_python("24:00:00", "time without time zone")
    with pytest.raises(ValueError):
        to_python("02/01/2024", "date")


# ---------------------------------------------------------------------------------------------
# the LSN semantics the Postgres source relies on
# ---------------------------------------------------------------------------------------------


def _lsn(conn, expr: str, *params) -> int:
    text = conn.execute(f"SELECT ({expr})::text", params).fetchone()[0]
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) + int(lo, 16)


def _fmt(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def test_lsn_semantics(writer, reader, slot):
    """How peek / advance treat LSNs with pgoutput (what a Postgres source relies on)."""
    writer.execute("DROP TABLE IF EXISTS lsns")
    writer.execute("CREATE TABLE lsns (id int PRIMARY KEY)")
    created = _lsn(
        reader, "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = %s", slot
    )
    other = slot + "_b"
    reader.execute(f"CREATE PUBLICATION {other} FOR ALL TABLES")
    reader.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (other,))
    try:
        before = _lsn(writer, "pg_current_wal_insert_lsn()")
        writer.execute("INSERT INTO lsns VALUES (1), (2)")
        after1 = _lsn(writer, "pg_current_wal_insert_lsn()")
        writer.execute("INSERT INTO lsns VALUES (3)")
        rows = [(lsn, r) for lsn, r in peek(reader, slot) if r is not None]
        kinds = [type(r).__name__ for _l, r in rows]
        assert kinds == ["Begin", "Change", "Change", "Commit", "Begin", "Change", "Commit"]
        (b1, _r1), (c1, t1), (b2, _r2), (c2, _t2) = rows[0], rows[3], rows[4], rows[6]
        # a Commit row's lsn is the end of the commit record, where the next transaction's
        # first record starts
        assert created <= b1 == rows[1][0] < rows[2][0] < c1 == t1.end_lsn
        assert before < c1 <= after1 and b2 == c1 < c2

        def committed(upto=None, n=None, on=slot):
            return [lsn for lsn, r in peek(reader, on, upto, n) if isinstance(r, Commit)]

        # cdc.peek's upto is inclusive
        assert committed(c1) == [c1]
        assert committed(c1 - 1) == [c1]
        assert committed(c2) == [c1, c2]
        # upto_nchanges stops only at a transaction boundary
        assert committed(None, 1) == [c1]
        assert committed(None, 6) == [c1, c2]
        # advancing to a COMMIT row's lsn consumes that transaction and keeps the next one
        reader.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (other, _fmt(c1)))
        assert committed(on=other) == [c2]
        # advancing to the same lsn again is a no-op; going back is an error
        reader.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (other, _fmt(c1)))
        with pytest.raises(psycopg.errors.ObjectNotInPrerequisiteState):
            reader.execute(
                "SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (other, _fmt(c1 - 8))
            )
    finally:
        reader.execute("SELECT pg_drop_replication_slot(%s)", (other,))
        reader.execute(f"DROP PUBLICATION {other}")


# ---------------------------------------------------------------------------------------------
# the server fixtures themselves
# ---------------------------------------------------------------------------------------------


def test_pg_logical_fixture(pg_logical):  # noqa: F811
    assert pg_logical.host == "127.0.0.1" and pg_logical.user == "postgres"
    with psycopg.connect(pg_logical.conninfo()) as conn:
        assert conn.execute("SHOW wal_level").fetchone()[0] == "logical"
        assert conn.execute("SHOW port").fetchone()[0] == str(pg_logical.port)
        assert int(conn.execute("SHOW max_replication_slots").fetchone()[0]) == 20


def test_private_postgres_start_stop():
    server = PrivatePostgres()
    server.start()
    base = server.base
    try:
        ci = create_database(server.conninfo(), "Weird Name")
        ci = create_database(server.conninfo(), "Weird Name")  # drops and recreates
        conn = psycopg.connect(ci, autocommit=True)
        try:
            assert conn.execute("SELECT current_database()").fetchone()[0] == "Weird Name"
            # create_database forces other sessions out
            create_database(server.conninfo(), "Weird Name")
            with pytest.raises(psycopg.OperationalError):
                conn.execute("SELECT 1")
        finally:
            conn.close()
    finally:
        server.stop()
    import os

    assert base and not os.path.exists(base)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(f"host=127.0.0.1 port={server.port} user=postgres connect_timeout=2")


def test_pg_shared_fixture(pg_shared):  # noqa: F811
    assert (pg_shared.host, pg_shared.port, pg_shared.user) == ("127.0.0.1", 5432, "postgres")
    name = "connectql_pgserver_selftest"
    ci = create_database(pg_shared.conninfo(), name)
    try:
        with psycopg.connect(ci) as conn:
            assert conn.execute("SELECT current_database()").fetchone()[0] == name
    finally:
        with psycopg.connect(pg_shared.conninfo(), autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
