"""Spark -> MySQL/MariaDB for the sink: the column type created for each Spark type, and Arrow
rows as the tab-separated text `LOAD DATA LOCAL INFILE` reads back as the same values.

Timestamps (Spark TIMESTAMP, UTC instants) are stored as DATETIME(6) holding the UTC wall time,
like TIMESTAMP_NTZ as is: DATETIME has no 2038 limit and does not shift with a session's
time_zone (the sink's sessions run in UTC anyway)."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from connectql.connectors.mysql.types import BINARY_TYPES, GEOMETRY_TYPES, Column, spark_type
from connectql.connectors.relational import declared

KEY_TEXT = "VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"  # keys compare as Spark does
KEY_BINARY = "VARBINARY(255)"
# staging columns are wide, so that LOAD DATA never truncates: the merge into the target is
# where a too-long value is refused (and can become a dead letter)
STAGE_TEXT = "LONGTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"

_TYPES = [
    (T.BooleanType, "BOOLEAN"),
    (T.ByteType, "TINYINT"),
    (T.ShortType, "SMALLINT"),
    (T.IntegerType, "INT"),
    (T.LongType, "BIGINT"),
    (T.FloatType, "FLOAT"),
    (T.DoubleType, "DOUBLE"),
    (T.StringType, "LONGTEXT"),
    (T.BinaryType, "LONGBLOB"),
    (T.DateType, "DATE"),
    (T.TimestampNTZType, "DATETIME(6)"),
    (T.TimestampType, "DATETIME(6)"),
]
# array elements that have a JSON form as they are
_JSON_ELEMENTS = (
    T.BooleanType,
    T.ByteType,
    T.ShortType,
    T.IntegerType,
    T.LongType,
    T.DoubleType,
    T.StringType,
)


def mysql_type(dtype: T.DataType, key: bool = False, stage: bool = False) -> str | None:
    """The column type the sink creates for a Spark type (of a key column, of a staging
    table's column); None if it has none."""
    if isinstance(dtype, T.StringType):
        return STAGE_TEXT if stage else KEY_TEXT if key else "LONGTEXT"
    if isinstance(dtype, T.BinaryType):
        return "LONGBLOB" if stage or not key else KEY_BINARY
    if isinstance(dtype, T.ArrayType):
        if not isinstance(dtype.elementType, _JSON_ELEMENTS):
            return None
        return STAGE_TEXT if stage else "JSON"
    if isinstance(dtype, T.DecimalType):
        return f"DECIMAL({dtype.precision},{dtype.scale})"
    for spark, mysql in _TYPES:
        if isinstance(dtype, spark):
            return mysql
    return None


def created_type(field, key: bool = False) -> str | None:
    """The type auto.create gives a column whose source declared its type (declared.py):
    MySQL's own as declared (a spatial type excepted: its WKB stays LONGBLOB), PostgreSQL's
    closest (README's type tables); None: mysql_type's for its Spark type (no declared type,
    one the column's Spark type no longer matches, or none a key can have)."""
    d = declared.of(field)
    ours = field.dataType.simpleString().upper()
    if d is None:
        return None
    if d.kind == "mysql":
        c = Column(field.name, d.type)
        fits = ours in (spark_type(c), spark_type(c, key=True))
        if not fits or c.data_type in GEOMETRY_TYPES or (key and c.data_type in _UNKEYED):
            return None
        return d.type + _timestamp_default(c, key)
    if d.kind == "postgres":
        return _from_postgres(d, ours, key)
    return None


def _timestamp_default(c: Column, key: bool) -> str:
    """A TIMESTAMP is created NULL, or as a key with a default: without one, a server with
    explicit_defaults_for_timestamp off sets it to the time of each insert or update."""
    if c.data_type != "timestamp":
        return ""
    return " NOT NULL DEFAULT 0" if key else " NULL"


_UNKEYED = BINARY_TYPES - {"binary", "varbinary"} | {"tinytext", "text", "mediumtext"}
_UNKEYED |= {"longtext", "json"}
TEXT_CHARSET = " CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
ASCII = " CHARACTER SET ascii COLLATE ascii_bin"
MAX_VARCHAR = 255  # longer ones stay LONGTEXT: MySQL counts every VARCHAR in a row's 64 KB
# PostgreSQL type (format_type's, less its length or precision) -> (MySQL type, {n}: that
# length or precision, its default; the Spark type the source reads it as)
_FROM_POSTGRES = {
    "character varying": ("VARCHAR({n})" + TEXT_CHARSET, None, "STRING"),
    "character": ("CHAR({n})" + TEXT_CHARSET, None, "STRING"),
    "bit": ("VARCHAR({n})" + ASCII, None, "STRING"),
    "bit varying": ("VARCHAR({n})" + ASCII, None, "STRING"),
    "json": ("JSON", 0, "STRING"),
    "jsonb": ("JSON", 0, "STRING"),
    "uuid": ("CHAR(36)" + ASCII, 0, "STRING"),
    "inet": ("VARCHAR(43)" + ASCII, 0, "STRING"),
    "cidr": ("VARCHAR(43)" + ASCII, 0, "STRING"),
    "macaddr": ("VARCHAR(17)" + ASCII, 0, "STRING"),
    "macaddr8": ("VARCHAR(23)" + ASCII, 0, "STRING"),
    "time without time zone": ("TIME({n})", 6, "STRING"),
    "timestamp without time zone": ("DATETIME({n})", 6, "TIMESTAMP_NTZ"),
    "timestamp with time zone": ("DATETIME({n})", 6, "TIMESTAMP"),
}
_PG_TYPE = re.compile(r"^([a-z ]+?)(?:\((\d+)\))?( with(?:out)? time zone)?$")


def _from_postgres(d, ours: str, key: bool) -> str | None:
    if d.labels and not d.type.endswith("[]"):
        labels = ", ".join("'" + v.replace("\\", "\\\\").replace("'", "''") + "'" for v in d.labels)
        return f"ENUM({labels})" + TEXT_CHARSET
    m = _PG_TYPE.match(d.type)
    if not m:
        return None
    name = m.group(1) + (m.group(3) or "")
    rule = _FROM_POSTGRES.get(name)
    n = m.group(2) or (rule[1] if rule else None)
    if rule is None or rule[2] != ours or n is None or int(n) > MAX_VARCHAR:
        return None
    return None if key and rule[0] == "JSON" else rule[0].format(n=n)


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
    if pa.types.is_float32(t):  # its exact value: the shortest text of FLT_MAX is past FLT_MAX
        return column.cast(pa.float64()).cast(pa.string())
    return column.cast(pa.string())


def _escape(column: pa.Array) -> pa.Array:
    for raw, escaped in (("\\", "\\\\"), ("\t", "\\t"), ("\n", "\\n"), ("\r", "\\r")):
        column = pc.replace_substring(column, raw, escaped)
    return column
