"""Spark -> MySQL/MariaDB for the sink: the column type created for each Spark type, and Arrow
rows as the tab-separated text `LOAD DATA LOCAL INFILE` reads back as the same values.

Timestamps (Spark TIMESTAMP, UTC instants) are stored as DATETIME(6) holding the UTC wall time,
like TIMESTAMP_NTZ as is: DATETIME has no 2038 limit and does not shift with a session's
time_zone (the sink's sessions run in UTC anyway)."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    TimestampNTZType,
    TimestampType,
)

KEY_TEXT = "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"  # keys compare as Spark does
KEY_BINARY = "VARBINARY(255)"
# staging columns are wide, so that LOAD DATA never truncates: the merge into the target is
# where a too-long value is refused (and can become a dead letter)
STAGE_TEXT = "LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"

_TYPES = [
    (BooleanType, "BOOLEAN"),
    (ByteType, "TINYINT"),
    (ShortType, "SMALLINT"),
    (IntegerType, "INT"),
    (LongType, "BIGINT"),
    (FloatType, "FLOAT"),
    (DoubleType, "DOUBLE"),
    (StringType, "LONGTEXT"),
    (BinaryType, "LONGBLOB"),
    (DateType, "DATE"),
    (TimestampNTZType, "DATETIME(6)"),
    (TimestampType, "DATETIME(6)"),
]
# array elements that have a JSON form as they are
_JSON_ELEMENTS = (BooleanType, ByteType, ShortType, IntegerType, LongType, DoubleType, StringType)


def mysql_type(dtype: DataType, key: bool = False, stage: bool = False) -> str | None:
    """The column type the sink creates for a Spark type (of a key column, of a staging
    table's column); None if it has none."""
    if isinstance(dtype, StringType):
        return STAGE_TEXT if stage else KEY_TEXT if key else "LONGTEXT"
    if isinstance(dtype, BinaryType):
        return "LONGBLOB" if stage or not key else KEY_BINARY
    if isinstance(dtype, ArrayType):
        if not isinstance(dtype.elementType, _JSON_ELEMENTS):
            return None
        return STAGE_TEXT if stage else "JSON"
    if isinstance(dtype, DecimalType):
        return f"DECIMAL({dtype.precision},{dtype.scale})"
    for spark, mysql in _TYPES:
        if isinstance(dtype, spark):
            return mysql
    return None


def needs_unhex(dtype: pa.DataType) -> bool:
    return pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype)


def arrow_to_tsv(batch: pa.RecordBatch) -> bytes:
    """Rows as LOAD DATA's default text format: tab between fields, newline after each row,
    backslash escapes, \\N for NULL; binary values in hex (loaded through UNHEX)."""
    if batch.num_rows == 0:
        return b""
    fields = [pc.fill_null(_text(c), "\\N") for c in batch.columns]
    lines = pc.binary_join_element_wise(*fields, "\t") if len(fields) > 1 else fields[0]
    return ("\n".join(lines.to_pylist()) + "\n").encode()


def _text(column: pa.Array) -> pa.Array:
    t = column.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _escape(column.cast(pa.string()))
    if needs_unhex(t):
        return pa.array([None if v is None else v.hex() for v in column.to_pylist()], pa.string())
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        values = [None if v is None else json.dumps(v) for v in column.to_pylist()]
        return _escape(pa.array(values, pa.string()))
    if pa.types.is_timestamp(t):  # the UTC (or NTZ) wall time, microseconds
        return column.cast(pa.timestamp("us")).cast(pa.string())
    if pa.types.is_boolean(t):
        return column.cast(pa.int8()).cast(pa.string())
    return column.cast(pa.string())


def _escape(column: pa.Array) -> pa.Array:
    for raw, escaped in (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r")):
        column = pc.replace_substring(column, raw, escaped)
    return column
