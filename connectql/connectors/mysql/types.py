"""MySQL/MariaDB -> Spark types for sources: which column types a source reads, how a snapshot's
text rows become Arrow, and how binlog values (from mysql-replication) become the same values."""

from __future__ import annotations

import datetime as dt
import io
import ipaddress
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
    DoubleType,
    FloatType,
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
# spatial types: read as WKB (EWKB when the value has an SRID), see wkb()
GEOMETRY_TYPES = {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring"}
GEOMETRY_TYPES |= {"multipolygon", "geometrycollection", "geomcollection"}
# MariaDB types the binlog sends as fixed-size bytes (trailing zeros left out): their sizes
FIXED_BYTES = {"uuid": 16, "inet4": 4, "inet6": 16}
# (signed, unsigned) Spark types of the integer types
INTEGERS = {
    "tinyint": ("SMALLINT", "SMALLINT"),
    "smallint": ("SMALLINT", "INT"),
    "mediumint": ("INT", "INT"),
    "int": ("INT", "BIGINT"),
    "integer": ("INT", "BIGINT"),
    "bigint": ("BIGINT", "DECIMAL(20,0)"),
}
# the date types a primary key column carries as the text MySQL prints ('2024-05-00'): a zero
# part reads as NULL elsewhere, and a key cannot be NULL
KEY_TEXT_TYPES = {"date", "datetime", "timestamp"}


@dataclass(frozen=True)
class Column:
    """A column as information_schema.COLUMNS.COLUMN_TYPE describes it."""

    name: str
    column_type: str  # 'int(10) unsigned', "enum('a','b')", 'decimal(12,2)', 'datetime(6)', ...
    charset: str | None = None  # a text column's character set (information_schema)

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


def spark_type(c: Column, key: bool = False) -> str | None:
    """The Spark DDL type of a column (`key`: of the primary key); None if connectql cannot
    read it."""
    t = c.data_type
    if key and t in KEY_TEXT_TYPES:
        return "STRING"
    if t in INTEGERS:
        return INTEGERS[t][c.unsigned]
    if t in ("decimal", "numeric"):
        precision, scale = (c.args + [10, 0][len(c.args) :])[:2]
        # wider than Spark's decimals: its exact text (the declared type travels with it)
        return f"DECIMAL({precision},{scale})" if precision <= MAX_DECIMAL_PRECISION else "STRING"
    if t == "float":
        return "FLOAT"
    if t == "double":
        return "DOUBLE"
    if t in STRING_TYPES:
        return "STRING"
    if t in BINARY_TYPES or t in GEOMETRY_TYPES:
        return "BINARY"
    if t == "date":
        return "DATE"
    if t == "datetime":
        return "TIMESTAMP_NTZ"
    if t == "timestamp":
        return "TIMESTAMP"
    if t == "year":
        return "INT"
    if t == "bit":  # bit(64) holds up to 2^64 - 1, past BIGINT
        return "BOOLEAN" if c.bits == 1 else "BIGINT" if c.bits < 64 else "DECIMAL(20,0)"
    return None


def arrow_schema(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema, timezone="UTC")


# ------------------------------------------------------------------ snapshot: text rows -> Arrow


def select_expr(c: Column) -> str:
    """How a snapshot selects a column so that its text converts into Arrow exactly."""
    q = "`" + c.name.replace("`", "``") + "`"
    if c.data_type == "bit":
        return f"{q} + 0"  # as a number, not bytes
    if c.data_type == "float":
        return f"CAST({q} AS DOUBLE)"  # a FLOAT prints 6 digits; its double form is exact
    return q


def csv_expr(c: Column, dtype: DataType) -> str:
    """SQL giving a column as one CSV field: strings quoted (an unquoted empty field is NULL),
    binary as hex, other values as the server prints them."""
    q = "`" + c.name.replace("`", "``") + "`"
    if isinstance(dtype, StringType):
        q = f"""CONCAT('"', REPLACE({q}, '"', '""'), '"')"""
    elif isinstance(dtype, BinaryType):
        q = f"""CONCAT('"', HEX({q}), '"')"""
    else:
        q = select_expr(c)
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
        return _dates(text, arrow)
    return text.cast(arrow)


# a zero year, month or day: '0000-00-00', '0001-00-00', '2024-05-00', '0000-01-01 ...'
ZERO_PART = r"^(0000-|\d{4}-00-|\d{4}-\d\d-00)"


def _dates(text: pa.Array, arrow: pa.DataType) -> pa.Array:
    """Dates and times as text -> `arrow`; a value with a zero part (which no date type outside
    MySQL holds), or one invalid otherwise (ALLOW_INVALID_DATES), is NULL, as on the binlog."""
    text = pc.if_else(pc.match_substring_regex(text, ZERO_PART), None, text)
    step = pa.timestamp("us") if pa.types.is_timestamp(arrow) else arrow
    try:
        return text.cast(step).cast(arrow)
    except pa.ArrowInvalid:
        return pa.array([_one_date(v, step) for v in text.to_pylist()], step).cast(arrow)


def _one_date(value: str | None, step: pa.DataType):
    try:
        return None if value is None else pa.scalar(value).cast(step).as_py()
    except pa.ArrowInvalid:
        return None


def wkb(stored: bytes) -> bytes:
    """A spatial value as MySQL stores it (a 4-byte little-endian SRID, then WKB) -> WKB, or
    with an SRID other than 0 EWKB (PostGIS's WKB with the SRID flag and the SRID after the
    type), so that the SRID is kept, as Debezium's (wkb, srid) pair keeps it, in one value
    that PostGIS, GEOS/shapely and DuckDB read."""
    srid, body = int.from_bytes(stored[:4], "little"), stored[4:]
    if srid == 0 or len(body) < 5:
        return body
    order = "little" if body[0] == 1 else "big"
    kind = int.from_bytes(body[1:5], order) | EWKB_SRID_FLAG
    return body[:1] + kind.to_bytes(4, order) + srid.to_bytes(4, order) + body[5:]


EWKB_SRID_FLAG = 0x20000000


def spatial(batch: pa.RecordBatch, columns: list[Column]) -> pa.RecordBatch:
    """A snapshot batch with its spatial columns (MySQL's stored form) as wkb() gives them."""
    names = [c.name for c in columns if c.data_type in GEOMETRY_TYPES]
    if not any(n in batch.schema.names for n in names):
        return batch
    arrays = [
        pa.array([None if v is None else wkb(v) for v in col.to_pylist()], pa.binary())
        if name in names
        else col
        for name, col in zip(batch.schema.names, batch.columns, strict=True)
    ]
    return pa.RecordBatch.from_arrays(arrays, schema=batch.schema)


# ------------------------------------------------------------------ binlog: Python values


def binlog_value(value, c: Column, dtype: DataType):
    """A value as mysql-replication decodes it -> the Python value of the column's Spark type."""
    if value is None:
        return None
    if isinstance(dtype, StringType) and c.data_type in KEY_TEXT_TYPES:
        return date_text(value, c)
    if isinstance(dtype, StringType):
        return _text(value, c)
    if isinstance(dtype, BinaryType):
        return _binary(value, c)
    if isinstance(dtype, BooleanType):
        return _bit(value) != 0
    if c.data_type == "bit":
        return _bit(value)
    if isinstance(dtype, DecimalType):
        return Decimal(value)
    if c.data_type == "year":
        return 0 if value == YEAR_ZERO else int(value)  # the binlog's 0 plus 1900
    if isinstance(dtype, IntegralType):
        return int(value)
    if isinstance(dtype, TimestampType):
        if not isinstance(value, dt.datetime) or value < FIRST_TIMESTAMP:
            return None  # the zero TIMESTAMP is 0 seconds in the binlog
        return value.replace(tzinfo=dt.timezone.utc)
    if isinstance(dtype, (TimestampNTZType, DateType)):
        return value if isinstance(value, (dt.date, dt.datetime)) else None
    return value


def binlog_column(values: list, c: Column, dtype: DataType) -> pa.Array | None:
    """A whole column of values as mysql-replication decodes them, as the Arrow array
    binlog_value would give value by value, where Arrow takes them as they are; None (or
    Arrow's error, at a value it does not take) where each value needs binlog_value."""
    kind = c.data_type
    if isinstance(dtype, StringType) and kind in _PLAIN_TEXT:
        return pa.array(values, pa.string())  # str, or bytes that are UTF-8
    plain = (
        (isinstance(dtype, IntegralType) and kind in INTEGERS)
        or (isinstance(dtype, DecimalType) and kind == "decimal")
        or (isinstance(dtype, (DoubleType, FloatType)) and kind in ("float", "double"))
        or (isinstance(dtype, TimestampNTZType) and kind == "datetime")
        or (isinstance(dtype, DateType) and kind == "date")
    )
    if plain:
        return pa.array(values, arrow_schema(StructType().add("v", dtype)).field("v").type)
    if isinstance(dtype, TimestampType) and kind == "timestamp":
        naive = pa.array(values, pa.timestamp("us"))
        first = pc.min(naive).as_py()
        if first is not None and first < FIRST_TIMESTAMP:
            return None  # the zero TIMESTAMP, read as NULL value by value
        return naive.cast(pa.timestamp("us", "UTC"))
    return None


def date_text(value, c: Column) -> str:
    """A key's DATE, DATETIME or TIMESTAMP as MySQL prints it (zero parts too), from what the
    binlog reader gives: a DATE's or DATETIME's raw value (binlog.read_raw; mysql-replication
    makes a zero part None), or a TIMESTAMP's UTC datetime (the zero one is second 0)."""
    fsp = (c.args or [0])[0]
    if isinstance(value, dt.datetime):
        zero = c.data_type == "timestamp" and value < FIRST_TIMESTAMP
        return _printed((0,) * 7 if zero else (*value.timetuple()[:6], value.microsecond), fsp)
    if c.data_type == "date":  # 3 bytes: year, month, day in 15, 4 and 5 bits
        return _printed((value >> 9, value >> 5 & 15, value & 31), 0)
    if isinstance(value, int):  # a DATETIME of before MySQL 5.6: YYYYMMDDhhmmss as a number
        day, time = divmod(value, 1_000_000)
        return _printed((day // 10_000, day // 100 % 100, day % 100, *_hms(time)), 0)
    return _printed(_datetime2(value, fsp), fsp)


def _datetime2(bits: str, fsp: int) -> tuple[int, ...]:
    """A DATETIME2's bytes, as bits: a sign bit, year * 13 + month in 17 bits, then day, hour,
    minute, second in 5, 5, 6, 6 bits; then the fraction in (fsp + 1) // 2 bytes, counting
    units of 10^-2, 10^-4 or 10^-6 seconds."""
    v, fraction = int(bits[:40], 2), bits[40:]
    year, month = divmod(v >> 22 & 0x1FFFF, 13)
    micro = int(fraction, 2) * 10 ** (6 - len(fraction) // 4) if fraction else 0
    return year, month, v >> 17 & 31, v >> 12 & 31, v >> 6 & 63, v & 63, micro


def _hms(time: int) -> tuple[int, int, int]:
    return time // 10_000, time // 100 % 100, time % 100


def _printed(parts: tuple[int, ...], fsp: int) -> str:
    """(year, month, day[, hour, minute, second, microsecond]) as MySQL prints them."""
    text = "{:04d}-{:02d}-{:02d}".format(*parts[:3])
    if len(parts) > 3:
        text += " {:02d}:{:02d}:{:02d}".format(*parts[3:6])
    if len(parts) > 6 and fsp:
        text += f".{parts[6]:06d}"[: fsp + 1]
    return text


_PLAIN_TEXT = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum"}
YEAR_ZERO = 1900
FIRST_TIMESTAMP = dt.datetime(1970, 1, 1, 0, 0, 1)  # the smallest TIMESTAMP MySQL stores


def _binary(value, c: Column) -> bytes:
    """The binlog leaves out a BINARY(n)'s trailing zero bytes: put them back."""
    value = value.encode() if isinstance(value, str) else bytes(value)
    if c.data_type in GEOMETRY_TYPES:
        return wkb(value)
    if c.data_type == "binary":
        return value.ljust((c.args or [1])[0], b"\0")
    return value


def _text(value, c: Column) -> str:
    if isinstance(value, dt.timedelta):  # TIME
        return _time_text(_binlog_time(value), (c.args or [0])[0])
    if isinstance(value, (set, frozenset)):  # SET: members in definition order
        return ",".join(m for m in c.members if m in value)
    if c.data_type in FIXED_BYTES:  # bytes ('' when all zero)
        raw = value.encode("latin-1") if isinstance(value, str) else bytes(value)
        return _address(raw.ljust(FIXED_BYTES[c.data_type], b"\0"), c.data_type)
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", errors="replace")
    if isinstance(value, (dict, list)):  # MySQL's binary JSON, decoded
        return json.dumps(value, separators=(", ", ": "))
    if isinstance(value, Decimal):  # a DECIMAL wider than Spark's: as MySQL prints it
        return f"{value:f}"
    return str(value)


def _address(raw: bytes, kind: str) -> str:
    """A MariaDB UUID, INET4 or INET6 as the server prints it."""
    if kind == "uuid":
        h = raw.hex()
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    if kind == "inet4":
        return str(ipaddress.IPv4Address(raw))
    v4 = ipaddress.IPv4Address(raw[12:])
    if raw[:10] == bytes(10) and raw[10:12] == b"\xff\xff":  # IPv4-mapped
        return f"::ffff:{v4}"
    if raw[:12] == bytes(12) and int(v4) > 1:  # IPv4-compatible
        return f"::{v4}"
    return str(ipaddress.IPv6Address(raw))


def _binlog_time(value: dt.timedelta) -> dt.timedelta:
    """A TIME as it is. MySQL stores a negative TIME with a fraction as the whole seconds one
    further from zero and the fraction counted back from there (-01:59:59.001 as -02:00:00
    and +0.999); mysql-replication reads that as -(02:00:00 - 0.001) = -01:59:59.999: its
    whole seconds are right, its fraction reversed."""
    if value >= dt.timedelta(0) or not (-value).microseconds:
        return value
    size = -value
    whole = dt.timedelta(days=size.days, seconds=size.seconds)
    return -(whole + dt.timedelta(seconds=1) - (size - whole))


def _time_text(value: dt.timedelta, fsp: int) -> str:
    """As MySQL prints a TIME of `fsp` fractional digits."""
    sign, size = ("-", -value) if value < dt.timedelta(0) else ("", value)
    total = size.days * 86400 + size.seconds
    text = f"{sign}{total // 3600:02d}:{total % 3600 // 60:02d}:{total % 60:02d}"
    return text + (f".{size.microseconds:06d}"[: fsp + 1] if fsp else "")


def _bit(value) -> int:
    if isinstance(value, (bytes, bytearray)):
        return int.from_bytes(value, "big")
    if isinstance(value, str):
        return int(value, 2)
    return int(value)
