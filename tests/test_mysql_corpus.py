"""The MySQL type corpus: one MariaDB table with every type the README's MySQL type table lists
and the awkward values (NULLs, '' against NULL, the strings 'NULL' and \\N, control characters,
4-byte UTF-8, limits, zero dates, every byte value, values over 1 MB), copied by a cdc source
into PostgreSQL through the snapshot and then through the binlog (INSERT, UPDATE of small and of
large columns, DELETE); the target must equal the source value by value, and a row must read the
same from the snapshot and from the binlog, whatever the server's binlog_row_metadata."""

from __future__ import annotations

import datetime as dt
import ipaddress
import random
import struct
import uuid
from decimal import Decimal

import pymysql
import pytest

from tests.helpers import read_parquet_rows, run, wait_until
from tests.mariadbserver import mariadb_binlog  # noqa: F401 (fixture)
from tests.test_mysql import My, binlog_db, pg_db, pg_rows, streaming  # noqa: F401 (fixtures)

pytestmark = pytest.mark.spark

COLUMNS = {
    "ti": "TINYINT", "tiu": "TINYINT UNSIGNED", "si": "SMALLINT", "siu": "SMALLINT UNSIGNED",
    "mi": "MEDIUMINT", "miu": "MEDIUMINT UNSIGNED", "i": "INT", "iu": "INT UNSIGNED",
    "bi": "BIGINT", "biu": "BIGINT UNSIGNED", "d": "DECIMAL(38,10)", "d2": "DECIMAL(12,2)",
    "f": "FLOAT", "db": "DOUBLE", "ch": "CHAR(8)", "vc": "VARCHAR(64)", "tt": "TINYTEXT",
    "tx": "TEXT", "mt": "MEDIUMTEXT", "lt": "LONGTEXT", "js": "JSON",
    "en": "ENUM('a','b c','it''s')", "st": "SET('x','y','z')", "dd": "DATE",
    "dtm": "DATETIME(6)", "dt0": "DATETIME", "ts": "TIMESTAMP(6) NULL", "tm": "TIME(6)",
    "y": "YEAR", "b1": "BIT(1)", "b9": "BIT(9)", "b64": "BIT(64)", "bin": "BINARY(16)",
    "vb": "VARBINARY(300)", "tb": "TINYBLOB", "bl": "BLOB", "mb": "MEDIUMBLOB",
    "lb": "LONGBLOB", "uu": "UUID", "i4": "INET4", "i6": "INET6", "pt": "POINT",
    "ge": "GEOMETRY", "ls": "LINESTRING", "pg": "POLYGON", "mpt": "MULTIPOINT",
    "mls": "MULTILINESTRING", "mpg": "MULTIPOLYGON", "gc": "GEOMETRYCOLLECTION",
}  # fmt: skip
SPATIAL = {"POINT", "GEOMETRY", "LINESTRING", "POLYGON", "MULTIPOINT", "MULTILINESTRING"}
SPATIAL |= {"MULTIPOLYGON", "GEOMETRYCOLLECTION"}
NAMES = list(COLUMNS)
# the type auto.create gives each in a PostgreSQL target (README)
PG_TYPES = {
    "ti": "smallint", "tiu": "smallint", "si": "smallint", "siu": "integer", "mi": "integer",
    "miu": "integer", "i": "integer", "iu": "bigint", "bi": "bigint", "biu": "numeric(20,0)",
    "d": "numeric(38,10)", "d2": "numeric(12,2)", "f": "real", "db": "double precision",
    "ch": "character(8)", "vc": "character varying(64)", "tt": "text", "tx": "text",
    "mt": "text", "lt": "text", "js": "text", "en": "text", "st": "text", "dd": "date",
    "dtm": "timestamp(6) without time zone", "dt0": "timestamp(0) without time zone",
    "ts": "timestamp(6) with time zone", "tm": "interval", "y": "smallint", "b1": "boolean",
    "b9": "bigint", "b64": "numeric(20,0)", "uu": "uuid", "i4": "inet", "i6": "inet",
    **dict.fromkeys(["bin", "vb", "tb", "bl", "mb", "lb", "pt", "ge", "ls", "pg"], "bytea"),
    **dict.fromkeys(["mpt", "mls", "mpg", "gc"], "bytea"),
}  # fmt: skip
EVERY_BYTE = bytes(range(256))


def _wkb(kind: int, body: bytes) -> bytes:
    return b"\x01" + struct.pack("<I", kind) + body


def _pts(*xy: float) -> bytes:
    return struct.pack("<I", len(xy) // 2) + struct.pack(f"<{len(xy)}d", *xy)


def _many(kind: int, *parts: bytes) -> bytes:
    return _wkb(kind, struct.pack("<I", len(parts)) + b"".join(parts))


POINT = _wkb(1, struct.pack("<dd", 1, 2))
LINE = _wkb(2, _pts(0, 0, 1, 1, 2, 1))
SQUARE = _wkb(3, struct.pack("<I", 1) + _pts(0, 0, 4, 0, 4, 4, 0, 4, 0, 0))
HOLED = _wkb(3, struct.pack("<I", 2) + _pts(0, 0, 4, 0, 4, 4, 0, 0) + _pts(1, 1, 2, 1, 2, 2, 1, 1))
# POINT(1 2) with SRID 4326 as EWKB, as PostGIS writes it
POINT_4326 = bytes.fromhex("0101000020e6100000000000000000f03f0000000000000040")
BIG = random.Random(25)

ROWS = {
    1: {},  # every column NULL
    2: {  # empty and zero values
        **dict.fromkeys(["ti", "tiu", "si", "siu", "mi", "miu", "i", "iu", "bi", "biu"], 0),
        "d": Decimal("0E-10"), "d2": Decimal("0.00"), "f": 0.0, "db": 0.0, "ch": "", "vc": "",
        "tt": "", "tx": "", "mt": "", "lt": "", "js": "{}", "en": "a", "st": "",
        "dd": "0000-00-00", "dtm": "0000-00-00 00:00:00", "dt0": "0000-00-00 00:00:00",
        "ts": "0000-00-00 00:00:00", "tm": "00:00:00", "y": 0, "b1": 0, "b9": 0, "b64": 0,
        "bin": b"", "vb": b"", "tb": b"", "bl": b"", "mb": b"", "lb": b"",
        "uu": "00000000-0000-0000-0000-000000000000", "i4": "0.0.0.0", "i6": "::",
    },
    3: {  # minimums, and text that trips up escaping
        "ti": -128, "tiu": 0, "si": -32768, "siu": 0, "mi": -8388608, "miu": 0,
        "i": -2147483648, "iu": 0, "bi": -9223372036854775808, "biu": 0,
        "d": Decimal("-9999999999999999999999999999.9999999999"),
        "d2": Decimal("-9999999999.99"), "f": -3.4028234e38, "db": -1.7976931348623157e308,
        "ch": "NULL", "vc": "\\N", "tt": "tab\there\ttoo", "tx": "a\nb\r\nc\rd\\e'f\"g`h",
        "mt": "héllo wörld ✓ 日本語 Ωmega", "lt": "4-byte: 😀🎉 𝄞 \U0010ffff",
        "js": '{"k": "v\\n\\t", "u": "é😀", "n": null, "a": [1, 2.50, true, "\\\\N"]}',
        "en": "b c", "st": "x,z", "dd": "0001-00-00", "dtm": "1000-01-01 00:00:00.000001",
        "dt0": "1000-01-01 00:00:00", "ts": "1970-01-01 00:00:01", "tm": "-838:59:59",
        "y": 1901, "b1": 1, "b9": 1, "b64": 1, "bin": b"\x7b\x74\x00", "vb": EVERY_BYTE,
        "tb": EVERY_BYTE[:255], "bl": EVERY_BYTE * 4, "mb": EVERY_BYTE[::-1] * 10,
        "lb": b"\x00", "uu": "123e4567-e89b-12d3-a456-426614174000",
        "i4": "255.255.255.255", "i6": "2001:db8::1", "pt": (POINT, 0),
        "ge": (POINT, 4326, POINT_4326), "ls": (LINE, 0), "pg": (HOLED, 0),
        "mpt": (_many(4, POINT, _wkb(1, struct.pack("<dd", -71.06, 42.36))), 0),
        "mls": (_many(5, LINE, LINE), 0), "mpg": (_many(6, SQUARE, HOLED), 0),
        "gc": (_many(7, POINT, LINE, SQUARE), 0),
    },
    4: {  # maximums and trailing zeros
        "ti": 127, "tiu": 255, "si": 32767, "siu": 65535, "mi": 8388607, "miu": 16777215,
        "i": 2147483647, "iu": 4294967295, "bi": 9223372036854775807,
        "biu": 18446744073709551615, "d": Decimal("1.5000000000"), "d2": Decimal("100.10"),
        "f": 3.4028234e38, "db": 1.7976931348623157e308, "ch": "é✓", "vc": "it's",
        "tt": " lead and trail ", "tx": "NULL", "mt": "\\", "lt": "''", "js": "[]",
        "en": "it's", "st": "x,y,z", "dd": "9999-12-31", "dtm": "9999-12-31 23:59:59.999999",
        "dt0": "2024-02-29 12:00:00", "ts": "2038-01-19 03:14:07.999999", "tm": "838:59:59",
        "y": 2155, "b1": 0, "b9": 511, "b64": 18446744073709551615, "bin": b"\xff" * 16,
        "vb": b"\x00", "tb": b"\x00\x00", "bl": b"\x00" * 5 + b"\xff", "mb": b"\n\t\\",
        "lb": EVERY_BYTE[::-1], "uu": "ffffffff-ffff-ffff-ffff-ffffffffffff",
        "i4": "10.0.0.1", "i6": "::ffff:10.0.0.1", "ge": (SQUARE, 0),
        "gc": (_many(7, _many(7, POINT)), 0),
    },
    5: {  # values over 1 MB
        "vc": "large", "tx": "small", "lt": "ab\tc\nd😀é\\" * 150_000,
        "mt": "ü" * 700_000, "lb": BIG.randbytes(1_500_000), "mb": BIG.randbytes(1_100_000),
        "js": '{"big": "' + "z" * 1_200_000 + '"}',
    },
    6: {  # precision, and dates with a zero part
        "f": 1.2345678, "db": 0.1, "d2": Decimal("0.01"), "ts": "2024-05-06 07:08:09.654321",
        "tm": "12:34:56.5", "dd": "2024-00-15", "dtm": "2024-05-00 10:00:00",
        "dt0": "0000-01-01 00:00:00", "b9": 256, "bin": b"\x00" * 15 + b"\x01",
    },
}  # fmt: skip
LARGE = {"lt": "new large ✓\n" * 100_000, "lb": BIG.randbytes(1_300_000)}


def expected(row: dict) -> tuple:
    """A source row as the PostgreSQL target holds it (the README's type table)."""
    return tuple(_expect(n, row.get(n)) for n in NAMES)


def _expect(name: str, v):
    if v is None:
        return None
    kind = COLUMNS[name].split("(")[0].split(" ")[0]
    if kind in SPATIAL:  # (WKB, SRID, EWKB when the SRID is not 0)
        return v[-1] if v[1] else v[0]
    if kind in ("DATE", "DATETIME", "TIMESTAMP"):
        if v.startswith("0000") or v[5:7] == "00" or v[8:10] == "00":
            return None  # a zero year, month or day reads as NULL
        if kind == "DATE":
            return dt.date.fromisoformat(v)
        stamp = dt.datetime.fromisoformat(v)
        return stamp.replace(tzinfo=dt.timezone.utc) if kind == "TIMESTAMP" else stamp
    if kind == "TIME":  # an interval in PostgreSQL
        sign, body = (-1, v[1:]) if v.startswith("-") else (1, v)
        h, m, sec = body.split(":")
        return sign * dt.timedelta(hours=int(h), minutes=int(m), seconds=float(sec))
    if kind == "UUID":
        return uuid.UUID(v)
    if kind in ("INET4", "INET6"):
        return ipaddress.ip_address(v)
    if kind == "FLOAT":
        return _f32(v)
    if kind == "BINARY":
        return v.ljust(16, b"\x00")
    if kind == "BIT":
        return bool(v) if name == "b1" else v
    return v


def _f32(v: float) -> float:
    """A float as a 4-byte FLOAT (or PostgreSQL real) holds it."""
    return struct.unpack("<f", struct.pack("<f", v))[0]


def _insert(conn, row_id: int, row: dict) -> None:
    names = ", ".join(f"`{n}`" for n in ["id", *NAMES])
    marks, params = ["%s"], [row_id]
    for n in NAMES:
        spatial = COLUMNS[n] in SPATIAL and row.get(n) is not None
        marks.append("ST_GeomFromWKB(%s, %s)" if spatial else "%s")
        params += row[n][:2] if spatial else [row.get(n)]
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO corpus ({names}) VALUES ({', '.join(marks)})", params)


@pytest.mark.parametrize("metadata", ["NO_LOG", "MINIMAL", "FULL"])
def test_every_type_and_awkward_value_arrives_exactly(worker, binlog_db, pg_db, metadata):  # noqa: F811
    pg_name, pg_info = pg_db
    old = binlog_db.sql("SELECT @@global.binlog_row_metadata")[0][0]
    binlog_db.sql(f"SET GLOBAL binlog_row_metadata = '{metadata}'")
    conn = binlog_db.connect()  # a session that writes with that setting
    try:
        _run_corpus(worker, binlog_db, conn, pg_name, pg_info)
    finally:
        conn.close()
        binlog_db.sql(f"SET GLOBAL binlog_row_metadata = '{old}'")


def _copy_corpus(worker, binlog_db, conn, sink_type: str, sink_options: str) -> None:  # noqa: F811
    """The corpus table with every row, a cdc source of it and a sink of its stream."""
    with conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00', sql_mode = 'STRICT_TRANS_TABLES'")
        cols = ", ".join(f"`{n}` {t}" for n, t in COLUMNS.items())
        cur.execute(f"CREATE TABLE corpus (id INT PRIMARY KEY, {cols})")
    for row_id, row in ROWS.items():
        _insert(conn, row_id, row)
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR src FROM mysql INTO corpus WITH ({binlog_db.options()},
          table = 'corpus');
        CREATE SINK CONNECTOR dst TO {sink_type} FROM corpus WITH ({sink_options},
          table = 'corpus');
        """,
    )


def _run_corpus(worker, binlog_db, conn, pg_name, pg_info) -> None:  # noqa: F811
    _copy_corpus(worker, binlog_db, conn, "postgres", f"host = '127.0.0.1', database = '{pg_name}'")
    # CHAR(8) is character(8) there, which pads: its text is MySQL's value
    listed = ", ".join("ch::text" if n == "ch" else n for n in NAMES)
    select = f"SELECT id, {listed} FROM corpus ORDER BY id"
    want = {k: expected(r) for k, r in ROWS.items()}
    wait_until(lambda: len(pg_rows(pg_info, select) or []) == len(ROWS), timeout=180)
    wait_until(lambda: streaming(worker, "src"), timeout=60, what="the snapshot to end")
    _assert_rows(pg_rows(pg_info, select), want)
    types = pg_rows(
        pg_info,
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = 'corpus'::regclass AND attnum > 1 AND NOT attisdropped",
    )
    assert dict(types) == PG_TYPES  # the closest types (README, MySQL -> PostgreSQL)

    # the binlog: the same rows again, updates of small and of large columns, deletes
    for row_id, row in ROWS.items():
        _insert(conn, 100 + row_id, row)
        want[100 + row_id] = want[row_id]
    with conn.cursor() as cur:
        cur.execute("UPDATE corpus SET vc = 'changed', b1 = 1 WHERE id IN (5, 105)")
        cur.execute("UPDATE corpus SET lt = %s, lb = %s WHERE id = 105", (LARGE["lt"], LARGE["lb"]))
        cur.execute("UPDATE corpus SET st = '', bin = x'00', ts = '0000-00-00' WHERE id = 103")
        cur.execute("DELETE FROM corpus WHERE id IN (1, 104)")
    for row_id, changes in (
        (5, {"vc": "changed", "b1": 1}),
        (105, {"vc": "changed", "b1": 1, **LARGE}),
        (103, {"st": "", "bin": b"\x00", "ts": "0000-00-00 00:00:00"}),
    ):
        want[row_id] = expected({**ROWS[row_id % 100], **changes})
    del want[1], want[104]
    wait_until(
        lambda: (
            [r[0] for r in pg_rows(pg_info, select) or []] == sorted(want)
            and pg_rows(pg_info, "SELECT vc FROM corpus WHERE id = 105") == [("changed",)]
        ),
        timeout=180,
        what="the binlog's changes in the target",
    )
    _assert_rows(pg_rows(pg_info, select), want)

    # a row reads the same from the snapshot ('r') and from the binlog ('c')
    stream = worker.home / "streams/corpus"
    columns = ", ".join(f'"{n}"' for n in NAMES)
    snap = read_parquet_rows(stream, f"SELECT id, {columns} FROM t WHERE __op = 'r' ORDER BY id")
    logged = read_parquet_rows(
        stream, f"SELECT id - 100, {columns} FROM t WHERE __op = 'c' ORDER BY id"
    )
    assert len(snap) == len(ROWS) and [r[0] for r in logged] == [r[0] for r in snap]
    for s, c in zip(snap, logged, strict=True):
        for name, a, b in zip(["id", *NAMES], s, c, strict=True):
            assert a == b, f"row {s[0]} column {name}: snapshot {a!r:.80} != binlog {b!r:.80}"


def _assert_rows(rows, want: dict) -> None:
    assert [r[0] for r in rows] == sorted(want)
    for row in rows:
        for name, got, exp in zip(NAMES, row[1:], want[row[0]], strict=True):
            if COLUMNS[name] == "FLOAT" and got is not None:  # psycopg reads real as text
                got = _f32(got)
            assert got == exp, f"row {row[0]} column {name}: {got!r:.80} != {exp!r:.80}"


def test_a_mysql_target_keeps_the_declared_types(worker, binlog_db, mariadb_binlog):  # noqa: F811
    """MariaDB -> MariaDB through auto.create: every column keeps its declared type (COLUMN_TYPE,
    character set, collation; a spatial type excepted: its WKB is a LONGBLOB), and every value
    arrives as the source holds it (zero dates as NULL), from the snapshot and the binlog."""
    target = My(mariadb_binlog.host, mariadb_binlog.port)
    conn = binlog_db.connect()
    try:
        _copy_corpus(worker, binlog_db, conn, "mysql", target.options())
        read_src, read_dst = _utc_reader(binlog_db), _utc_reader(target, wkb=False)
        wait_until(
            lambda: len(read_dst() or []) == len(ROWS),
            timeout=180,
            what="the snapshot",
            diagnose=lambda: [
                (
                    c,
                    worker.catalog.get_connector(c).state,
                    worker.catalog.get_connector(c).last_error,
                )
                for c in ("src", "dst")
            ],
        )
        assert _declared(target) == {
            n: ("longblob", None, None) if COLUMNS[n] in SPATIAL else t
            for n, t in _declared(binlog_db).items()
        }
        src, dst = read_src(), read_dst()
        assert dst == _as_target(src), _differences(src, dst)

        for row_id, row in ROWS.items():  # the binlog: inserts, updates, a delete
            _insert(conn, 100 + row_id, row)
        with conn.cursor() as cur:
            cur.execute("UPDATE corpus SET vc = 'changed', en = 'a', st = 'y' WHERE id = 103")
            cur.execute("DELETE FROM corpus WHERE id = 104")
        wait_until(
            lambda: read_dst() == _as_target(read_src()),
            timeout=180,
            what="the binlog's changes in the target",
            diagnose=lambda: _differences(read_src(), read_dst() or []),
        )
    finally:
        conn.close()
        target.drop()


def _differences(src: list[tuple], dst: list[tuple]) -> list:
    """The first rows that differ, with their differing columns (for a failure message)."""
    out = []
    for a, b in zip(_as_target(src), dst, strict=False):
        if a != b:
            out.append(
                (a[0], [(n, x, y) for n, x, y in zip(NAMES, a[1:], b[1:], strict=True) if x != y])
            )
    return out[:3]


def _declared(db) -> dict[str, tuple]:
    rows = db.sql(
        "SELECT COLUMN_NAME, COLUMN_TYPE, CHARACTER_SET_NAME, COLLATION_NAME"
        " FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'corpus'"
        " AND COLUMN_NAME <> 'id'",
        (db.name,),
    )
    return {n: (t, cs, co) for n, t, cs, co in rows}


def _utc_reader(db, wkb: bool = True):
    """Reads the corpus table's rows in a UTC session (`wkb`: spatial values as their WKB)."""
    listed = ", ".join(
        f"ST_AsWKB(`{n}`)" if wkb and COLUMNS[n] in SPATIAL else f"`{n}`" for n in NAMES
    )

    def read():
        conn = db.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SET time_zone = '+00:00'")
                cur.execute(f"SELECT id, {listed} FROM corpus ORDER BY id")
                return list(cur.fetchall())
        except pymysql.err.ProgrammingError:  # no table yet
            return None
        finally:
            conn.close()

    return read


def _as_target(rows) -> list[tuple]:
    """Source rows as the target holds them: zero dates (pymysql leaves them text) are NULL; a
    spatial value is its WKB, or EWKB with its SRID (README)."""
    out = []
    for row in rows:
        values = [row[0]]
        for n, v in zip(NAMES, row[1:], strict=True):
            kind = COLUMNS[n].split("(")[0].split(" ")[0]
            if kind in ("DATE", "DATETIME", "TIMESTAMP") and isinstance(v, str):
                v = None
            elif kind in SPATIAL and v is not None:
                v = _expect(n, ROWS[row[0] % 100][n])
            values.append(v)
        out.append(tuple(values))
    return out
