"""Change-data capture from a PostgreSQL logical replication slot (test_decoding plugin, shipped
with PostgreSQL): slot management, finding the next batch's end LSN, and decoding a range of
committed transactions into change rows. The slot only moves forward to offsets Spark has
finished with, so a crash replays changes rather than losing them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.types import ArrayType, StringType, StructType

from connectql.connectors.dbsink import META_COLUMNS
from connectql.connectors.postgres.pgdecode import (
    UNCHANGED_TOAST,
    Begin,
    Change,
    Commit,
    parse,
    to_python,
)
from connectql.connectors.postgres.types import arrow_schema
from connectql.connectors.tablereader import Window
from connectql.errors import ConnectQLError, SchemaChanged, SchemaEvolved

PLUGIN_NAME = "test_decoding"
DECODE_OPTIONS = "'include-xids', '1', 'include-timestamp', '1', 'skip-empty-xacts', '1'"
SNAPSHOT_SEQ = 0  # changes count from 1 within their transaction, so snapshot rows sort first


def lsn_int(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def lsn_text(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def position(commit_lsn: int, seq: int) -> str:
    """__pos: sortable as text; a transaction's changes by commit LSN, then order within it."""
    return f"{commit_lsn:016X}-{seq:010d}"


# ------------------------------------------------------------------ the slot


def ensure_slot(conn, slot: str) -> int:
    """Create the slot if absent; the LSN from which it will decode (its confirmed position)."""

    def found():
        return conn.execute(
            "SELECT confirmed_flush_lsn::text, plugin FROM pg_replication_slots"
            " WHERE slot_name = %s",
            (slot,),
        ).fetchone()

    row = found()
    if row is None:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, %s)", (slot, PLUGIN_NAME))
        row = found()
    if row[1] != PLUGIN_NAME:
        raise ConnectQLError(
            f"replication slot {slot} uses plugin {row[1]}; connectql needs {PLUGIN_NAME}"
            " (choose another slot.name)"
        )
    return lsn_int(row[0])


def drop_slot(conn, slot: str) -> bool:
    found = conn.execute(
        "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    ).fetchone()
    if found is None:
        return False
    if found[0] is not None:
        conn.execute("SELECT pg_terminate_backend(%s)", (found[0],))
        time.sleep(0.2)
    conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
    return True


def current_lsn(conn) -> int:
    return lsn_int(conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])


def advance(conn, slot: str, lsn: int) -> None:
    """Let the server free WAL before `lsn`: every change up to it has been processed."""
    row = conn.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s", (slot,)
    ).fetchone()
    if row is not None and lsn_int(row[0]) < lsn:
        conn.execute("SELECT pg_replication_slot_advance(%s, %s::pg_lsn)", (slot, lsn_text(lsn)))


# ------------------------------------------------------------------ planning a batch


def scan(conn, slot: str, limit: int, captured: set[str], target: int | None) -> Window:
    """Look ahead (without consuming) for the next batch's end."""
    upto = lsn_text(target + 1) if target is not None else None
    rows = conn.execute(
        "SELECT lsn::text, data FROM pg_logical_slot_peek_changes"
        f"(%s, %s::pg_lsn, %s, {DECODE_OPTIONS})",
        (slot, upto, limit),
    ).fetchall()
    relevant, last, touched = None, None, False
    for lsn, data in rows:
        item = parse(data)
        if isinstance(item, Change):
            touched = touched or item.table in captured
        elif isinstance(item, Commit):
            last = lsn_int(lsn)
            if target is not None and last > target:
                break
            if touched:
                relevant = last
            touched = False
    return Window(relevant, last, len(rows) >= limit)


# ------------------------------------------------------------------ reading a batch


def read_changes(conn, cfg, schema: StructType, key, part) -> Iterator[pa.RecordBatch]:
    """The captured changes of transactions committed in (part.lsn_from, part.lsn_to], in
    commit order."""
    lsn_from, lsn_to = part.log_from, part.log_to
    rows = conn.execute(
        "SELECT lsn::text, data FROM pg_logical_slot_peek_changes"
        f"(%s, %s::pg_lsn, NULL, {DECODE_OPTIONS})",
        (cfg.slot, lsn_text(lsn_to + 1)),
    )
    table = cfg.qualified_table
    builder = _Rows(cfg, schema, tuple(key))
    pending: list[Change] = []
    for lsn, data in rows:
        item = parse(data)
        if isinstance(item, Begin):
            pending = []
        elif isinstance(item, Change):
            pending.append(item)
        elif isinstance(item, Commit):
            commit = lsn_int(lsn)
            if lsn_from < commit <= lsn_to:
                for seq, change in enumerate(pending, start=1):
                    if change.table == table:
                        builder.add(change, commit, seq, item)
            pending = []
    if builder.count:
        yield builder.batch()


class _Rows:
    """Collects change rows column by column, converted to the stream's types."""

    def __init__(self, cfg, schema: StructType, key: tuple[str, ...]):
        self.cfg, self.schema, self.key = cfg, schema, key
        self.arrow = arrow_schema(schema)
        self.data = [f for f in schema.fields if f.name not in META_COLUMNS]
        self.names = {f.name for f in self.data}
        self.columns: dict[str, list] = {f.name: [] for f in schema.fields}
        self.count = 0

    def add(self, change: Change, commit: int, seq: int, txn: Commit) -> None:
        self._check_columns(change)
        key = self.key
        if change.op == "u" and change.old_key and key:
            old = [change.old_key.get(k) for k in key]
            if old != [change.values.get(k) for k in key]:  # the key changed: delete the old row
                self._row("d", change.old_key, change, commit, seq, txn)
                self._row("c", change.values, change, commit, seq, txn)
                return
        self._row(change.op, change.values, change, commit, seq, txn)

    def _check_columns(self, change: Change) -> None:
        added = [c for c in change.values if c not in self.names]
        new = f"table {change.table} has new column(s) " + ", ".join(
            f"{c} ({change.types.get(c)})" for c in added
        )
        if added and self.cfg.schema_change == "evolve":
            raise SchemaEvolved(new)
        if added and self.cfg.schema_change == "fail":
            raise SchemaChanged(f"{new} that stream does not have (schema.change = 'fail')")
        if change.op == "c" and self.cfg.schema_change == "fail":
            dropped = [c for c in self.names if c not in change.values]
            if dropped:
                raise SchemaChanged(
                    f"column(s) {', '.join(dropped)} of table {change.table} were dropped"
                    " (schema.change = 'fail')"
                )

    def _row(self, op, values, change: Change, commit, seq, txn: Commit) -> None:
        for f in self.data:
            self.columns[f.name].append(_value(values.get(f.name), change, f))
        meta = {"__op": op, "__ts_ms": txn.ts_ms, "__pos": position(commit, seq)}
        meta["__source"] = _source(self.cfg, False, commit_lsn=lsn_text(commit), xid=txn.xid)
        for name, value in meta.items():
            if name in self.columns:
                self.columns[name].append(value)
        self.count += 1

    def batch(self) -> pa.RecordBatch:
        arrays = [pa.array(self.columns[f.name], f.type) for f in self.arrow]
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow)


def _source(cfg, snapshot: bool, **where) -> str:
    """__source: the database coordinates of a row (snapshot or change), as JSON."""
    body = {"db": cfg.connection.get("database"), "schema": cfg.schema, "table": cfg.table}
    return json.dumps({**body, "snapshot": snapshot, **where}, sort_keys=True)


def _value(text, change: Change, f):
    if text is UNCHANGED_TOAST:  # unchanged large value: only REPLICA IDENTITY FULL sends it
        text = (change.old_key or {}).get(f.name)
        if text is UNCHANGED_TOAST:
            text = None
    if text is None:
        return None
    if isinstance(f.dataType, StringType):
        return text
    value = to_python(text, change.types.get(f.name, "text"))
    if isinstance(f.dataType, ArrayType) and isinstance(f.dataType.elementType, StringType):
        return [None if v is None else str(v) for v in value]
    return value


def with_snapshot_columns(
    batch: pa.RecordBatch, cfg, schema: StructType, lsn: int
) -> pa.RecordBatch:
    """Snapshot rows (`__op = 'r'`) positioned before every change after the slot's start."""
    n = batch.num_rows
    source = _source(cfg, True, lsn=lsn_text(lsn))
    meta = {
        "__op": pa.array(["r"] * n, pa.string()),
        "__ts_ms": pa.array([time.time_ns() // 1_000_000] * n, pa.int64()),
        "__pos": pa.array([position(lsn, SNAPSHOT_SEQ)] * n, pa.string()),
        "__source": pa.array([source] * n, pa.string()),
    }
    target = arrow_schema(schema)
    arrays = [meta[f.name] if f.name in meta else batch.column(f.name) for f in target]
    return pa.RecordBatch.from_arrays(arrays, schema=target)
