"""Arrow-native range reads (connectorx): every column of the MySQL and the PostgreSQL type
corpus reads the same through connectorx as through the text path it replaces, or falls back to
that path; the bulk bench's column types take the fast path; bounds are inlined only when they
are integers."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from connectql.connectors.mysql.client import connect, qualified
from connectql.connectors.mysql.db import RAW, MyDb
from connectql.connectors.mysql.types import Column, spark_type
from connectql.connectors.postgres import types as pgtypes
from connectql.connectors.postgres.client import connect as pg_connect
from connectql.connectors.postgres.db import PgDb
from connectql.connectors.relational import arrowread, polling
from connectql.connectors.relational.changerows import UNREADABLE
from tests import test_postgres_values as pgvalues
from tests.test_mysql import pg_db, plain_db  # noqa: F401 (fixtures)
from tests.test_mysql_corpus import COLUMNS, ROWS, _insert

# the bulk bench's table (bench.mysql): these must not fall back
BENCH_TYPES = {"i", "bi", "d2", "vc", "dtm"}


SPARK = {
    "SMALLINT": T.ShortType(), "INT": T.IntegerType(), "BIGINT": T.LongType(),
    "FLOAT": T.FloatType(), "DOUBLE": T.DoubleType(), "STRING": T.StringType(),
    "BINARY": T.BinaryType(), "DATE": T.DateType(), "TIMESTAMP": T.TimestampType(),
    "TIMESTAMP_NTZ": T.TimestampNTZType(), "BOOLEAN": T.BooleanType(),
}  # fmt: skip


def _spark(ddl: str) -> T.DataType:
    if ddl.startswith("DECIMAL"):
        return T.DecimalType(*(int(x) for x in ddl[8:-1].split(",")))
    return SPARK[ddl]


def _schema(types: dict[str, str]) -> T.StructType:
    fields = [T.StructField(n, _spark(spark_type(Column(n, t)))) for n, t in types.items()]
    return T.StructType(fields)


def _read(db: MyDb, table: str, schema: T.StructType, after=None, upto=None) -> pa.Table | None:
    src = polling.Source(table, schema)
    where, params = polling.range_where(db, ["id"], after, upto)
    if db.address:
        batches = db.fast(src.relation, where, params, schema, ["id"])
        if batches is None:
            return None
    else:
        batches = db.read(src.relation, where, params, schema, ["id"])
    return pa.Table.from_batches(list(batches), schema=arrowschema(schema))


def arrowschema(schema: T.StructType) -> pa.Schema:
    from connectql.connectors.mysql.types import arrow_schema

    return arrow_schema(schema)


def test_every_corpus_column_reads_the_same_through_connectorx_or_falls_back(plain_db):  # noqa: F811
    plain_db.sql("SET SESSION time_zone = '+00:00', sql_mode = 'STRICT_TRANS_TABLES'")
    cols = ", ".join(f"`{n}` {t}" for n, t in COLUMNS.items())
    plain_db.sql(f"CREATE TABLE corpus (id INT PRIMARY KEY, {cols})")
    for row_id, row in ROWS.items():
        _insert(plain_db.conn, row_id, row)
    cfg = {"host": plain_db.host, "port": plain_db.port, "user": plain_db.user}
    cfg["database"] = plain_db.name
    address = arrowread.url("mysql", cfg, 3306)
    table = qualified(plain_db.name, "corpus")
    conn = connect(cfg, conv=RAW)
    fell_back, differ = [], []
    try:
        for name, column_type in COLUMNS.items():
            types = {"id": "int(11)", name: column_type.lower()}
            schema = _schema(types)
            want = _read(MyDb(conn, types), table, schema, ["0"], ["1000"])
            got = _read(MyDb(conn, types, address), table, schema, ["0"], ["1000"])
            if got is None:
                fell_back.append(name)
            elif not got.equals(want):
                differ.append((name, got.to_pylist()[:3], want.to_pylist()[:3]))
    finally:
        conn.close()
    assert differ == []
    assert not BENCH_TYPES & set(fell_back), fell_back
    print(f"fell back to the text path: {fell_back}")


PG_BENCH_TYPES = {"i4", "i8", "n2", "vc", "ts"}


def test_every_postgres_value_reads_the_same_through_connectorx_or_falls_back(pg_db):  # noqa: F811
    name, info = pg_db
    pgvalues.sql(info, "CREATE TYPE mood AS ENUM ('ok', 'so so')")
    pgvalues.sql(info, "CREATE EXTENSION citext")
    pgvalues.sql(info, f"CREATE TABLE vals ({pgvalues.COLUMNS})")
    for row in pgvalues.rows():
        pgvalues.insert(info, row)
    described = pgvalues.sql(
        info,
        "SELECT attname, format_type(atttypid, atttypmod), typtype = 'e' FROM pg_attribute"
        " JOIN pg_type t ON t.oid = atttypid WHERE attrelid = 'vals'::regclass AND attnum > 0",
    )
    kinds = {n: (t, enum) for n, t, enum in described}
    cfg = {"host": "127.0.0.1", "port": 5432, "user": "postgres", "database": name}
    address = arrowread.url("postgresql", cfg, 5432)
    conn = pg_connect(cfg, autocommit=True)
    fell_back, differ = [], []
    try:
        for column, (pg_type, enum) in kinds.items():
            ddl = pgtypes.spark_type(pg_type, enum)
            if column == "id" or ddl is None or ddl.startswith("ARRAY"):
                continue
            types = {"id": "integer", column: pg_type}
            schema = T.StructType(
                [T.StructField("id", T.IntegerType()), T.StructField(column, _spark(ddl))]
            )
            src = polling.Source('"public"."vals"', schema)
            where, params = polling.range_where(PgDb(conn, types), ["id"], ["0"], ["1000"])
            want = pa.Table.from_batches(
                list(PgDb(conn, types).read(src.relation, where, params, schema, ["id"])),
                schema=pgtypes.arrow_schema(schema),
            )
            fast = PgDb(conn, types, address).fast(src.relation, where, params, schema, ["id"])
            if fast is None:
                fell_back.append(column)
                continue
            got = pa.Table.from_batches(list(fast), schema=pgtypes.arrow_schema(schema))
            if repr(got.to_pylist()) != repr(want.to_pylist()):  # NaN == NaN here
                differ.append((column, got.to_pylist(), want.to_pylist()))
    finally:
        conn.close()
    assert differ == []
    assert not PG_BENCH_TYPES & set(fell_back), fell_back
    print(f"fell back to the COPY CSV path: {fell_back}")


def test_a_numeric_past_its_decimal_type_fails_through_connectorx_as_through_copy(pg_db):  # noqa: F811
    """Arrow's text to decimal cast wrapped 1.2e29 around to 4.6e19 for DECIMAL(38,18): a value
    silently changed. Both paths must refuse it (a source then fails or dead-letters it)."""
    name, info = pg_db
    pgvalues.sql(info, "CREATE TABLE big (id int, n numeric)")
    pgvalues.sql(info, "INSERT INTO big VALUES (1, 123456789012345678901234567890)")
    types = {"id": "integer", "n": "numeric"}
    schema = T.StructType(
        [T.StructField("id", T.IntegerType()), T.StructField("n", T.DecimalType(38, 18))]
    )
    cfg = {"host": "127.0.0.1", "port": 5432, "user": "postgres", "database": name}
    address = arrowread.url("postgresql", cfg, 5432)
    conn = pg_connect(cfg, autocommit=True)
    try:
        where, params = polling.range_where(PgDb(conn, types), ["id"], ["0"], ["10"])
        for db in (PgDb(conn, types, address, 300.0), PgDb(conn, types)):
            with pytest.raises(UNREADABLE):
                list(db.read('"public"."big"', where, params, schema, ["id"]))
    finally:
        conn.close()


def test_an_unconstrained_numeric_is_its_text_through_connectorx_as_through_copy(pg_db):  # noqa: F811
    """An unconstrained numeric travels as its text (each value's own scale, NaN, any number
    of digits): connectorx and COPY read the same texts PostgreSQL prints."""
    name, info = pg_db
    pgvalues.sql(info, "CREATE TABLE nums (id int, n numeric)")
    texts = ["1.500", "10", "NaN", "-Infinity", "1" + "0" * 40 + ".25", "0.0000001", None]
    for i, text in enumerate(texts):
        pgvalues.sql(info, "INSERT INTO nums VALUES (%s, %s::numeric)", (i, text))
    types = {"id": "integer", "n": "numeric"}
    schema = T.StructType(
        [T.StructField("id", T.IntegerType()), T.StructField("n", T.StringType())]
    )
    cfg = {"host": "127.0.0.1", "port": 5432, "user": "postgres", "database": name}
    conn = pg_connect(cfg, autocommit=True)
    try:
        where, params = polling.range_where(PgDb(conn, types), ["id"], ["-1"], ["10"])
        fast = PgDb(conn, types, arrowread.url("postgresql", cfg, 5432))  # no bound: no task
        assert fast.fast('"public"."nums"', where, params, schema, ["id"]) is not None
        for db in (fast, PgDb(conn, types)):
            read = list(db.read('"public"."nums"', where, params, schema, ["id"]))
            got = sorted(r for b in read for r in zip(*b.to_pydict().values(), strict=True))
            assert [n for _i, n in got] == texts
    finally:
        conn.close()


def test_bounds_are_inlined_only_when_they_are_integers():
    sql = "SELECT a FROM t WHERE `id` > %s AND `id` <= %s"
    assert arrowread.inline(sql, ["10", "-20"]) == (
        "SELECT a FROM t WHERE `id` > 10 AND `id` <= -20"
    )
    assert arrowread.inline(sql, ["10", "1 OR 1=1"]) is None
    assert arrowread.inline(sql, ["10", "1e5"]) is None
    assert arrowread.inline("SELECT a FROM (SELECT * FROM t WHERE b LIKE '%s') q", []) is None
    assert arrowread.inline("SELECT a FROM t", []) == "SELECT a FROM t"


def test_a_connectorx_address_keeps_odd_passwords_and_needs_a_database():
    cfg = {"host": "h", "port": 3307, "user": "u@x", "password": "p:/@?#%", "database": "d b"}
    assert arrowread.url("mysql", cfg, 3306) == "mysql://u%40x:p%3A%2F%40%3F%23%25@h:3307/d%20b"
    assert arrowread.url("mysql", {"host": "h"}, 3306) is None
