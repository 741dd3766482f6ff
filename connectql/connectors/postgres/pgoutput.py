"""Decode the messages of PostgreSQL's built-in `pgoutput` logical decoding plugin (protocol
version 1: Begin, Relation, Insert, Update, Delete, Commit) into Begin / Change / Commit records
whose values are the columns' text forms (the type output functions' text)."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "CHANGES",
    "UNCHANGED_TOAST",
    "Begin",
    "Change",
    "Commit",
    "Decoder",
    "relation_oid",
    "texts",
]

PG_EPOCH_MS = 946_684_800_000  # 2000-01-01 in ms since the Unix epoch
CHANGES = (b"I", b"U", b"D")  # the messages of a row change


class _UnchangedToast:
    """An out-of-line (TOASTed) value an UPDATE did not change: pgoutput sends the kind 'u'
    and no value for it."""

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
class Begin:
    xid: int
    ts_ms: int


@dataclass(frozen=True)
class Commit:
    lsn: int  # the commit record's LSN
    end_lsn: int
    ts_ms: int


@dataclass(frozen=True)
class Change:
    """One row change of `table` ('schema.table'). `values` maps column -> text (None = NULL,
    UNCHANGED_TOAST = an unchanged out-of-line value); `old_key` holds the replica identity's
    columns of the old row (all columns with REPLICA IDENTITY FULL), when the server sent it."""

    table: str
    op: str  # 'c' insert, 'u' update, 'd' delete
    values: dict
    types: dict[str, str]
    old_key: dict | None = None


@dataclass(frozen=True)
class Relation:
    table: str
    columns: tuple[str, ...]
    key: frozenset[str]
    types: dict[str, str]


class Decoder:
    """Decodes one decoding session's messages in order (a Relation message describes a table
    before its first change). `type_name(oid, typmod)` gives a type as format_type() prints it."""

    def __init__(self, type_name: Callable[[int, int], str]):
        self.type_name = type_name
        self.relations: dict[int, Relation] = {}

    def relation(self, oid: int) -> Relation:
        """The table a change message names (its Relation message came first)."""
        rel = self.relations.get(oid)
        if rel is None:
            raise ValueError("pgoutput sent a change before its table's Relation message")
        return rel

    def feed(self, data: bytes) -> Begin | Commit | Change | None:
        """One message; None for those that carry no row change (Relation, Type, Origin,
        Truncate, logical messages)."""
        kind = data[:1]
        if kind == b"B":
            _final, ts, xid = struct.unpack_from("!QqI", data, 1)
            return Begin(xid, _ms(ts))
        if kind == b"C":
            _flags, lsn, end, ts = struct.unpack_from("!BQQq", data, 1)
            return Commit(lsn, end, _ms(ts))
        if kind == b"R":
            self._relation(_Reader(data, 1))
            return None
        if kind in CHANGES:
            return self._change(kind, _Reader(data, 1))
        return None

    def _relation(self, r: _Reader) -> None:
        oid = r.int32()
        schema, name = r.string(), r.string()
        r.byte()  # replica identity setting
        columns, key, types = [], set(), {}
        for _ in range(r.int16()):
            flags, col = r.byte(), r.string()
            type_oid, typmod = r.int32(), r.int32s()
            columns.append(col)
            types[col] = self.type_name(type_oid, typmod)
            if flags & 1:
                key.add(col)
        self.relations[oid] = Relation(f"{schema}.{name}", tuple(columns), frozenset(key), types)

    def _change(self, kind: bytes, r: _Reader) -> Change:
        rel = self.relation(r.int32())
        old = None
        tag = r.byte()
        if tag in (ord("K"), ord("O")):
            old, r.pos = _tuple(rel.columns, r.data, r.pos)
            if tag == ord("K"):  # the key's columns; the others are sent as NULL
                old = {c: v for c, v in old.items() if c in rel.key}
            if kind == b"D":
                return Change(rel.table, "d", old, rel.types, None)
            tag = r.byte()
        if tag != ord("N"):
            raise ValueError(f"pgoutput: unexpected tuple tag {chr(tag)!r} in a change")
        op = "c" if kind == b"I" else "u"
        return Change(rel.table, op, _tuple(rel.columns, r.data, r.pos)[0], rel.types, old)


_TEXT, _NULL, _TOASTED = ord("t"), ord("n"), ord("u")
_INT16, _INT32 = struct.Struct("!h").unpack_from, struct.Struct("!i").unpack_from
_OID = struct.Struct("!I").unpack_from


def relation_oid(message: bytes) -> int:
    """The relation a change message names (after its kind)."""
    return _OID(message, 1)[0]


def _tuple(columns: tuple[str, ...], data: bytes, pos: int) -> tuple[dict, int]:
    """A TupleData's values by column, and the position after it."""
    values, pos, _unchanged = texts(data, pos)
    return dict(zip(columns, values, strict=False)), pos


def texts(data: bytes, pos: int) -> tuple[list, int, bool]:
    """A TupleData's values in column order, the position after it, and whether one is an
    unchanged out-of-line value (the hot loop of a drain: one unpack per value, no method
    calls)."""
    values: list = []
    append = values.append
    unchanged = False
    (n,) = _INT16(data, pos)
    pos += 2
    for _ in range(n):
        kind = data[pos]
        if kind == _TEXT:
            (size,) = _INT32(data, pos + 1)
            pos += 5 + size
            append(data[pos - size : pos].decode("utf-8"))
        elif kind == _NULL:
            append(None)
            pos += 1
        elif kind == _TOASTED:
            append(UNCHANGED_TOAST)
            unchanged = True
            pos += 1
        else:
            raise ValueError(f"pgoutput: unexpected value kind {chr(kind)!r}")
    return values, pos, unchanged


def _ms(pg_us: int) -> int:
    """A pgoutput timestamp (µs since 2000-01-01 UTC) in ms since the Unix epoch."""
    return PG_EPOCH_MS + pg_us // 1000


class _Reader:
    def __init__(self, data: bytes, pos: int):
        self.data, self.pos = data, pos

    def _unpack(self, fmt: str, size: int):
        value = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += size
        return value

    def byte(self) -> int:
        return self._unpack("!B", 1)

    def int16(self) -> int:
        return self._unpack("!h", 2)

    def int32(self) -> int:
        return self._unpack("!I", 4)

    def int32s(self) -> int:
        return self._unpack("!i", 4)

    def bytes(self, n: int) -> bytes:
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def string(self) -> str:
        end = self.data.index(b"\0", self.pos)
        out = self.data[self.pos : end].decode("utf-8")
        self.pos = end + 1
        return out
