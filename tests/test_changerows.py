"""The change rows' column-at-once conversion (issue 55): the fast Arrow path gives exactly what
the value-by-value path gives, or stands aside; a value neither reads is one dead letter."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from connectql.connectors.mysql.types import Column, binlog_column, binlog_value
from connectql.connectors.postgres.pgtext import spark_column, spark_value
from connectql.connectors.relational.changerows import (
    UNREADABLE,
    ChangeRows,
    Changes,
    arrow_schema,
)
from connectql.errors import ConnectQLError

PG_CORPUS = [
    ("smallint", ShortType(), ["0", "-32768", "32767", None]),
    ("integer", IntegerType(), ["1", "-2147483648", "2147483647", None]),
    ("bigint", LongType(), ["-9223372036854775808", "9223372036854775807", None]),
    ("real", FloatType(), ["1.5", "NaN", "Infinity", "-Infinity", "3.4028235e+38", "1e-45"]),
    ("double precision", DoubleType(), ["0.1", "NaN", "-Infinity", "1.7976931348623157e+308"]),
    ("numeric(12,2)", DecimalType(12, 2), ["123.45", "-0.01", "5", "9999999999.99", None]),
    ("numeric", DecimalType(38, 18), ["1.5", "NaN", "Infinity", "0.1234567890123456789", "7"]),
    ("numeric(5,2)", DecimalType(5, 2), ["999.99", "-999.99", "0.5"]),
    ("numeric", DecimalType(38, 18), ["123456789012345678901234567890", "5"]),  # Arrow wraps it
    ("numeric(5,2)", DecimalType(5, 2), ["1000.00"]),
    ("numeric(4,4)", DecimalType(4, 4), ["0.1234", "-0.5"]),
    ("boolean", BooleanType(), ["t", "f", None]),
    ("date", DateType(), ["2024-02-29", "0001-01-01", "9999-12-31", "infinity", "-infinity"]),
    ("date", DateType(), ["2024-01-01 BC", "12345-01-01"]),
    (
        "timestamp without time zone",
        TimestampNTZType(),
        ["2024-03-01 12:34:56.123456", "2024-03-01 12:34:56", "2024-03-01 00:00:00.5", None],
    ),
    (
        "timestamp(3) without time zone",
        TimestampNTZType(),
        ["infinity", "-infinity", "0044-03-15 12:00:00 BC", "12345-01-01 00:00:00"],
    ),
    (
        "timestamp with time zone",
        TimestampType(),
        [
            "2024-03-01 12:34:56.123456+00",
            "2024-03-01 12:34:56+05:30",
            "1900-01-01 00:00:00-08",
            "1890-01-01 00:00:00+00:53:28",
            "infinity",
        ],
    ),
    ("character varying(16)", StringType(), ["a", "", "naïve ☕", "tab\there", None]),
    ("jsonb", StringType(), ['{"a": 1}', None]),
    ("uuid", StringType(), ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]),
    ("integer[]", StringType(), ["{1,2,NULL}"]),
]


def _fast_or_none(fast, *args):
    try:
        return fast(*args)
    except (*UNREADABLE, TypeError, OverflowError):
        return None


def _same(a: pa.Array, b: pa.Array) -> bool:
    """Equal value by value, a NaN equal to a NaN."""
    return list(map(repr, a.to_pylist())) == list(map(repr, b.to_pylist()))


def _each(values, convert, dtype) -> list:
    """The value-by-value path: each value converted, or the error it raises."""
    out = []
    for v in values:
        try:
            out.append(convert(v))
        except UNREADABLE as e:
            out.append(type(e))
    return out


@pytest.mark.parametrize("pg_type,dtype,texts", PG_CORPUS, ids=lambda x: str(x)[:24])
def test_a_postgres_column_reads_at_once_as_value_by_value(pg_type, dtype, texts):
    arrow = arrow_schema(StructType([StructField("v", dtype)])).field("v").type
    each = _each(texts, lambda t: spark_value(t, pg_type, dtype), dtype)
    fast = _fast_or_none(spark_column, texts, pg_type, dtype)
    if fast is None:  # the fast path stood aside: every value goes the other way
        return
    assert not any(isinstance(v, type) for v in each), (pg_type, each)
    assert fast.type == arrow
    assert _same(fast, pa.array(each, arrow))


def test_plain_postgres_columns_take_the_fast_path():
    plain = [PG_CORPUS[i] for i in (0, 1, 2, 4, 5, 11, 14, 17)]
    assert [t for t, _d, _v in plain][-3:] == [
        "boolean", "timestamp without time zone", "character varying(16)"
    ]  # fmt: skip
    for pg_type, dtype, texts in plain:
        assert _fast_or_none(spark_column, texts, pg_type, dtype) is not None, pg_type


MY_CORPUS = [
    ("int(11)", IntegerType(), [1, -2147483648, 2147483647, None]),
    ("bigint(20)", LongType(), [2**63 - 1, -(2**63), None]),
    ("bigint(20) unsigned", DecimalType(20, 0), [2**64 - 1, 0]),
    ("tinyint(4)", ShortType(), [-128, 127]),
    ("decimal(12,2)", DecimalType(12, 2), [Decimal("123.45"), Decimal("-0.01"), None]),
    ("double", DoubleType(), [0.1, float("inf"), None]),
    ("float", FloatType(), [1.5, None]),
    ("varchar(64)", StringType(), ["a", "", "naïve ☕", b"bytes", b"\xff\xfe", None]),
    ("enum('a','b')", StringType(), ["a", "", None]),
    ("set('a','b')", StringType(), [frozenset({"a"}), frozenset()]),
    ("datetime(6)", TimestampNTZType(), [dt.datetime(2024, 3, 1, 12, 34, 56, 123456), None]),
    ("datetime", TimestampNTZType(), [None, "0000-00-00 00:00:00"]),
    ("date", DateType(), [dt.date(2024, 2, 29), dt.date(1, 1, 1), None]),
    ("timestamp(6)", TimestampType(), [dt.datetime(2024, 3, 1, 12, 0, 0, 1), None]),
    ("timestamp", TimestampType(), [dt.datetime(1970, 1, 1, 0, 0, 0), dt.datetime(2000, 1, 1)]),
    ("time(3)", StringType(), [dt.timedelta(hours=-1, microseconds=500)]),
    ("json", StringType(), [{"a": [1, 2]}]),
]


@pytest.mark.parametrize("column_type,dtype,values", MY_CORPUS, ids=lambda x: str(x)[:24])
def test_a_mysql_column_reads_at_once_as_value_by_value(column_type, dtype, values):
    c = Column("v", column_type)
    arrow = arrow_schema(StructType([StructField("v", dtype)])).field("v").type
    each = _each(values, lambda v: binlog_value(v, c, dtype), dtype)
    fast = _fast_or_none(binlog_column, values, c, dtype)
    if fast is None:
        return
    assert fast.type == arrow
    assert _same(fast, pa.array(each, arrow))


def test_plain_mysql_columns_take_the_fast_path():
    for i in (0, 1, 4, 5, 10, 12, 13):
        column_type, dtype, values = MY_CORPUS[i]
        assert _fast_or_none(binlog_column, values, Column("v", column_type), dtype) is not None


SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("amount", DecimalType(5, 2)),
        StructField("__op", StringType()),
        StructField("__pos", StringType()),
    ]
)
TYPES = {"id": "bigint", "amount": "numeric(5,2)"}


def _rows(tolerant: bool):
    def convert(text, f, types):
        return spark_value(text, types[f.name], f.dataType)

    def fast(f, pg_type, texts):
        return spark_column(texts, pg_type, f.dataType)

    rows = ChangeRows(SCHEMA, ["id"], "public.t", "evolve", convert, fast)
    changes = Changes({"t": rows}, tolerant)
    for i, amount in enumerate(["1.50", "123456.00", "2.25", "NaN"]):  # 123456.00 does not fit

        def poison(e, row, i=i):  # row: the change's (op, values, meta) as collected
            op, values, _meta = row
            message = f"change {i} ({op} amount={values['amount']}): {e}"
            return {"table": "t", "error_message": message, "offset": {"i": i}}

        changes.add("t", "c", {"id": str(i), "amount": amount}, None, {"__pos": f"p{i}"},
                    TYPES, poison)  # fmt: skip
    return changes


def test_a_value_that_does_not_fit_is_one_dead_letter_and_the_rest_arrive():
    out = list(_rows(tolerant=True).batches())
    (table, batch), dead = out[0], out[1:]
    assert table == "t"
    assert batch.to_pylist() == [
        {"id": 0, "amount": Decimal("1.50"), "__op": "c", "__pos": "p0"},
        {"id": 2, "amount": Decimal("2.25"), "__op": "c", "__pos": "p2"},
        {"id": 3, "amount": None, "__op": "c", "__pos": "p3"},  # NaN: NULL, as documented
    ]
    assert len(dead) == 1 and dead[0].offset == {"i": 1}
    assert "change 1 (c amount=123456.00)" in dead[0].error and "does not fit" in dead[0].error


def test_without_tolerance_a_value_that_does_not_fit_fails_the_read_naming_it():
    with pytest.raises(ConnectQLError, match=r"change 1 \(c amount=123456.00\): .*does not fit"):
        list(_rows(tolerant=False).batches())
