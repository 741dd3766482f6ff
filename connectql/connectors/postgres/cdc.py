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

from connectql.connectors.changerows import ChangeRows
from connectql.connectors.changerows import with_snapshot_columns as snapshot_columns
from connectql.connectors.postgres.pgdecode import (
    UNCHANGED_TOAST,
    Begin,
    Change,
    Commit,
    parse,
    to_python,
)
from connectql.connectors.tablereader import Window
from connectql.errors import ConnectQLError

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


def decoded_name(schema: str, table: str) -> str:
    """A table as logical decoding names it: schema.table."""
    return f"{schema}.{table}"


def read_changes(
    conn, cfg, schemas: dict[str, StructType], keys: dict[str, list], part
) -> Iterator[tuple[str, pa.RecordBatch]]:
    """(table, change rows) of the captured tables' changes in transactions committed in
    (part.lsn_from, part.lsn_to], in commit order; `schemas` and `keys` by table."""
    lsn_from, lsn_to = part.log_from, part.log_to
    rows = conn.execute(
        "SELECT lsn::text, data FROM pg_logical_slot_peek_changes"
        f"(%s, %s::pg_lsn, NULL, {DECODE_OPTIONS})",
        (cfg.slot, lsn_text(lsn_to + 1)),
    )
    builders = {
        decoded_name(cfg.schema, t): (
            cfg.for_table(t),
            ChangeRows(schemas[t], keys[t], decoded_name(cfg.schema, t), cfg.schema_change, _value),
        )
        for t in schemas
    }
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
                    if change.table in builders:
                        one, builder = builders[change.table]
                        meta = {"__ts_ms": item.ts_ms, "__pos": position(commit, seq)}
                        meta["__source"] = _source(
                            one, False, commit_lsn=lsn_text(commit), xid=item.xid
                        )
                        values, before = _untoasted(change)
                        builder.add(change.op, values, before, meta, change.types)
            pending = []
    for one, builder in builders.values():
        if builder.count:
            yield one.table, builder.batch()


def _source(cfg, snapshot: bool, **where) -> str:
    """__source: the database coordinates of a row (snapshot or change), as JSON."""
    body = {"db": cfg.connection.get("database"), "schema": cfg.schema, "table": cfg.table}
    return json.dumps({**body, "snapshot": snapshot, **where}, sort_keys=True)


def _untoasted(change: Change) -> tuple[dict, dict | None]:
    """The new values and the old key (or row), an unchanged large value taken from the old row
    where it is there (only REPLICA IDENTITY FULL sends it), else NULL."""
    old = change.old_key or {}

    def fill(values: dict) -> dict:
        return {k: _known(old.get(k) if v is UNCHANGED_TOAST else v) for k, v in values.items()}

    return fill(change.values), (fill(old) if change.old_key else None)


def _known(value):
    return None if value is UNCHANGED_TOAST else value


def _value(text, f, types: dict):
    if text is None:
        return None
    if isinstance(f.dataType, StringType):
        return text
    value = to_python(text, types.get(f.name, "text"))
    if isinstance(f.dataType, ArrayType) and isinstance(f.dataType.elementType, StringType):
        return [None if v is None else str(v) for v in value]
    return value


def with_snapshot_columns(
    batch: pa.RecordBatch, cfg, schema: StructType, lsn: int
) -> pa.RecordBatch:
    """Snapshot rows, positioned before every change after the slot's start."""
    source = _source(cfg, True, lsn=lsn_text(lsn))
    return snapshot_columns(batch, schema, position(lsn, SNAPSHOT_SEQ), source)
