"""PostgreSQL <-> Spark types: which column types a source reads and how (CSV COPY into Arrow),
and which PostgreSQL type a sink creates for each Spark type."""

from __future__ import annotations

import base64
import io
import json
import re

import pyarrow as pa
import pyarrow.csv as pcsv
from pyspark.sql.pandas.types import to_arrow_schema
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
    StructType,
    TimestampNTZType,
    TimestampType,
)

_SIMPLE = {
    "smallint": "SMALLINT",
    "integer": "INT",
    "bigint": "BIGINT",
    "real": "FLOAT",
    "double precision": "DOUBLE",
    "boolean": "BOOLEAN",
    "text": "STRING",
    "name": "STRING",
    "citext": "STRING",
    "json": "STRING",
    "jsonb": "STRING",
    "uuid": "STRING",
    "xml": "STRING",
    "inet": "STRING",
    "cidr": "STRING",
    "macaddr": "STRING",
    "interval": "STRING",
    "date": "DATE",
    "bytea": "BINARY",
    "numeric": "DECIMAL(38,18)",
}
_PATTERNS = [
    (re.compile(r"^(character varying|character|varchar|char|bpchar)(\(\d+\))?$"), "STRING"),
    (re.compile(r"^timestamp(\(\d\))? without time zone$"), "TIMESTAMP_NTZ"),
    (re.compile(r"^timestamp(\(\d\))? with time zone$"), "TIMESTAMP"),
    (re.compile(r"^time(\(\d\))? with(out)? time zone$"), "STRING"),
    (re.compile(r"^bit( varying)?(\(\d+\))?$"), "STRING"),
]
_NUMERIC = re.compile(r"^numeric\((\d+),(\d+)\)$")
MAX_DECIMAL_PRECISION = 38


def spark_type(pg_type: str, is_enum: bool = False) -> str | None:
    """The Spark DDL type for a PostgreSQL type as `format_type()` prints it; None if unsupported."""
    if pg_type.endswith("[]"):
        inner = spark_type(pg_type[:-2], is_enum)
        return f"ARRAY<{inner}>" if inner and not inner.startswith("ARRAY") else None
    if is_enum:
        return "STRING"
    if pg_type in _SIMPLE:
        return _SIMPLE[pg_type]
    m = _NUMERIC.match(pg_type)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))
        return f"DECIMAL({precision},{scale})" if precision <= MAX_DECIMAL_PRECISION else None
    return next((t for p, t in _PATTERNS if p.match(pg_type)), None)


# ------------------------------------------------------------------ reading: COPY CSV -> Arrow


def select_expr(column: str, dtype: DataType) -> str:
    """How a source selects a column so that its CSV text converts into Arrow exactly."""
    q = '"' + column.replace('"', '""') + '"'
    if isinstance(dtype, (TimestampType, TimestampNTZType)):
        return f"(extract(epoch from {q}) * 1000000)::bigint"
    if isinstance(dtype, DateType):
        return f"({q} - date '1970-01-01')"
    if isinstance(dtype, BinaryType):
        return f"encode({q}, 'base64')"
    if isinstance(dtype, ArrayType):
        return f"array_to_json({q})::text"
    if isinstance(dtype, StringType):
        return f"{q}::text"
    return q


def _csv_type(arrow: pa.DataType) -> pa.DataType:
    if pa.types.is_timestamp(arrow):
        return pa.int64()
    if pa.types.is_date32(arrow):
        return pa.int32()
    if pa.types.is_binary(arrow) or pa.types.is_list(arrow):
        return pa.string()
    return arrow


def arrow_schema(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema, timezone="UTC")


def csv_to_arrow(data: bytes, schema: StructType) -> pa.Table:
    """Rows COPYed as CSV (selected with select_expr) -> an Arrow table of exactly `schema`."""
    target = arrow_schema(schema)
    if not data:
        return target.empty_table()
    table = pcsv.read_csv(
        io.BytesIO(data),
        read_options=pcsv.ReadOptions(column_names=target.names, block_size=1 << 24),
        parse_options=pcsv.ParseOptions(newlines_in_values=True),
        convert_options=pcsv.ConvertOptions(
            column_types={f.name: _csv_type(f.type) for f in target},
            true_values=["t"],
            false_values=["f"],
            null_values=[""],
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
        ),
    )
    columns = [_convert(table.column(i), f.type) for i, f in enumerate(target)]
    return pa.Table.from_arrays(columns, schema=target)


def _convert(column: pa.ChunkedArray, arrow: pa.DataType) -> pa.ChunkedArray:
    if pa.types.is_binary(arrow):
        values = [None if v is None else base64.b64decode(v) for v in column.to_pylist()]
        return pa.chunked_array([pa.array(values, arrow)], arrow)
    if pa.types.is_list(arrow):
        values = [None if v is None else json.loads(v) for v in column.to_pylist()]
        return pa.chunked_array([pa.array(values, arrow)], arrow)
    return column.cast(arrow)


# ------------------------------------------------------------------ writing: Arrow -> COPY CSV


def pg_type(dtype: DataType) -> str | None:
    """The PostgreSQL column type a sink creates for a Spark type; None if it has none."""
    if isinstance(dtype, ArrayType):
        inner = pg_type(dtype.elementType)
        return f"{inner}[]" if inner and not inner.endswith("[]") else None
    if isinstance(dtype, DecimalType):
        return f"numeric({dtype.precision},{dtype.scale})"
    for spark, pg in _PG_TYPES:
        if isinstance(dtype, spark):
            return pg
    return None


_PG_TYPES = [
    (BooleanType, "boolean"),
    ((ByteType, ShortType), "smallint"),
    (IntegerType, "integer"),
    (LongType, "bigint"),
    (FloatType, "real"),
    (DoubleType, "double precision"),
    (StringType, "text"),
    (BinaryType, "bytea"),
    (DateType, "date"),
    (TimestampNTZType, "timestamp"),
    (TimestampType, "timestamptz"),
]


def arrow_to_csv(batch: pa.RecordBatch | pa.Table) -> bytes:
    """CSV text that `COPY ... FROM STDIN (FORMAT csv)` reads back as the same values."""
    columns = [_copy_text(c) for c in batch.columns]
    table = pa.Table.from_arrays(columns, names=batch.schema.names)
    out = io.BytesIO()
    pcsv.write_csv(table, out, pcsv.WriteOptions(include_header=False))
    return out.getvalue()


def _copy_text(column) -> pa.Array:
    t = column.type
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return pa.array([None if v is None else "\\x" + v.hex() for v in column.to_pylist()])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.array([None if v is None else _array_literal(v) for v in column.to_pylist()])
    return column


def _array_literal(values: list) -> str:
    def item(v) -> str:
        if v is None:
            return "NULL"
        text = str(v).lower() if isinstance(v, bool) else str(v)
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return "{" + ",".join(item(v) for v in values) + "}"
