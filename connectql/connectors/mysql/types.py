"""MySQL/MariaDB -> Spark types for sources: which column types a source reads, how a snapshot's
text rows become Arrow, and how binlog values (from mysql-replication) become the same values."""

from __future__ import annotations

import datetime as dt
import io
import json
from dataclasses import dataclass
from decimal import Decimal

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    IntegralType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

MAX_DECIMAL_PRECISION = 38
STRING_TYPES = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "json"}
STRING_TYPES |= {"enum", "set", "time", "uuid", "inet4", "inet6"}
BINARY_TYPES = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}
# (signed, unsigned) Spark types of the integer types
INTEGERS = {
    "tinyint": ("SMALLINT", "SMALLINT"),
    "smallint": ("SMALLINT", "INT"),
    "mediumint": ("INT", "INT"),
    "int": ("INT", "BIGINT"),
    "integer": ("INT", "BIGINT"),
    "bigint": ("BIGINT", "DECIMAL(20,0)"),
}


@dataclass(frozen=True)
class Column:
    """A column as information_schema.COLUMNS.COLUMN_TYPE describes it."""

    name: str
    column_type: str  # 'int(10) unsigned', "enum('a','b')", 'decimal(12,2)', 'datetime(6)', ...

    @property
    def data_type(self) -> str:
        return self.column_type.split("(")[0].split(" ")[0].lower()

    @property
    def args(self) -> list[int]:
        """The numbers in the type's parentheses: (12,2) -> [12, 2]; none -> []."""
        if "(" not in self.column_type or self.data_type in ("enum", "set"):
            return []
        inner = self.column_type[self.column_type.index("(") + 1 : self.column_type.index(")")]
        return [int(x) for x in inner.split(",")]

    @property
    def unsigned(self) -> bool:
        return "unsigned" in self.column_type

    @property
    def members(self) -> list[str]:
        """The values of an enum or set column, in definition order."""
        inner = self.column_type[self.column_type.index("(") + 1 : self.column_type.rindex(")")]
        out, cur, quoted, i = [], "", False, 0
        while i < len(inner):
            ch = inner[i]
            if ch == "'" and quoted and inner[i + 1 : i + 2] == "'":
                cur, i = cur + "'", i + 2
                continue
            if ch == "'":
                quoted = not quoted
            elif ch == "," and not quoted:
                out.append(cur)
                cur = ""
            else:
                cur += ch
            i += 1
        return [*out, cur]

    @property
    def bits(self) -> int:
        return (self.args or [1])[0]


def spark_type(c: Column) -> str | None:
    """The Spark DDL type of a column; None if connectql cannot read it."""
    t = c.data_type
    if t in INTEGERS:
        return INTEGERS[t][c.unsigned]
    if t in ("decimal", "numeric"):
        precision, scale = (c.args + [10, 0][len(c.args) :])[:2]
        return f"DECIMAL({precision},{scale})" if precision <= MAX_DECIMAL_PRECISION else None
    if t == "float":
        return "FLOAT"
    if t == "double":
        return "DOUBLE"
    if t in STRING_TYPES:
        return "STRING"
    if t in BINARY_TYPES:
        return "BINARY"
    if t == "date":
        return "DATE"
    if t == "datetime":
        return "TIMESTAMP_NTZ"
    if t == "timestamp":
        return "TIMESTAMP"
    if t == "year":
        return "INT"
    if t == "bit":
        return "BOOLEAN" if c.bits == 1 else "BIGINT"
    return None


def arrow_schema(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema, timezone="UTC")


# ------------------------------------------------------------------ snapshot: text rows -> Arrow


def select_expr(c: Column) -> str:
    """How a snapshot selects a column so that its text converts into Arrow exactly."""
    q = "`" + c.name.replace("`", "``") + "`"
    if c.data_type == "bit":
        return f"{q} + 0"  # as a number, not bytes
    return q


def csv_expr(c: Column, dtype: DataType) -> str:
    """SQL giving a column as one CSV field: strings quoted (an unquoted empty field is NULL),
    binary as hex, other values as the server prints them."""
    q = "`" + c.name.replace("`", "``") + "`"
    if isinstance(dtype, StringType):
        q = f"""CONCAT('"', REPLACE({q}, '"', '""'), '"')"""
    elif isinstance(dtype, BinaryType):
        q = f"""CONCAT('"', HEX({q}), '"')"""
    elif c.data_type == "bit":
        q = f"{q} + 0"
    return f"IFNULL({q}, '')"


def csv_to_arrow(data: bytes, schema: StructType) -> pa.RecordBatch:
    """Lines of csv_expr fields -> Arrow of `schema`."""
    target = arrow_schema(schema)
    table = pcsv.read_csv(
        io.BytesIO(data),
        read_options=pcsv.ReadOptions(column_names=target.names, block_size=1 << 24),
        parse_options=pcsv.ParseOptions(newlines_in_values=True),
        convert_options=pcsv.ConvertOptions(
            column_types={f.name: pa.string() for f in target},
            null_values=[""],
            strings_can_be_null=True,
            quoted_strings_can_be_null=False,
        ),
    )
    arrays = [_from_csv(table.column(i).combine_chunks(), f.type) for i, f in enumerate(target)]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _from_csv(text: pa.Array, arrow: pa.DataType) -> pa.Array:
    if pa.types.is_binary(arrow):
        return pa.array([None if v is None else bytes.fromhex(v) for v in text.to_pylist()], arrow)
    return _from_text(text, arrow)


def rows_to_arrow(rows: list[tuple], schema: StructType) -> pa.RecordBatch:
    """Rows fetched without conversions (text, bytes for binary columns) -> Arrow of `schema`."""
    target = arrow_schema(schema)
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(target)
    arrays = [_from_text(list(values), f.type) for values, f in zip(columns, target, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _from_text(values, arrow: pa.DataType) -> pa.Array:
    """Text values (a list or a string array) -> an array of `arrow`."""
    if pa.types.is_binary(arrow):
        return pa.array(values, arrow)
    text = values if isinstance(values, pa.Array) else pa.array(values, pa.string())
    if pa.types.is_string(arrow):
        return text
    if pa.types.is_timestamp(arrow) or pa.types.is_date(arrow):
        text = pc.if_else(pc.starts_with(text, "0000-00-00"), None, text)  # zero dates
        if pa.types.is_timestamp(arrow):
            return text.cast(pa.timestamp("us")).cast(arrow)
    return text.cast(arrow)


# ------------------------------------------------------------------ binlog: Python values


def binlog_value(value, c: Column, dtype: DataType):
    """A value as mysql-replication decodes it -> the Python value of the column's Spark type."""
    if value is None:
        return None
    if isinstance(dtype, StringType):
        return _text(value, c)
    if isinstance(dtype, BinaryType):
        return value.encode() if isinstance(value, str) else bytes(value)
    if isinstance(dtype, BooleanType):
        return _bit(value) != 0
    if c.data_type == "bit":
        return _bit(value)
    if isinstance(dtype, DecimalType):
        return Decimal(value)
    if isinstance(dtype, IntegralType):
        return int(value)
    if isinstance(dtype, TimestampType):
        return value.replace(tzinfo=dt.timezone.utc) if isinstance(value, dt.datetime) else None
    if isinstance(dtype, (TimestampNTZType, DateType)):
        return value if isinstance(value, (dt.date, dt.datetime)) else None
    return value


def _text(value, c: Column) -> str:
    if isinstance(value, dt.timedelta):  # TIME
        return _time_text(value, (c.args or [0])[0])
    if isinstance(value, (set, frozenset)):  # SET: members in definition order
        return ",".join(m for m in c.members if m in value)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, (dict, list)):  # MySQL's binary JSON, decoded
        return json.dumps(value, separators=(", ", ": "))
    return str(value)


def _time_text(value: dt.timedelta, fsp: int) -> str:
    """As MySQL prints a TIME of `fsp` fractional digits."""
    total = value.days * 86400 + value.seconds
    sign = "-" if total < 0 else ""
    total = abs(total)
    text = f"{sign}{total // 3600:02d}:{total % 3600 // 60:02d}:{total % 60:02d}"
    return text + (f".{value.microseconds:06d}"[: fsp + 1] if fsp else "")


def _bit(value) -> int:
    if isinstance(value, (bytes, bytearray)):
        return int.from_bytes(value, "big")
    if isinstance(value, str):
        return int(value, 2)
    return int(value)
