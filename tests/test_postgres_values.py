"""Every PostgreSQL type the README lists, with awkward values, through a cdc source (snapshot,
then insert, update and delete from the change log) into a postgres sink: the target equals the
source value by value, compared as PostgreSQL's own text of each row, with REPLICA IDENTITY
DEFAULT and FULL; large (TOASTed) values an update leaves alone are kept."""

from __future__ import annotations

import os
import secrets

import pytest

from tests.helpers import run, wait_until
from tests.test_mysql import plain_db  # noqa: F401 (fixture)
from tests.test_postgres import cdc_dbs, connection, sql  # noqa: F401 (fixture)

pytestmark = pytest.mark.spark

COLUMNS = """
  id int PRIMARY KEY, i2 smallint, i4 integer, i8 bigint, r real, d double precision,
  n numeric(38,18), n0 numeric(38,0), n2 numeric(10,2), nu numeric, bo boolean,
  t text, vc varchar(20), ch char(5), nm name, dt date, ts timestamp, tz timestamptz,
  tm time, iv interval, by bytea, j json, jb jsonb, u uuid, ip inet, cd cidr, mac macaddr,
  x xml, bt bit(3), vb varbit, en mood, ia int[], ta text[], tza timestamptz[],
  bya bytea[], ipa inet[], na numeric(10,2)[], big text, bigj jsonb, bigb bytea,
  t3 timestamp(3), ttz timetz, tz0 timestamptz(0), ena mood[], ci citext, bt8 bit(8),
  vb4 varbit(4), vc3 varchar(3)[], mac8 macaddr8, nua numeric[]"""
TYPES = dict(c.split(maxsplit=1) for c in " ".join(COLUMNS.split()).split(", "))
TYPES["id"] = "int"
NAMES = list(TYPES)
AWKWARD = "tab\there, new\nline, cr\r, back\\slash \\N, quotes ' \" , ü € 😀"


def insert(info: str, row: dict) -> None:
    values = ", ".join(f"%s::{TYPES[c]}" for c in row)
    sql(info, f"INSERT INTO vals ({', '.join(row)}) VALUES ({values})", list(row.values()))


def rows() -> list[dict]:
    every_byte = bytes(range(256))
    return [
        {  # awkward and limit values
            "id": 1,
            "i2": -32768,
            "i4": 2147483647,
            "i8": -9223372036854775808,
            "r": 0.1,
            "d": 0.1 + 0.2,
            "n": "99999999999999999999.999999999999999999",
            "n0": "9" * 38,
            "n2": "1.50",
            "nu": "-12345.678900",
            "bo": True,
            "t": AWKWARD,
            "vc": " lead ",
            "ch": "ab",
            "nm": "näme",
            "dt": "0001-01-01",
            "ts": "2024-02-29 23:59:59.999999",
            "tz": "2024-01-02 03:04:05.678901+05:30",
            "tm": "23:59:59.999999",
            "iv": "1 year 2 mons 3 days 04:05:06.789",
            "by": every_byte,
            "j": '{"a": "b\'c",  "k": [1, null]}',
            "jb": '{"k": "v \\u00fc", "n": 1.50}',
            "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "ip": "10.0.0.1",
            "cd": "10.1.0.0/16",
            "mac": "08:00:2b:01:02:03",
            "mac8": "08:00:2b:01:02:03:04:05",
            "x": "<a>x &amp; y</a>",
            "bt": "101",
            "vb": "1",
            "en": "so so",
            "ia": [1, None, -3],
            "ta": [AWKWARD, "", "NULL", None, "\\N", "{}"],
            "tza": ["2020-05-06 07:08:09.000001+00", None],
            "bya": [b"\x00\x01\x02", b"", None],
            "ipa": ["10.0.0.1", "::1/128"],
            "na": ["1.50", None, "-0.01"],
            "big": secrets.token_hex(600_000),
            "bigj": f'{{"k": "{secrets.token_hex(10_000)}"}}',
            "bigb": os.urandom(1_100_000),
            "t3": "2024-02-29 23:59:59.999",
            "ttz": "23:59:59.999999-05:30",
            "tz0": "2024-01-02 03:04:05+01",
            "ena": ["so so", None, "ok"],
            "ci": "MiXeD Case",
            "bt8": "10000001",
            "vb4": "011",
            "vc3": ["abc", "", None],
            "nua": ["1.1", "2.22", "3.333", None, "NaN", "10.1111", "10", "-0.0000001"],
        },  # fmt: skip
        {"id": 2},  # NULL everywhere
        {  # '' against NULL, the words NULL and \N, far past and future, NaN and infinities
            "id": 3,
            "t": "",
            "vc": "NULL",
            "ch": "",
            "nm": "\\N",
            "r": "NaN",
            "d": "-Infinity",
            "dt": "9999-12-31",
            "ts": "0001-01-01 00:00:00",
            "tz": "9999-12-31 23:59:59.999999+00",
            "iv": "-1 days +00:00:00.000001",
            "by": b"",
            "ia": [],
            "ta": [],
            "j": "null",
            "jb": "[]",
            "n0": "-" + "9" * 38,
            "n": "-0.000000000000000001",
            "nu": "1.500",  # each value's own scale, as PostgreSQL prints it
            "big": "small",
            "bigb": b"\\N",
        },  # fmt: skip
        {"id": 4, "t": "to be deleted", "big": secrets.token_hex(5_000)},
    ]


def copy(worker, server, dbs, table: str) -> None:
    """A cdc source of `table` and a postgres sink of its stream into the other database."""
    (src, _i), (dst, _j) = dbs
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR src FROM postgres INTO {table}_s WITH (
          {connection(server, src)}, table = '{table}');
        CREATE SINK CONNECTOR dst TO postgres FROM {table}_s WITH (
          {connection(server, dst)}, table = '{table}');
        """,
    )


def declared_types(info: str, table: str = "vals") -> dict[str, str]:
    """Each column's type as format_type() prints it (an enum's, a length, a precision)."""
    rows = sql(
        info,
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
        " WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
        (table,),
    )
    return dict(rows)


def text_rows(info: str) -> list[tuple]:
    """Each row as PostgreSQL prints it (ROW(...)::text keeps '' and NULL apart)."""
    return sql(info, f"SELECT id, ROW({', '.join(NAMES)})::text FROM vals ORDER BY id")


def differences(src_info: str, dst_info: str) -> list:
    """Per differing row: the columns whose text differs (short), for a failure message."""
    out = []
    for c in NAMES:
        expr = f"left(ROW({c})::text, 80)"
        a = sql(src_info, f"SELECT id, {expr} FROM vals ORDER BY id")
        b = sql(dst_info, f"SELECT id, {expr} FROM vals ORDER BY id") if _exists(dst_info) else []
        if a != b:
            out.append((c, [x for x in a if x not in b], [y for y in b if y not in a]))
    return out


def _exists(info: str) -> bool:
    return bool(sql(info, "SELECT 1 FROM pg_tables WHERE tablename = 'vals'"))


@pytest.mark.parametrize("identity", ["DEFAULT", "FULL"])
def test_every_type_arrives_exact_through_snapshot_and_change_log(
    worker,
    pg_logical,
    cdc_dbs,  # noqa: F811
    identity,
):
    (_src, src_info), (_dst, dst_info) = cdc_dbs
    sql(src_info, "CREATE TYPE mood AS ENUM ('ok', 'so so')")
    for info in (src_info, dst_info):  # the target has citext too, not mood (the sink makes it)
        sql(info, "CREATE EXTENSION citext")
    sql(src_info, f"CREATE TABLE vals ({COLUMNS})")
    sql(src_info, f"ALTER TABLE vals REPLICA IDENTITY {identity}")
    first, nulls, edges, doomed = rows()
    for row in (first, nulls, edges, doomed):
        insert(src_info, row)
    copy(worker, pg_logical, cdc_dbs, "vals")

    def equal() -> bool:
        return _exists(dst_info) and text_rows(dst_info) == text_rows(src_info)

    def diagnose():
        return differences(src_info, dst_info)

    wait_until(equal, 180, what="the snapshot in the target", diagnose=diagnose)
    assert declared_types(dst_info) == declared_types(src_info)  # the target keeps them all

    # changes: a new row with every value; updates of small columns leaving the large ones
    # alone (on a snapshot row, and on a row inserted just before, in one transaction);
    # updates of the large ones; a large value changed and then left alone; a delete
    insert(src_info, {**first, "id": 11})
    sql(
        src_info,
        "BEGIN; INSERT INTO vals (id, big, bigj, bigb) SELECT 12, big, bigj, bigb FROM vals"
        " WHERE id = 1; UPDATE vals SET i4 = 5 WHERE id = 12; COMMIT",
    )
    sql(src_info, "UPDATE vals SET i4 = i4 - 1, t = 'changed' WHERE id = 1")
    sql(
        src_info,
        "UPDATE vals SET big = %s, bigb = %s WHERE id = 3",
        (secrets.token_hex(700_000), os.urandom(1_200_000)),
    )
    sql(src_info, "UPDATE vals SET big = %s WHERE id = 11", (secrets.token_hex(650_000),))
    sql(src_info, "UPDATE vals SET i2 = 7 WHERE id = 11")
    sql(src_info, "UPDATE vals SET bigj = jsonb_set(bigj, '{n}', '2') WHERE id = 12")
    sql(src_info, "UPDATE vals SET t = 'last' WHERE id = 12")
    sql(src_info, "DELETE FROM vals WHERE id = 4")
    wait_until(equal, 180, what="the changes in the target", diagnose=diagnose)
    assert [r[0] for r in text_rows(dst_info)] == [1, 2, 3, 11, 12]
    big = sql(dst_info, "SELECT length(big), length(bigb) FROM vals WHERE id = 1")[0]
    assert big == (1_200_000, 1_100_000)  # the values themselves, not NULLs equal to NULLs


OTHER = """
  id int PRIMARY KEY, p posint, nt nonempty, mo money, o oid, r4 int4range, r8 int8range,
  rn numrange, rts tsrange, rtz tstzrange, rd daterange, ra int4range[], tq tsquery,
  tv tsvector, pt point, bx box, ci circle, li line, ls lseg, pa path, pg polygon,
  hs hstore, lt ltree, ib isbn, lsn pg_lsn, cp pair"""
OTHER_VALUES = """p, nt, mo, o, r4, r8, rn, rts, rtz, rd, ra, tq, tv, pt, bx, ci, li, ls, pa, pg, hs,
  lt, ib, lsn, cp) VALUES (5, 'x', 12.5, 12345, '[1,5)', '[1,10000000000)', '(1.5,2.25]',
  '[2020-01-01 00:00,2020-01-02 00:00)', '[2020-01-01 00:00+00,)', '[2020-01-01,2020-02-01)',
  '{"[1,5)","[7,9)"}', 'fat & rat', 'a fat cat', '(1,2)', '(1,1),(0,0)', '<(1,2),3>',
  '{1,2,3}', '[(0,0),(1,1)]', '((0,0),(1,1),(2,0))', '((0,0),(1,1),(1,0))', 'a=>1, b=>NULL',
  'top.sci.astro', '978-0-393-04002-9', '16/B374D848', '(1,"x, y")')"""
DECIDED = (
    "n numeric(10,2), nn numeric, d date, ts timestamp, tz timestamptz, dn date, t3 timestamp(3)"
)
# what each value no Spark type holds becomes (README, PostgreSQL types); an unconstrained
# numeric's text travels as it is; the latest timestamp in the column's precision
DECIDED_IN = "('NaN', 'Infinity', 'infinity', '-infinity', 'infinity', '0044-03-15 BC', '21016-11-04 13:51:30.124')"
DECIDED_OUT = '(,Infinity,9999-12-31,"0001-01-01 00:00:00","9999-12-31 23:59:59.999999",0001-01-01,"9999-12-31 23:59:59.999")'


def test_other_types_domains_nan_and_infinities_arrive_as_documented(
    worker,
    pg_logical,
    cdc_dbs,  # noqa: F811
):
    (_src, src_info), (_dst, dst_info) = cdc_dbs
    for ext in ("hstore", "ltree", "isn"):
        sql(src_info, f"CREATE EXTENSION {ext}")
    sql(src_info, "CREATE DOMAIN posint AS integer CHECK (VALUE > 0)")
    sql(src_info, "CREATE DOMAIN nonempty AS text CHECK (VALUE <> '')")
    sql(src_info, "CREATE TYPE pair AS (a int, b text)")  # any other type: its text
    sql(src_info, f"CREATE TABLE odd ({OTHER}, {DECIDED})")
    decided = ", ".join(c.split()[0] for c in DECIDED.split(", "))
    insert = f"INSERT INTO odd (id, {decided}, {OTHER_VALUES.replace('VALUES (', 'VALUES (%s, ' + DECIDED_IN[1:-1] + ', ')}"
    sql(src_info, insert, (1,))  # read by the snapshot
    copy(worker, pg_logical, cdc_dbs, "odd")
    wait_until(lambda: _exists_table(dst_info, "odd"), 120, what="the target")
    sql(src_info, insert, (2,))  # read from the change log
    names = [c.split()[0] for c in " ".join(OTHER.split()).split(", ")]
    listed = ", ".join(names)
    utc = decided.replace("tz", "tz AT TIME ZONE 'UTC'")
    query = f"SELECT ROW({listed})::text, ROW({utc})::text FROM odd ORDER BY id"
    want = [(text, DECIDED_OUT) for text, _d in sql(src_info, query)]
    wait_until(lambda: sql(dst_info, query) == want, 120, what="the rows as documented",
               diagnose=lambda: (sql(dst_info, query), want))  # fmt: skip
    assert sql(dst_info, "SELECT p + 1, nt FROM odd WHERE id = 2") == [(6, "x")]


def _exists_table(info: str, table: str) -> bool:
    return bool(sql(info, "SELECT 1 FROM pg_tables WHERE tablename = %s", (table,)))


CROSS = """id int PRIMARY KEY, u uuid, jb jsonb, j json, ip inet, cd cidr, mac macaddr,
  tm time(3), ts timestamp(3), tz timestamptz, vc varchar(10), ch char(4), bt bit(3),
  vb varbit(5), en mood, nu numeric, n2 numeric(10,2), t text, iv interval, x xml"""
CROSS_ROW = (
    1, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", '{"a": [1, 2.50]}', '{"b":  1}', "10.0.0.1",
    "10.1.0.0/16", "08:00:2b:01:02:03", "12:34:56.789", "2024-02-29 23:59:59.999",
    "2024-01-02 03:04:05.678901+05:30", "it's ü", "ab", "101", "11", "it's", "-12345.6789",
    "1.50", "tab\there", "1 year 2 mons", "<a>x</a>",
)  # fmt: skip
# each column's type in a MySQL target (README, PostgreSQL -> MySQL), and the row as it reads
MYSQL_TYPES = {
    "u": ("char(36)", "ascii_bin"), "jb": ("longtext", "utf8mb4_bin"),
    "j": ("longtext", "utf8mb4_bin"), "ip": ("varchar(43)", "ascii_bin"),
    "cd": ("varchar(43)", "ascii_bin"), "mac": ("varchar(17)", "ascii_bin"),
    "tm": ("time(3)", None), "ts": ("datetime(3)", None), "tz": ("datetime(6)", None),
    "vc": ("varchar(10)", "utf8mb4_bin"), "ch": ("char(4)", "utf8mb4_bin"),
    "bt": ("varchar(3)", "ascii_bin"), "vb": ("varchar(5)", "ascii_bin"),
    "en": ("enum('ok','so so','it''s')", "utf8mb4_bin"), "nu": ("longtext", None),
    "n2": ("decimal(10,2)", None), "t": ("longtext", None), "iv": ("longtext", None),
    "x": ("longtext", None),
}  # fmt: skip
CROSS_READ = (
    "1", "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", '{"a": [1, 2.50]}', '{"b":  1}', "10.0.0.1",
    "10.1.0.0/16", "08:00:2b:01:02:03", "12:34:56.789", "2024-02-29 23:59:59.999",
    "2024-01-01 21:34:05.678901", "it's ü", "ab", "101", "11", "it's",
    "-12345.6789", "1.50", "tab\there", "1 year 2 mons", "<a>x</a>",
)  # fmt: skip


def test_a_mysql_target_gets_the_closest_types(worker, pg_logical, cdc_dbs, plain_db):  # noqa: F811
    """PostgreSQL -> MariaDB through auto.create: each column gets the closest MySQL type the
    README lists (an enum its labels), and the values arrive, snapshot and change log."""
    (_src, src_info), _ = cdc_dbs
    sql(src_info, "CREATE TYPE mood AS ENUM ('ok', 'so so', 'it''s')")
    sql(src_info, f"CREATE TABLE cross_t ({CROSS})")
    marks = ", ".join(["%s"] * len(CROSS_ROW))
    sql(src_info, f"INSERT INTO cross_t VALUES ({marks})", CROSS_ROW)
    sql(src_info, "INSERT INTO cross_t (id) VALUES (2)")
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR src FROM postgres INTO cross_s WITH (
          {connection(pg_logical, _src)}, table = 'cross_t');
        CREATE SINK CONNECTOR dst TO mysql FROM cross_s WITH ({plain_db.options()},
          table = 'cross_t');
        """,
    )
    names = [c.split()[0] for c in " ".join(CROSS.split()).split(", ")]
    listed = ", ".join(f"CAST(`{n}` AS CHAR)" for n in names)

    def read() -> list[tuple] | None:
        try:
            return plain_db.sql(f"SELECT {listed} FROM cross_t ORDER BY id")
        except Exception:  # no table yet
            return None

    nulls = ("2", *[None] * (len(names) - 1))
    wait_until(lambda: read() == [CROSS_READ, nulls], 180, what="the snapshot", diagnose=read)
    types = plain_db.sql(
        "SELECT COLUMN_NAME, COLUMN_TYPE, COLLATION_NAME FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = 'cross_t' AND COLUMN_NAME <> 'id'",
        (plain_db.name,),
    )
    # a collation of None: the table's default (text whose type has no MySQL counterpart)
    assert {n: (t, c if MYSQL_TYPES[n][1] else None) for n, t, c in types} == MYSQL_TYPES
    shown = {r[0]: r[1] for r in run(worker, "DESCRIBE STREAM cross_s")[0].rows}
    assert shown["column u"] == "string (postgres uuid)"  # the source's declared type
    assert shown["column en"] == 'string (postgres "mood")'
    sql(src_info, f"INSERT INTO cross_t VALUES ({marks})", (3, *CROSS_ROW[1:]))
    sql(src_info, "UPDATE cross_t SET en = 'so so' WHERE id = 1")
    sql(src_info, "DELETE FROM cross_t WHERE id = 2")
    changed = (*CROSS_READ[:14], "so so", *CROSS_READ[15:])
    want = [changed, ("3", *CROSS_READ[1:])]
    wait_until(lambda: read() == want, 180, what="the changes", diagnose=read)
