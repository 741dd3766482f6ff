"""Change-data capture from the MySQL/MariaDB binary log (ROW format) with mysql-replication.

A position is {"file": binlog file, "pos": offset after a transaction}: only transaction
boundaries are ever stored, since resuming inside a transaction loses its first rows. Each read
opens a non-blocking dump from a boundary and walks whole transactions, so the same range always
yields the same changes. Column names, signedness and enum/set members come from
information_schema (servers with binlog_row_metadata = NO_LOG/MINIMAL send none of them)."""

from __future__ import annotations

import json
import logging
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial

import pyarrow as pa
import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.constants import FIELD_TYPE, NONE_SOURCE
from pymysqlreplication.event import (
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import (
    DeleteRowsEvent,
    TableMapEvent,
    UpdateRowsEvent,
    WriteRowsEvent,
)
from pyspark.sql.types import StructType

from connectql.connectors.mysql import rowdecode
from connectql.connectors.mysql.client import (
    bounded_connect,
    connect,
    connect_kwargs,
    query,
    reason,
    where,
)
from connectql.connectors.mysql.tables import columns_of
from connectql.connectors.mysql.types import (
    BINARY_TYPES,
    FIXED_BYTES,
    KEY_TEXT_TYPES,
    Column,
    binlog_column,
    binlog_value,
)
from connectql.connectors.relational.changerows import ChangeRows, Changes, collector_paused
from connectql.connectors.relational.changerows import with_snapshot_columns as snapshot_columns
from connectql.connectors.relational.tablereader import Window
from connectql.errors import ChangeLogGone, ConnectQLError, PlanError
from connectql.toolkit.source import DeadLetter

HEARD_S = 15.0  # a followed binlog stream silent this long (no heartbeat) has hung

# it warns on every dump of a server without binlog_row_metadata = FULL; we supply the metadata
logging.getLogger("pymysqlreplication").setLevel(logging.ERROR)

EVENTS = [TableMapEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, XidEvent, QueryEvent]
EVENTS += [MariadbGtidEvent, RotateEvent]
OPS = {WriteRowsEvent: "c", UpdateRowsEvent: "u", DeleteRowsEvent: "d"}
SNAPSHOT_SEQ = 0  # changes count from 1 within their transaction, so snapshot rows sort first
AFTER_SEQ = 99_999_999  # rows read after a transaction's changes sort after them (after())
NO_PRIVILEGE, LOG_GONE = 1227, 1236
# what mysql-replication raises at a row it cannot decode (e.g. a DATE '2024-02-31')
UNDECODABLE = (ValueError, ArithmeticError, LookupError, UnicodeError)


def position(file: str, pos: int) -> dict:
    return {"file": file, "pos": int(pos)}  # fixed key order: Spark compares offsets as text


def order(p: dict) -> tuple[int, int]:
    """A sortable form: binlog files are numbered name.000001, name.000002, ..."""
    return int(p["file"].rsplit(".", 1)[-1]), int(p["pos"])


def after(p: dict) -> dict:
    """Position `p`, marked for rows read after its transaction: they sort after its changes
    and before the next transaction's (a table snapshotted while the log flows)."""
    return {**position(p["file"], p["pos"]), "after": True}


def text_pos(p: dict, seq: int) -> str:
    """__pos: sortable as text; a transaction's changes by its end position, then order in it."""
    index, pos = order(p)
    return f"{index:08d}-{pos:012d}-{seq:08d}"


def bytes_behind(conn, p: dict) -> int:
    """Bytes of binary log the server has written after position `p` (SHOW BINARY LOGS)."""
    index, pos = order(p)
    behind = 0
    for row in query(conn, "SHOW BINARY LOGS"):
        number, size = order(position(_s(row[0]), 0))[0], int(row[1])
        behind += size - pos if number == index else size if number > index else 0
    return max(0, behind)


def current(conn) -> dict:
    """The server's binlog position now (a transaction boundary)."""
    for sql in ("SHOW MASTER STATUS", "SHOW BINARY LOG STATUS"):
        try:
            rows = query(conn, sql)
        except pymysql.err.MySQLError as e:
            if e.args[0] == NO_PRIVILEGE:
                raise PlanError(_privilege_error(e)) from None
            if not isinstance(e, pymysql.err.ProgrammingError):  # a lost connection, a timeout
                raise
            continue  # the server does not know this statement: try the next one
        if rows:
            return position(_s(rows[0][0]), int(rows[0][1]))
        break
    raise PlanError("the server's binary log is off (log_bin = OFF): cdc needs log_bin = ON")


def server_id(connector: str, configured: int | None, reader: int) -> int:
    """The id a binlog client registers with; each connector (and its scanner and reader
    processes, `reader` 0 or 1) needs its own, or the server drops the older dump."""
    base = configured or (zlib.crc32(connector.encode()) % 1_000_000_000 + 1_000_000) * 2
    return base + reader


# ------------------------------------------------------------------ walking the log


@dataclass
class Txn:
    end: dict  # the position after the transaction
    ts_ms: int
    gtid: str | None
    changes: list = field(default_factory=list)  # (table, op, values, before values or None)
    rows: int = 0  # the captured rows: len(changes), or when only counted, their estimate


class RowCounts:
    """The rows of a row event without decoding it (decoding runs at the library's 8-10k rows/s
    and a batch decodes its range anyway): the event's size over the bytes a row took in a
    decoded event of the same table and kind; one event in SAMPLE_EVERY is decoded to keep
    that measure current. Only batch sizes and lag counts rest on it, never a batch's rows."""

    SAMPLE_EVERY = 32

    def __init__(self):
        self.sizes: dict[tuple, float] = {}
        self.seen: dict[tuple, int] = {}

    def rows(self, ev) -> int:
        key = (ev.table, type(ev))
        n = self.seen[key] = self.seen.get(key, 0) + 1
        size = self.sizes.get(key)
        if size is not None and n % self.SAMPLE_EVERY:
            return max(1, round(ev.event_size / size))
        try:
            decoded = rowdecode.rows(ev)
            rows = len(ev.rows if decoded is None else decoded)
        except UNDECODABLE:
            return 1  # a row it cannot decode: the batch's read makes it a dead letter
        if rows:
            self.sizes[key] = ev.event_size / rows
        return rows


class Walker:
    """Walks committed transactions from a boundary, decoding the captured tables' rows
    (`columns`: each captured table's columns; `texts`: the names of those each table's stream
    carries as text, whose dates, a key's, are read raw: read_raw)."""

    def __init__(
        self, cfg, columns: dict[str, list[Column]], reader: int, texts: dict | None = None
    ):
        self.cfg, self.columns, self.reader = cfg, columns, reader
        self.texts: dict[str, set[str]] = texts or {}

    def transactions(self, start: dict, conn=None, until=None, count=None) -> Iterator[Txn]:
        """Whole transactions from `start` to the log's end; with `until`, on as they are
        committed until `until()` is true (asked at least every second). With `count` (a
        RowCounts) their rows are only counted, not decoded."""
        stream = self._open(start, follow=until is not None)
        txn = Txn(start, 0, None)
        try:
            for ev in stream:
                if until is not None and until():
                    return
                if isinstance(ev, MariadbGtidEvent):
                    txn.gtid = ev.gtid
                elif isinstance(ev, TableMapEvent):
                    self._describe(ev, conn)
                elif type(ev) in OPS and count is not None:
                    txn.rows += count.rows(ev)
                elif type(ev) in OPS:
                    decoded = _decoded(ev, stream)
                    txn.changes += decoded
                    txn.rows += len(decoded)
                elif isinstance(ev, XidEvent) or (
                    isinstance(ev, QueryEvent) and _s(ev.query).strip().upper() != "BEGIN"
                ):
                    end = position(stream.log_file, ev.packet.log_pos)
                    yield Txn(end, ev.timestamp * 1000, txn.gtid, txn.changes, txn.rows)
                    txn = Txn(start, 0, None)
        except pymysql.err.MySQLError as e:
            raise _log_error(e, self.cfg, start) from None
        finally:
            stream.close()

    def _open(self, start: dict, follow: bool = False) -> BinLogStreamReader:
        c = self.cfg.connection
        bounded = ("host", "port", "user", "password", "connect_timeout", "read_timeout")
        settings = {k: v for k, v in connect_kwargs(c).items() if k in bounded}
        if follow:  # the server sends a heartbeat a second: a longer silence is a hang
            settings["read_timeout"] = min(settings["read_timeout"] or HEARD_S, HEARD_S)
        return BinLogStreamReader(
            connection_settings=settings,
            pymysql_wrapper=bounded_connect(c),
            server_id=server_id(self.cfg.connector, self.cfg.server_id, self.reader),
            # the long-lived follower is named in SHOW SLAVE HOSTS (registering needs REPLICATION
            # SLAVE: a short check's dump is left unregistered, so its refusal names the privilege)
            report_slave=f"connectql {self.cfg.connector}"[:60] if follow else None,
            log_file=start["file"],
            log_pos=start["pos"],
            resume_stream=True,
            blocking=follow,
            slave_heartbeat=1.0 if follow else None,  # a heartbeat event a second when idle
            only_events=EVENTS + [HeartbeatLogEvent] if follow else EVENTS,
            only_schemas=[self.cfg.schema],
            only_tables=list(self.columns) or None,
            use_column_name_cache=True,
            enable_logging=False,
        )

    def _describe(self, ev: TableMapEvent, conn) -> None:
        """Give the row decoder what a server without full metadata leaves out: names,
        signedness and enum/set members, from information_schema by ordinal position."""
        known = self.columns.get(ev.table)
        if known is None:
            return
        if len(ev.columns) != len(known) and conn is not None:  # the table's schema changed
            known = self.columns[ev.table] = columns_of(conn, self.cfg.schema, ev.table)
        for col, info in zip(ev.columns, known, strict=False):
            if not col.name or col.name.startswith("UNKNOWN_COL"):
                col.name = info.name
            col.unsigned = col.unsigned or info.unsigned
            if info.data_type in BINARY_TYPES or info.data_type in FIXED_BYTES:
                col.character_set_name = "binary"  # undecodable: the decoder keeps the bytes
            elif info.charset and not col.character_set_name:  # minimal metadata: not UTF-8
                col.character_set_name = info.charset
            if info.data_type == "enum" and not col.enum_values:
                col.enum_values = ["", *info.members]
            if info.data_type == "set" and not col.set_values:
                col.set_values = info.members
            if info.data_type in KEY_TEXT_TYPES and info.name in self.texts.get(ev.table, ()):
                read_raw(col)
        for i, col in enumerate(ev.columns[len(known) :]):
            col.name = col.name or f"UNKNOWN_COL{len(known) + i}"


def read_raw(col) -> None:
    """Have mysql-replication give a DATE's or DATETIME's stored value as it is (types.date_text
    prints it), not None as it does when a part is zero: its bytes read as an unsigned number
    of their size (a DATETIME2's, fraction included, as BIT's string of bits)."""
    if col.type in RAW_AS:
        col.type, col.unsigned = RAW_AS[col.type], True
    elif col.type == FIELD_TYPE.DATETIME2:
        col.type, col.bytes = FIELD_TYPE.BIT, 5 + (col.fsp + 1) // 2
        col.bits = 8 * col.bytes


RAW_AS = {FIELD_TYPE.DATE: FIELD_TYPE.INT24, FIELD_TYPE.DATETIME: FIELD_TYPE.LONGLONG}
POISON = "!"  # the op of a row event mysql-replication cannot decode


def _decoded(ev, stream) -> list[tuple]:
    """The event's changes; one that cannot be decoded (e.g. a DATE '2024-02-31' stored
    under ALLOW_INVALID_DATES) is one POISON change with the error, not the whole log's end."""
    try:
        return _rows(ev)
    except UNDECODABLE as e:
        where = {"file": stream.log_file, "pos": ev.packet.log_pos, "event": type(ev).__name__}
        return [(ev.table, POISON, {"error": e, "at": where}, None)]


def _rows(ev) -> list[tuple]:
    op = OPS[type(ev)]
    fast = rowdecode.rows(ev)
    if fast is not None:
        return [(ev.table, op, values, before) for values, before in fast]
    if op == "u":
        return [
            (ev.table, op, _sets(r["after_values"], r["after_none_sources"]),
             _sets(r["before_values"], r["before_none_sources"]))
            for r in ev.rows
        ]  # fmt: skip
    return [(ev.table, op, _sets(r["values"], r["none_sources"]), None) for r in ev.rows]


def _sets(values: dict, none_sources: dict) -> dict:
    """mysql-replication decodes an empty SET as None (noting why): it is the empty set."""
    for name, why in none_sources.items():
        if why == NONE_SOURCE.EMPTY_SET:
            values[name] = frozenset()
    return values


def _s(value) -> str:
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)


# ------------------------------------------------------------------ planning a batch


@dataclass(frozen=True)
class _Seen:
    start: dict  # where the look ahead began
    to: dict  # the end of the last transaction it walked
    window: Window
    rows: int


class Scanner:
    """Looks ahead from `start` for the next batch's end: whole transactions up to about `limit`
    captured rows (and not past `target`). Spark asks many times from the same start, or from
    the end it was given last: the look ahead goes on from where the last one stopped instead
    of decoding the log from `start` again."""

    def __init__(self, walker: Walker):
        self.walker = walker
        self.seen: _Seen | None = None
        self.counts = RowCounts()

    def scan(self, start: dict, limit: int, target: dict | None, conn) -> Window:
        relevant, last, rows, begin = None, None, 0, start
        seen = self.seen
        if seen and seen.start == start:
            if seen.window.full:
                return seen.window
            relevant, last, rows, begin = *_ends(seen.window), seen.rows, seen.to
        elif seen and start in _ends(seen.window):  # nothing captured after it up to seen.to
            last, begin = seen.window.last_commit, seen.to
            last = last if order(last) > order(start) else None
        to, full = begin, False
        for txn in self.walker.transactions(begin, conn, count=self.counts):
            if target is not None and order(txn.end) > order(target):
                break
            to = last = txn.end
            if txn.rows:
                relevant, rows = txn.end, rows + txn.rows
                if rows >= limit:
                    full = True
                    break
        self.seen = _Seen(start, to, Window(relevant, last, full), rows)
        return self.seen.window


class Tailer:
    """Follows the log from `origin` in a thread of the source process, noting the end and the
    captured rows of each transaction, so that looking ahead for the next batch is a lookup
    instead of a new dump (two connections and a walk, ~150 ms, every poll). It stays at most
    a few batches ahead of the batches asked for."""

    AHEAD = 4  # batches of rows noted beyond the last start asked about

    def __init__(self, walker: Walker, origin: dict, limit: int):
        self.walker, self.origin, self.limit = walker, origin, limit
        self.noted: list[tuple[dict, int]] = []  # (end, captured rows) of relevant transactions
        self.rows = 0  # the captured rows in `noted`
        self.last: dict | None = None  # the end of the last transaction seen
        self.error: Exception | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="binlog-tailer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with connect(self.walker.cfg.connection) as conn:
                follow = self.walker.transactions(
                    self.origin, conn, lambda: self._closed, RowCounts()
                )
                for txn in follow:
                    with self._lock:
                        self.last = txn.end
                        if txn.rows:
                            self.noted.append((txn.end, txn.rows))
                            self.rows += txn.rows
                    while self.rows > self.AHEAD * self.limit and not self._closed:
                        time.sleep(0.05)
        except Exception as e:
            if not self._closed:
                self.error = e

    def covers(self, start: dict) -> bool:
        return not self._closed and order(self.origin) <= order(start)

    def window(self, start: dict) -> Window:
        """The next batch from `start`: whole transactions up to about `limit` captured rows."""
        if self.error is not None:
            raise self.error
        with self._lock:
            self.noted = [(end, n) for end, n in self.noted if order(end) > order(start)]
            self.rows = sum(n for _end, n in self.noted)
            relevant, rows, full = None, 0, False
            for end, n in self.noted:
                relevant, rows = end, rows + n
                if rows >= self.limit:
                    full = True
                    break
            last = self.last if self.last and order(self.last) > order(start) else None
        return Window(relevant, relevant if full else last, full)

    def close(self) -> None:
        """Stop following (within a heartbeat): a dump left open under this server id would
        take turns with the next one, each reconnecting when the server drops it."""
        self._closed = True
        self._thread.join(timeout=5)


def _ends(w: Window) -> tuple:
    return w.last_relevant, w.last_commit


# ------------------------------------------------------------------ reading a batch


def read_changes(
    walker: Walker, part, schemas: dict[str, StructType], keys: dict[str, list], conn,
    tolerant: bool = False, fail=None,
) -> Iterator[tuple[str, pa.RecordBatch] | DeadLetter]:  # fmt: skip
    """(table, change rows) of the changes of the tables of `schemas` in the transactions
    ending in (part.log_from, part.log_to]; `schemas` and `keys` by table. A change that
    cannot be read fails the read with `fail(table, message, hint)` (default: a
    ConnectQLError), naming its table and position, or when `tolerant` is one of the dead
    letters (toolkit DeadLetters) yielded last."""
    cfg = walker.cfg
    changes = Changes(
        {
            t: ChangeRows(
                schemas[t], keys[t], f"{cfg.schema}.{t}", cfg.schema_change, _value, _column
            )
            for t in schemas
        },
        tolerant,
        fail,
    )
    with collector_paused():
        _collect(changes, walker, part, schemas, keys, conn)
    yield from changes.batches()


def _collect(changes: Changes, walker: Walker, part, schemas, keys, conn) -> None:
    """The changes of the transactions of `part`, into `changes`."""
    cfg = walker.cfg
    cfgs = {t: cfg.for_table(t) for t in schemas}
    end = order(part.log_to)
    for txn in walker.transactions(part.log_from, conn):
        if order(txn.end) > end:
            break
        types = {t: {c.name: c.column_type for c in walker.columns[t]} for t in schemas}
        sources: dict[str, str] = {}  # by table: the same for each change of the transaction
        for seq, (table, op, values, before) in enumerate(txn.changes, start=1):
            if table not in changes.rows:  # a table stopped (TableFailed)
                continue
            meta = {"__ts_ms": txn.ts_ms, "__pos": text_pos(txn.end, seq)}
            if table not in sources:
                sources[table] = source(cfgs[table], False, **txn.end, gtid=txn.gtid)
            meta["__source"] = sources[table]
            poison = partial(_poison, cfg, table, op, values, txn, meta)
            rows = changes.rows[table]
            if op == POISON:  # the walker could not decode it
                changes.unreadable(poison(values["error"]))
            elif isinstance(values, rowdecode.Image) and not rows.moved(op, values, before):
                rows.add_values(op, values.names, values, types[table], txn.ts_ms,
                                meta["__pos"], meta["__source"], poison)  # fmt: skip
                # our decoder's values, in the table's order: no dict per row
            else:  # mysql-replication's dicts, or a key that changed (a delete and an insert)
                values, before = _as_dict(values), _as_dict(before)
                changes.add(table, op, values, before, meta, types[table], poison)
        if order(txn.end) == end:
            break


def _as_dict(values):
    return dict(values.items()) if isinstance(values, rowdecode.Image) else values


def _poison(
    cfg, table: str, op: str, values: dict, txn: Txn, meta: dict, e: Exception, _row=None
) -> dict:
    """A change that cannot be read, as a dead-letter record (ChangeRows gives its `_row`
    too: the same values)."""
    at = values["at"] if op == POISON else {**txn.end, "op": op}
    raw = at if op == POISON else {k: str(v)[:1000] for k, v in values.items()}
    message = (
        f"table {cfg.schema}.{table}: the change at binlog {at['file']}:{at['pos']} cannot be"
        f" read: {type(e).__name__}: {str(e)[:300]}"
    )
    return {
        "table": table, "ts_ms": meta["__ts_ms"], "pos": meta["__pos"],
        "offset": {"binlog": txn.end, "table": table}, "error_class": type(e).__name__,
        "error_message": message, "raw_record": raw,
    }  # fmt: skip


def _value(value, f, types: dict):
    return binlog_value(value, Column(f.name, types.get(f.name, "")), f.dataType)


def _column(f, column_type: str, values: list):
    return binlog_column(values, Column(f.name, column_type), f.dataType)


def source(cfg, snapshot: bool, **where) -> str:
    """__source: the database coordinates of a row (snapshot or change), as JSON."""
    body = {"db": cfg.schema, "table": cfg.table, "snapshot": snapshot, **where}
    return json.dumps(body, sort_keys=True)


def with_snapshot_columns(batch: pa.RecordBatch, cfg, schema: StructType, pos: dict):
    """Snapshot rows, positioned before every change after the snapshot began (after those of
    its position's transaction when read after it: after())."""
    seq = AFTER_SEQ if pos.get("after") else SNAPSHOT_SEQ
    at = position(pos["file"], pos["pos"])
    return snapshot_columns(batch, schema, text_pos(pos, seq), source(cfg, True, **at))


# ------------------------------------------------------------------ errors


def _privilege_error(e) -> str:
    text = _s(e.args[1]) if len(e.args) > 1 else str(e)
    if "REPLICATION SLAVE" in text.upper():
        return (
            "the user may not read the binary log: it needs the REPLICATION SLAVE privilege"
            " (GRANT REPLICATION SLAVE ON *.* TO ...)"
        )
    return (
        "the user may not see binary log positions: it needs the REPLICATION CLIENT (MariaDB:"
        " BINLOG MONITOR) privilege (GRANT REPLICATION CLIENT ON *.* TO ...)"
    )


def _log_error(e, cfg, start: dict) -> ConnectQLError:
    code = e.args[0] if e.args else None
    if code == NO_PRIVILEGE:
        return PlanError(f"{where(cfg.connection)}: {_privilege_error(e)}")
    if code == LOG_GONE:
        return ChangeLogGone(
            f"binlog file {start['file']} (position {start['pos']}) is no longer on the server"
            f" (purged): RESET CONNECTOR {cfg.connector} OFFSETS starts over with a new snapshot"
        )
    return ConnectQLError(
        f"reading the binary log of {where(cfg.connection)} failed: {reason(e, cfg.connection)}"
    )


def check_replication(cfg, where_: str) -> None:
    """At CREATE: the user may see positions and read the log (a dump to the end, no rows)."""
    with connect(cfg.connection) as conn:
        try:
            start = current(conn)
        except PlanError as e:
            raise PlanError(f"{where_}: {e}") from None
    walker = Walker(cfg, {}, reader=1)
    try:
        for _txn in walker.transactions(start):
            pass
    except ConnectQLError as e:
        raise PlanError(f"{where_}: {str(e).split(': ', 1)[-1]}") from None
