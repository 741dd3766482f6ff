"""Convert PostgreSQL's text form of a value (what a type's output function prints, as pgoutput
sends it) to the Python value of its column's Spark type."""

from __future__ import annotations

import datetime as _dt
import re
from decimal import ROUND_HALF_UP, Context, Decimal

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
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

__all__ = ["spark_column", "spark_value", "to_python"]


def spark_value(text: str | None, pg_type: str, dtype: DataType):
    """The value for a column of Spark type `dtype` from PostgreSQL's text form of a value of
    `pg_type`: the one conversion the snapshot (arrays) and the change log share. A numeric
    NaN or ±Infinity (which no DECIMAL holds) is NULL; a date or timestamp ±infinity, or one
    beyond Python's years 1..9999 (BC, or a five-digit year), is the latest / earliest
    representable value."""
    if text is None:
        return None
    if isinstance(dtype, StringType):
        return text
    if isinstance(dtype, ArrayType) and text.startswith("{{"):
        raise ValueError(f"{pg_type} value {text[:200]} has more than one dimension: {_ONE_DIM}")
    if _texts(dtype):  # an array of texts: each element as PostgreSQL prints it
        return _fit(to_python(text, "text[]"), dtype)
    try:
        value = to_python(text, pg_type)
    except ValueError:
        if not _BEYOND_RE.match(text):
            raise
        value = to_python("-infinity" if text.endswith(" BC") else "infinity", pg_type)
    if (
        isinstance(value, _dt.datetime) and value in _LATEST
    ):  # the clamp, in the column's precision (.999999 rounds up in (3))
        return _truncated(value, timestamp_precision(pg_type))
    return _fit(value, dtype)


def timestamp_precision(pg_type: str | None) -> int:
    """The fractional digits of a timestamp type: 3 for 'timestamp(3) with time zone', 6
    when it declares none."""
    m = _PRECISION_RE.match(pg_type or "")
    return int(m.group(1)) if m else 6


def _texts(dtype: DataType) -> bool:
    while isinstance(dtype, ArrayType):
        dtype = dtype.elementType
    return isinstance(dtype, StringType)


def _truncated(value: _dt.datetime, precision: int) -> _dt.datetime:
    return value.replace(microsecond=value.microsecond - value.microsecond % 10 ** (6 - precision))


def spark_column(values: list | pa.Array, pg_type: str, dtype: DataType) -> pa.Array | None:
    """A whole column of text forms (a list, or an Arrow string array) as the Arrow array
    spark_value would give value by value, parsed by Arrow where the two agree on every text
    PostgreSQL prints; None (or Arrow's error, at a text it does not take: infinity, BC, NaN,
    a scale to round) where not."""
    text = values if isinstance(values, pa.Array) else None
    if isinstance(dtype, StringType):
        return text if text is not None else pa.array(values, pa.string())
    target = _FAST.get((_normalize_type(pg_type), type(dtype)))
    if target is None:
        return None
    text = text if text is not None else pa.array(values, pa.string())
    if target == "bool":
        known = pc.is_in(text.drop_null(), value_set=pa.array(["t", "f"]))
        return pc.equal(text, "t") if pc.all(known).as_py() is not False else None
    if isinstance(dtype, DecimalType):
        # Arrow's cast wraps a value of more digits than the type holds (pyarrow 26):
        # only texts whose digits fit as they are go to it, the rest round or fail value by value
        p, s = dtype.precision, dtype.scale
        fits = rf"^-?\d{{1,{p - s}}}(\.\d{{0,{s}}})?$" if p > s else rf"^-?0(\.\d{{0,{s}}})?$"
        if pc.all(pc.match_substring_regex(text, fits)).as_py() is False:
            return None
        target = pa.decimal128(p, s)
    return pc.cast(text, target)


_BEYOND_RE = re.compile(r"(\d{5,}-|.* BC$)")
_ONE_DIM = "connectql reads one-dimensional arrays"
_PRECISION_RE = re.compile(r"^timestamp\((\d)\)")
_LATEST = {_dt.datetime.max, _dt.datetime.max.replace(tzinfo=_dt.timezone.utc)}


def _fit(value, dtype: DataType):
    if isinstance(value, list):
        if not isinstance(dtype, ArrayType):
            raise ValueError(f"an array of more dimensions than its column's: {_ONE_DIM}")
        return [None if v is None else _fit(v, dtype.elementType) for v in value]
    if isinstance(value, Decimal) and not value.is_finite():
        return None
    if isinstance(value, Decimal) and isinstance(dtype, DecimalType):
        return _fit_decimal(value, dtype)
    if isinstance(dtype, StringType):
        return str(value)
    return value


def _fit_decimal(value: Decimal, dtype: DecimalType) -> Decimal:
    """An unconstrained numeric's value in DECIMAL(38,18): rounded to its scale (half away from zero, as round() does); a
    ValueError when its whole part has more digits than the type holds."""
    rounded = value.quantize(Decimal(1).scaleb(-dtype.scale), ROUND_HALF_UP, _WIDE)
    if rounded.adjusted() >= dtype.precision - dtype.scale:
        raise ValueError(f"numeric value {value} does not fit {dtype.simpleString().upper()}")
    return rounded


_WIDE = Context(prec=1000)
_INT_TYPES = {"smallint", "integer", "bigint", "int2", "int4", "int8", "int", "oid"}
_FLOAT_TYPES = {"real", "double precision", "float4", "float8", "float"}
_NUMERIC_TYPES = {"numeric", "decimal"}
_BOOL_TYPES = {"boolean", "bool"}
_DATE_TYPES = {"date"}
_TS_TYPES = {"timestamp without time zone", "timestamp"}
_TSTZ_TYPES = {"timestamp with time zone", "timestamptz"}
_TIME_TYPES = {"time without time zone", "time"}
_BYTEA_TYPES = {"bytea"}
# (type, Spark type) -> what Arrow casts its texts to, for spark_column (oid: not an int there)
_FAST = {
    **{(t, k): a for t in _INT_TYPES - {"oid"} for k, a in (
        (ShortType, pa.int16()), (IntegerType, pa.int32()), (LongType, pa.int64()))},
    **{(t, k): a for t in _FLOAT_TYPES for k, a in (
        (FloatType, pa.float32()), (DoubleType, pa.float64()))},
    **{(t, DecimalType): "decimal" for t in _NUMERIC_TYPES},
    **{(t, BooleanType): "bool" for t in _BOOL_TYPES},
    **{(t, DateType): pa.date32() for t in _DATE_TYPES},
    **{(t, TimestampNTZType): pa.timestamp("us") for t in _TS_TYPES},
    **{(t, TimestampType): pa.timestamp("us", "UTC") for t in _TSTZ_TYPES},
}  # fmt: skip

_TYPMOD_RE = re.compile(r"\s*\(\s*\d+\s*(?:,\s*-?\d+\s*)?\)")


def _normalize_type(pg_type: str) -> str:
    """'timestamp(3) with time zone' -> 'timestamp with time zone', 'numeric(10,2)' ->
    'numeric', 'pg_catalog.int4' -> 'int4'; lower-cased."""
    t = _TYPMOD_RE.sub("", pg_type.strip()).lower()
    if t.startswith("pg_catalog."):
        t = t[len("pg_catalog.") :]
    return t


def to_python(text: str | None, pg_type: str):
    """Convert a value as printed by PostgreSQL (pgoutput.Change.values) to a Python value.

    ints -> int, real/double -> float, numeric -> Decimal, boolean -> bool, date -> date,
    timestamp -> naive datetime, timestamptz -> aware datetime in UTC, time -> time,
    bytea -> bytes, arrays (``type[]``) -> (nested) lists; other types (text, json, uuid,
    interval, enums, domains, ...) -> the str as printed. None passes through.
    Dates/timestamps 'infinity'/'-infinity' become the max/min Python value; values Python
    cannot represent (BC or year > 9999, time 24:00:00) raise ValueError.

    Values are printed by the type output functions in the session that decodes the slot (not
    the one that wrote the rows), so that session needs ``DateStyle = 'ISO'`` (timestamps,
    dates), ``bytea_output`` 'hex' or 'escape' (both understood); any ``TimeZone`` works, 'UTC'
    is the sensible one."""
    if text is None:
        return None
    t = _normalize_type(pg_type)
    if t.endswith("[]"):
        base = t[:-2].rstrip()
        while base.endswith("[]"):  # 'integer[][]' is not printed by PG, but accept it
            base = base[:-2].rstrip()
        conv = _converter(base)
        return _map_nested(_parse_array(text), conv)
    if t.startswith("_"):  # internal array name, e.g. _int4
        return _map_nested(_parse_array(text), _converter(t[1:]))
    return _converter(t)(text)


def _map_nested(items: list, conv) -> list:
    return [
        _map_nested(x, conv) if isinstance(x, list) else (None if x is None else conv(x))
        for x in items
    ]


def _converter(t: str):
    if t in _INT_TYPES:
        return int
    if t in _FLOAT_TYPES:
        return float
    if t in _NUMERIC_TYPES:
        return Decimal
    if t in _BOOL_TYPES:
        return _to_bool
    if t in _DATE_TYPES:
        return _parse_date
    if t in _TS_TYPES:
        return lambda s: _parse_timestamp(s, aware=False)
    if t in _TSTZ_TYPES:
        return lambda s: _parse_timestamp(s, aware=True)
    if t in _TIME_TYPES:
        return _parse_time
    if t in _BYTEA_TYPES:
        return _parse_bytea
    return str


def _to_bool(s: str) -> bool:
    # the output text of a boolean is t/f; accept true/false too
    if s in ("true", "t"):
        return True
    if s in ("false", "f"):
        return False
    raise ValueError(f"not a PostgreSQL boolean: {s!r}")


_DATE_RE = re.compile(r"(\d{4,})-(\d\d)-(\d\d)( BC)?")
_TIME_PART = r"(\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?"
_OFFSET_PART = r"([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?"
_TS_RE = re.compile(r"(\d{4,})-(\d\d)-(\d\d)[ T]" + _TIME_PART + "(?:" + _OFFSET_PART + ")?( BC)?")
_TIME_RE = re.compile(_TIME_PART)


def _check_era(year: str, bc: str | None, s: str) -> int:
    if bc or len(year) > 4:
        raise ValueError(f"date outside Python's range (year 1..9999): {s!r}")
    return int(year)


def _parse_date(s: str) -> _dt.date:
    if s == "infinity":
        return _dt.date.max
    if s == "-infinity":
        return _dt.date.min
    m = _DATE_RE.fullmatch(s)
    if not m:
        raise ValueError(f"not an ISO date (is DateStyle ISO?): {s!r}")
    return _dt.date(_check_era(m.group(1), m.group(4), s), int(m.group(2)), int(m.group(3)))


def _micro(frac: str | None) -> int:
    return int(frac.ljust(6, "0")) if frac else 0


def _parse_timestamp(s: str, aware: bool) -> _dt.datetime:
    utc = _dt.timezone.utc
    if s == "infinity":
        return _dt.datetime.max.replace(tzinfo=utc) if aware else _dt.datetime.max
    if s == "-infinity":
        return _dt.datetime.min.replace(tzinfo=utc) if aware else _dt.datetime.min
    m = _TS_RE.fullmatch(s)
    if not m:
        raise ValueError(f"not an ISO timestamp (is DateStyle ISO?): {s!r}")
    (y, mo, d, hh, mi, ss, frac, sign, oh, om, os_, bc) = m.groups()
    hour = int(hh)
    if hour == 24:  # PostgreSQL does not print this for timestamps, but be safe
        raise ValueError(f"timestamp outside Python's range: {s!r}")
    value = _dt.datetime(
        _check_era(y, bc, s), int(mo), int(d), hour, int(mi), int(ss), _micro(frac)
    )
    if not aware:
        if sign:
            raise ValueError(f"unexpected UTC offset in timestamp without time zone: {s!r}")
        return value
    if not sign:
        raise ValueError(f"missing UTC offset in timestamp with time zone: {s!r}")
    offset = _dt.timedelta(hours=int(oh), minutes=int(om or 0), seconds=int(os_ or 0))
    if sign == "-":
        offset = -offset
    return value.replace(tzinfo=_dt.timezone(offset)).astimezone(utc)


def _parse_time(s: str) -> _dt.time:
    m = _TIME_RE.fullmatch(s)
    if not m:
        raise ValueError(f"not a time: {s!r}")
    hh, mi, ss, frac = m.groups()
    if int(hh) >= 24:
        raise ValueError(f"time outside Python's range: {s!r}")
    return _dt.time(int(hh), int(mi), int(ss), _micro(frac))


_OCTAL_RE = re.compile(rb"\\([0-7]{3})|\\\\")


def _parse_bytea(s: str) -> bytes:
    if s.startswith("\\x"):
        return bytes.fromhex(s[2:])
    # bytea_output = 'escape': printable ASCII as-is, \\ for backslash, \ooo for the rest
    raw = s.encode("latin-1")
    return _OCTAL_RE.sub(lambda m: bytes([int(m.group(1), 8)]) if m.group(1) else b"\\", raw)


_ARRAY_DIMS_RE = re.compile(r"(?:\[-?\d+:-?\d+\])+=")


def _parse_array(s: str) -> list:
    """array_out() text -> nested lists of str / None ('{1,NULL}', '[0:1]={a,b}', '{{1},{2}}')."""
    m = _ARRAY_DIMS_RE.match(s)
    pos = m.end() if m else 0
    if not s.startswith("{", pos):
        raise ValueError(f"not an array literal: {s!r}")
    result, pos = _parse_array_level(s, pos)
    if s[pos:].strip():
        raise ValueError(f"trailing text after array literal: {s!r}")
    return result


def _parse_array_level(s: str, pos: int) -> tuple[list, int]:
    assert s[pos] == "{"
    pos += 1
    items: list = []
    n = len(s)
    if pos < n and s[pos] == "}":
        return items, pos + 1
    while True:
        while pos < n and s[pos] in " \t\n\r":
            pos += 1
        if pos >= n:
            raise ValueError(f"unterminated array literal: {s!r}")
        ch = s[pos]
        if ch == "{":
            sub, pos = _parse_array_level(s, pos)
            items.append(sub)
        elif ch == '"':
            pos += 1
            buf = []
            while True:
                if pos >= n:
                    raise ValueError(f"unterminated quoted array element: {s!r}")
                c = s[pos]
                if c == "\\":
                    buf.append(s[pos + 1 : pos + 2])
                    pos += 2
                elif c == '"':
                    pos += 1
                    break
                else:
                    buf.append(c)
                    pos += 1
            items.append("".join(buf))
        else:
            buf = []
            while pos < n and s[pos] not in ",}":
                if s[pos] == "\\":
                    buf.append(s[pos + 1 : pos + 2])
                    pos += 2
                else:
                    buf.append(s[pos])
                    pos += 1
            word = "".join(buf).strip()
            items.append(None if word.upper() == "NULL" else word)
        while pos < n and s[pos] in " \t\n\r":
            pos += 1
        if pos >= n:
            raise ValueError(f"unterminated array literal: {s!r}")
        if s[pos] == ",":
            pos += 1
        elif s[pos] == "}":
            return items, pos + 1
        else:
            raise ValueError(f"unexpected {s[pos]!r} in array literal: {s!r}")
