"""Parse the text output of PostgreSQL's built-in ``test_decoding`` logical decoding plugin
into Begin / Change / Commit records, and convert the printed column values to Python values."""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass
from decimal import Decimal

__all__ = ["UNCHANGED_TOAST", "Begin", "Change", "Commit", "parse", "to_python"]


class _UnchangedToast:
    """Sentinel for test_decoding's ``unchanged-toast-datum``: an out-of-line (TOASTed) value
    that an UPDATE did not change, so it is not in the WAL record."""

    _instance: _UnchangedToast | None = None

    def __new__(cls) -> _UnchangedToast:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNCHANGED_TOAST"

    def __reduce__(self) -> str:
        return "UNCHANGED_TOAST"

    def __bool__(self) -> bool:
        return False


UNCHANGED_TOAST = _UnchangedToast()


@dataclass(frozen=True)
class Change:
    """One row change. ``values`` maps column -> text as the type's output function printed
    it (None = SQL NULL, ``UNCHANGED_TOAST`` = unchanged out-of-line value). For a delete it
    holds the old key / replica identity columns (test_decoding leaves out NULL ones there)."""

    table: str
    op: str  # 'c' insert, 'u' update, 'd' delete
    values: dict[str, str | None]
    types: dict[str, str]
    old_key: dict[str, str | None] | None = None


@dataclass(frozen=True)
class Begin:
    xid: int  # 0 when the slot was peeked without include-xids


@dataclass(frozen=True)
class Commit:
    xid: int  # 0 when the slot was peeked without include-xids
    ts_ms: int | None  # commit time, ms since the epoch (UTC); None without include-timestamp


# ---------------------------------------------------------------------------------------------
# parse
# ---------------------------------------------------------------------------------------------

_BEGIN_RE = re.compile(r"BEGIN(?: (\d+))?")
_COMMIT_RE = re.compile(r"COMMIT(?: (\d+))?(?: \(at (.+)\))?")
_OPS = {"INSERT": "c", "UPDATE": "u", "DELETE": "d"}
_NO_TUPLE = "(no-tuple-data)"
_ACTION_RE = re.compile(r"[A-Z]+")
_BARE_IDENT_RE = re.compile(r"[^\s.:\[\]\"]+")


def parse(data: str) -> Change | Begin | Commit | None:
    """Parse one ``data`` row of ``pg_logical_slot_{peek,get}_changes`` for test_decoding.

    Returns None for lines that carry no row change (TRUNCATE, logical messages, two-phase and
    streaming markers). Raises ValueError for a ``table ...`` line it cannot parse."""
    if data.startswith("BEGIN"):
        m = _BEGIN_RE.fullmatch(data)
        return Begin(int(m.group(1) or 0)) if m else None
    if data.startswith("COMMIT"):
        m = _COMMIT_RE.fullmatch(data)
        if not m:
            return None  # e.g. "COMMIT PREPARED '...'"
        ts_ms = None
        if m.group(2) is not None:
            ts = _parse_timestamp(m.group(2), aware=True)
            ts_ms = (ts - _EPOCH_UTC) // _dt.timedelta(milliseconds=1)
        return Commit(int(m.group(1) or 0), ts_ms)
    if data.startswith("table "):
        return _parse_table_line(data)
    return None


def _parse_table_line(data: str) -> Change | None:
    p = _Parser(data, len("table "))
    parts = [p.identifier()]
    while p.peek() == ".":
        p.pos += 1
        parts.append(p.identifier())
    table = ".".join(parts)
    p.expect(": ")
    m = _ACTION_RE.match(data, p.pos)
    if not m:
        p.fail("expected an action")
    action = m.group(0)
    p.pos = m.end()
    p.expect(":")
    if action == "TRUNCATE":
        return None
    if action not in _OPS:
        p.fail(f"unknown action {action!r}")
    op = _OPS[action]
    old_key = None
    if p.rest() == " " + _NO_TUPLE:
        return Change(table, op, {}, {}, None)
    if op == "u" and p.startswith(" old-key:"):
        p.pos += len(" old-key:")
        old_key, old_types = p.tuple(stop=" new-tuple:")
        p.expect(" new-tuple:")
        if p.rest() == " " + _NO_TUPLE:  # cannot happen for an UPDATE, but be tolerant
            return Change(table, op, {}, old_types, old_key)
    values, types = p.tuple()
    if p.pos != len(data):
        p.fail("trailing text")
    return Change(table, op, values, types, old_key)


class _Parser:
    def __init__(self, text: str, pos: int = 0):
        self.text = text
        self.pos = pos

    def fail(self, msg: str):
        raise ValueError(
            f"cannot parse test_decoding output at offset {self.pos} ({msg}): {self.text[:500]!r}"
        )

    def peek(self) -> str:
        return self.text[self.pos : self.pos + 1]

    def rest(self) -> str:
        return self.text[self.pos :]

    def startswith(self, s: str) -> bool:
        return self.text.startswith(s, self.pos)

    def expect(self, s: str) -> None:
        if not self.text.startswith(s, self.pos):
            self.fail(f"expected {s!r}")
        self.pos += len(s)

    def quoted(self, quote: str) -> str:
        """A ``quote``-delimited string with doubled quotes, starting at the opening quote."""
        text, i = self.text, self.pos + 1
        out = []
        while True:
            j = text.find(quote, i)
            if j < 0:
                self.fail("unterminated quoted string")
            out.append(text[i:j])
            if text.startswith(quote, j + 1):
                out.append(quote)
                i = j + 2
            else:
                self.pos = j + 1
                return "".join(out)

    def identifier(self) -> str:
        """A quote_identifier() output: "quoted" (with "" doubling) or bare [a-z0-9_$]..."""
        if self.peek() == '"':
            return self.quoted('"')
        m = _BARE_IDENT_RE.match(self.text, self.pos)
        if not m:
            self.fail("expected an identifier")
        self.pos = m.end()
        return m.group(0)

    def type_name(self) -> str:
        """A format_type_be() output in brackets, e.g. ``[integer[]]`` or ``["char"]``."""
        text, i, depth = self.text, self.pos, 0
        start = i + 1
        while i < len(text):
            ch = text[i]
            if ch == '"':
                j = i + 1
                while True:
                    j = text.find('"', j)
                    if j < 0:
                        self.fail("unterminated quoted type name")
                    if text.startswith('""', j):
                        j += 2
                    else:
                        break
                i = j
            elif ch == "[":
                depth += 1
            elif ch == "]":
                depth -= 1
                if depth == 0:
                    self.pos = i + 1
                    return text[start:i]
            i += 1
        self.fail("unterminated type name")

    def value(self) -> str | None:
        text = self.text
        if self.peek() == "'":
            return self.quoted("'")
        if text.startswith("B'", self.pos):  # bit / bit varying
            self.pos += 1
            return self.quoted("'")
        end = text.find(" ", self.pos)
        if end < 0:
            end = len(text)
        raw = text[self.pos : end]
        self.pos = end
        if raw == "null":
            return None
        if raw == "unchanged-toast-datum":
            return UNCHANGED_TOAST  # type: ignore[return-value]
        if not raw:
            self.fail("expected a value")
        return raw

    def tuple(self, stop: str | None = None) -> tuple[dict, dict[str, str]]:
        """`` col[type]:value`` repeated until the end of the text (or ``stop``)."""
        values: dict[str, str | None] = {}
        types: dict[str, str] = {}
        n = len(self.text)
        while self.pos < n:
            if stop is not None and self.startswith(stop):
                break
            self.expect(" ")
            name = self.identifier()
            if self.peek() != "[":
                self.fail("expected '[' after column name")
            types[name] = self.type_name()
            self.expect(":")
            values[name] = self.value()
        return values, types


# ---------------------------------------------------------------------------------------------
# to_python
# ---------------------------------------------------------------------------------------------

_INT_TYPES = {"smallint", "integer", "bigint", "int2", "int4", "int8", "int"}
_FLOAT_TYPES = {"real", "double precision", "float4", "float8", "float"}
_NUMERIC_TYPES = {"numeric", "decimal"}
_BOOL_TYPES = {"boolean", "bool"}
_DATE_TYPES = {"date"}
_TS_TYPES = {"timestamp without time zone", "timestamp"}
_TSTZ_TYPES = {"timestamp with time zone", "timestamptz"}
_TIME_TYPES = {"time without time zone", "time"}
_BYTEA_TYPES = {"bytea"}

_TYPMOD_RE = re.compile(r"\s*\(\s*\d+\s*(?:,\s*-?\d+\s*)?\)")
_EPOCH_UTC = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


def _normalize_type(pg_type: str) -> str:
    """'timestamp(3) with time zone' -> 'timestamp with time zone', 'numeric(10,2)' ->
    'numeric', 'pg_catalog.int4' -> 'int4'; lower-cased."""
    t = _TYPMOD_RE.sub("", pg_type.strip()).lower()
    if t.startswith("pg_catalog."):
        t = t[len("pg_catalog.") :]
    return t


def to_python(text: str | None, pg_type: str):
    """Convert a value as printed by PostgreSQL (see Change.values) to a Python value.

    ints -> int, real/double -> float, numeric -> Decimal, boolean -> bool, date -> date,
    timestamp -> naive datetime, timestamptz -> aware datetime in UTC, time -> time,
    bytea -> bytes, arrays (``type[]``) -> (nested) lists; other types (text, json, uuid,
    interval, enums, domains, ...) -> the str as printed. None and UNCHANGED_TOAST pass through.
    Dates/timestamps 'infinity'/'-infinity' become the max/min Python value; values Python
    cannot represent (BC or year > 9999, time 24:00:00) raise ValueError.

    Values are printed by the type output functions in the session that *peeks* the slot (not
    the one that wrote the rows), so that session needs ``DateStyle = 'ISO'`` (timestamps,
    dates), ``bytea_output`` 'hex' or 'escape' (both understood); any ``TimeZone`` works, 'UTC'
    is the sensible one."""
    if text is None or text is UNCHANGED_TOAST:
        return text
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
    # test_decoding prints top-level booleans as true/false; array elements come from boolout
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
