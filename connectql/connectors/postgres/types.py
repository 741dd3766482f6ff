"""PostgreSQL <-> Spark types: which column types a source reads and how (CSV COPY into Arrow),
and which PostgreSQL type a sink creates for each Spark type."""

from __future__ import annotations

import base64
import io
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

from connectql.connectors.postgres.pgtext import spark_value, timestamp_precision
from connectql.connectors.relational import declared

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
    "macaddr8": "STRING",
    "interval": "STRING",
    "date": "DATE",
    "bytea": "BINARY",
    # unconstrained: its exact text, as PostgreSQL prints it (each value's own scale, NaN,
    # ±Infinity, any number of digits; the declared type travels with it)
    "numeric": "STRING",
    "oid": "BIGINT",
}
# types read as their text form (STRING): what the other cdc tools give and users query
_TEXT_FORM = {
    "money",  # as lc_monetary prints it, e.g. $12.50
    "tsquery", "tsvector",
    "point", "box", "circle", "line", "lseg", "path", "polygon",
    "int4range", "int8range", "numrange", "tsrange", "tstzrange", "daterange",
    "hstore", "ltree", "isbn", "isbn13", "issn", "issn13", "ismn", "ismn13", "ean13", "upc",
}  # fmt: skip
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
    """The Spark DDL type for a PostgreSQL type as `format_type()` prints it; None for an
    array of arrays."""
    if pg_type.endswith("[]"):
        inner = spark_type(pg_type[:-2], is_enum)
        return f"ARRAY<{inner}>" if inner and not inner.startswith("ARRAY") else None
    if is_enum:
        return "STRING"
    if pg_type in _SIMPLE:
        return _SIMPLE[pg_type]
    if pg_type.rpartition(".")[2].strip('"') in _TEXT_FORM:  # an extension's, maybe qualified
        return "STRING"
    m = _NUMERIC.match(pg_type)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))
        # wider than Spark's decimals: its exact text (the declared type travels with it)
        return f"DECIMAL({precision},{scale})" if precision <= MAX_DECIMAL_PRECISION else "STRING"
    # any other type: its text form, which its input function reads back (the declared type
    # travels with it, so a PostgreSQL target recreates it)
    return next((t for p, t in _PATTERNS if p.match(pg_type)), "STRING")


# ------------------------------------------------------------------ reading: COPY CSV -> Arrow


# the latest / earliest values Spark holds: where PostgreSQL's ±infinity land (pgtext.to_python)
TIMESTAMP_US_RANGE = (-62_135_596_800_000_000, 253_402_300_799_999_999)
DATE_DAYS_RANGE = (-719_162, 2_932_896)


def select_expr(column: str, dtype: DataType, pg_type: str | None = None) -> str:
    """How a source selects a column (of PostgreSQL type `pg_type`) so that its CSV text
    converts into Arrow exactly. Strings and arrays are the type's own text form (its output
    function, as the change log has it; not a ::text cast, which prints inet and char(n)
    otherwise). A timestamp past Spark's range is its latest value in the column's precision."""
    q = '"' + column.replace('"', '""') + '"'
    if isinstance(dtype, (TimestampType, TimestampNTZType)):
        low, high = TIMESTAMP_US_RANGE
        high -= high % 10 ** (6 - timestamp_precision(pg_type))
        return _finite(q, f"(extract(epoch from {q}) * 1000000)::bigint", low, high)
    if isinstance(dtype, DateType):
        low, high = DATE_DAYS_RANGE
        return _finite(q, f"({q} - date '1970-01-01')", low, high)
    if isinstance(dtype, BinaryType):
        return f"encode({q}, 'base64')"
    if isinstance(dtype, DecimalType):  # NaN and ±Infinity: NULL; rounded (pgtext.spark_value)
        return (
            f"CASE WHEN {q} IN ('NaN', 'Infinity', '-Infinity') THEN NULL"
            f" ELSE round({q}, {dtype.scale}) END"
        )
    return q


def _finite(q: str, expr: str, low: int, high: int) -> str:
    return (
        f"CASE WHEN isfinite({q}) THEN greatest({low}, least({high}, {expr}))"
        f" WHEN {q} > 'epoch' THEN {high}"
        f" WHEN {q} < 'epoch' THEN {low} END"
    )


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


def csv_to_arrow(data: bytes, schema: StructType, types: dict | None = None) -> pa.Table:
    """Rows COPYed as CSV (selected with select_expr) -> an Arrow table of exactly `schema`;
    `types` (column -> PostgreSQL type) reads arrays from their text form."""
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
    columns = [
        _convert(table.column(i), f.type, field, (types or {}).get(f.name, "text[]"))
        for i, (f, field) in enumerate(zip(target, schema.fields, strict=True))
    ]
    return pa.Table.from_arrays(columns, schema=target)


def _convert(column: pa.ChunkedArray, arrow: pa.DataType, field, pg: str) -> pa.ChunkedArray:
    if pa.types.is_binary(arrow):
        values = [None if v is None else base64.b64decode(v) for v in column.to_pylist()]
        return pa.chunked_array([pa.array(values, arrow)], arrow)
    if pa.types.is_list(arrow):
        values = [spark_value(v, pg, field.dataType) for v in column.to_pylist()]
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


def created_type(field) -> tuple[str, tuple[str, ...]] | None:
    """The type auto.create gives a column whose source declared its type (declared.py), with
    an enum's labels: PostgreSQL's own type as declared, MySQL's closest (README's type
    tables); None: pg_type's for its Spark type (no declared type, or one the column's Spark
    type no longer matches, e.g. after a transform)."""
    d = declared.of(field)
    ours = field.dataType.simpleString().upper()
    if d is None:
        return None
    if d.kind == "postgres":
        same = spark_type(d.type, bool(d.labels)) == ours
        return (d.type, d.labels) if same else None
    if d.kind == "mysql":
        m = re.match(r"^(\w+)(?:\((\d+)(?:,(\d+))?\))?", d.type.lower())
        rule = _FROM_MYSQL.get(m.group(1)) if m else None
        if rule is None or ours not in rule[1]:
            return None
        return rule[0].format(n=m.group(2) or 0, s=m.group(3) or 0), ()
    return None


# MySQL type -> (PostgreSQL type, {n}: the MySQL type's length or fractional digits; the
# Spark types the source reads it as: a date in a primary key as its text, zero dates and all)
_FROM_MYSQL = {
    "varchar": ("character varying({n})", ("STRING",)),
    "char": ("character({n})", ("STRING",)),
    "json": ("jsonb", ("STRING",)),
    "time": ("interval", ("STRING",)),  # MySQL's TIME spans -838:59:59 to 838:59:59
    "date": ("date", ("DATE", "STRING")),
    "datetime": ("timestamp({n}) without time zone", ("TIMESTAMP_NTZ", "STRING")),
    "timestamp": ("timestamp({n}) with time zone", ("TIMESTAMP", "STRING")),
    "year": ("smallint", ("INT",)),
    "decimal": ("numeric({n},{s})", ("STRING",)),  # wider than 38 digits: carried as its text
    "uuid": ("uuid", ("STRING",)),
    "inet4": ("inet", ("STRING",)),
    "inet6": ("inet", ("STRING",)),
}


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
        if isinstance(v, bytes):
            text = "\\x" + v.hex()
        else:
            text = str(v).lower() if isinstance(v, bool) else str(v)
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return "{" + ",".join(item(v) for v in values) + "}"
