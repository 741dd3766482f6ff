"""Change-data capture from a PostgreSQL logical replication slot with the built-in `pgoutput`
plugin and a publication of the captured tables (both owned by the connector): slot
management, finding the next batch's end LSN, and decoding a range of committed transactions
into change rows. The slot only moves forward to offsets Spark has finished with, so a crash
replays changes rather than losing them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from functools import partial

import numpy as np
import psycopg
import pyarrow as pa
from psycopg import sql
from pyspark.sql.types import StructType

from connectql.connectors.postgres import pgcolumns
from connectql.connectors.postgres.client import qualified
from connectql.connectors.postgres.pgoutput import (
    CHANGES,
    UNCHANGED_TOAST,
    Change,
    Commit,
    Decoder,
    relation_oid,
    texts,
)  # fmt: skip
from connectql.connectors.postgres.pgtext import spark_column, spark_value
from connectql.connectors.relational.changerows import ChangeRows, Changes, collector_paused
from connectql.connectors.relational.changerows import with_snapshot_columns as snapshot_columns
from connectql.connectors.relational.tablereader import Window
from connectql.errors import ConnectQLError, PlanError
from connectql.toolkit.source import DeadLetter

PLUGIN_NAME = "pgoutput"
SNAPSHOT_SEQ = 0  # changes count from 1 within their transaction, so snapshot rows sort first


def lsn_int(text: str) -> int:
    hi, lo = text.split("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def lsn_text(value: int) -> str:
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def position(commit_lsn: int, seq: int) -> str:
    """__pos: sortable as text; a transaction's changes by commit LSN, then order within it."""
    return f"{commit_lsn:016X}-{_seq_text(seq)}"


_SEQ_TEXTS: list[str] = []  # seq -> its 10 digits, made once (formatting each row's costs more)


def _seq_text(seq: int) -> str:
    if seq >= len(_SEQ_TEXTS):
        if seq >= 1 << 20:
            return f"{seq:010d}"
        _SEQ_TEXTS.extend(f"{i:010d}" for i in range(len(_SEQ_TEXTS), 2 * seq + 1024))
    return _SEQ_TEXTS[seq]


# ------------------------------------------------------------------ the slot


def ensure_slot(conn, slot: str, schema: str, tables: list[str], keyless: str, where: str) -> int:
    """Create the publications (named as the slot) and then the slot if absent (a publication
    must be older than the changes it decodes); the LSN from which the slot will decode."""

    def found():
        return conn.execute(
            "SELECT confirmed_flush_lsn::text, plugin FROM pg_replication_slots"
            " WHERE slot_name = %s",
            (slot,),
        ).fetchone()

    row = found()
    ensure_publications(conn, slot, schema, tables, keyless, where)
    if row is None:
        conn.execute("SELECT pg_create_logical_replication_slot(%s, %s)", (slot, PLUGIN_NAME))
        row = found()
    if row[1] != PLUGIN_NAME:
        raise ConnectQLError(
            f"replication slot {slot} uses plugin {row[1]}; connectql needs {PLUGIN_NAME}"
            " (RESET CONNECTOR ... OFFSETS to start over with a new slot, or choose another"
            " slot.name)"
        )
    return lsn_int(row[0])


KEYLESS = ("refuse", "inserts")  # the `keyless` option's values


def inserts_publication(slot: str) -> str:
    """The publication of the tables captured with keyless = 'inserts' (inserts alone)."""
    return f"{slot[:55]}_inserts"


def unidentified(conn, schema: str, tables: list[str]) -> list[str]:
    """The tables PostgreSQL cannot identify a row of (no primary key and REPLICA IDENTITY
    DEFAULT, or REPLICA IDENTITY NOTHING): in a publication of updates and deletes, their
    UPDATE and DELETE are refused."""
    if not tables:
        return []
    rows = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relname = ANY(%s) AND (c.relreplident = 'n' OR"
        " (c.relreplident = 'd' AND NOT EXISTS (SELECT 1 FROM pg_index i"
        " WHERE i.indrelid = c.oid AND i.indisprimary)))",
        (schema, list(tables)),
    ).fetchall()
    return sorted(r[0] for r in rows)


def keyless_refused(where: str, schema: str, tables: list[str]) -> str:
    names = ", ".join(f"{schema}.{t}" for t in tables)
    return (
        f"{where}: {names} {'has' if len(tables) == 1 else 'have'} no primary key or other"
        " replica identity, and PostgreSQL refuses UPDATE and DELETE of a table published"
        " for change capture without one, so capturing it would break the application's"
        " writes. Either give it one (ALTER TABLE ... REPLICA IDENTITY FULL, or a primary"
        " key), or capture only its inserts with keyless = 'inserts'"
    )


def ensure_publications(
    conn, slot: str, schema: str, tables: list[str], keyless: str, where: str
) -> None:
    """The connector's publications: every change of the tables PostgreSQL can identify a row
    of, and with keyless = 'inserts' the inserts alone of the others. Never one that makes
    the tables' own UPDATE or DELETE fail: with keyless = 'refuse' such a table is taken out
    of the publication (one made before, or a table that lost its key) and refused."""
    without = unidentified(conn, schema, tables)
    ensure_publication(conn, slot, schema, [t for t in tables if t not in without])
    if keyless == "inserts" and without:
        ensure_publication(conn, inserts_publication(slot), schema, without, "insert")
    else:
        drop_publication(conn, inserts_publication(slot))
    if without and keyless != "inserts":
        raise PlanError(keyless_refused(where, schema, without))


def publications(conn, slot: str) -> str:
    """The publication_names a decoding of the slot asks for: the slot's, and the inserts
    publication where there is one."""
    extra = inserts_publication(slot)
    found = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (extra,)).fetchone()
    return f"{slot},{extra}" if found else slot


def ensure_publication(
    conn, name: str, schema: str, tables: list[str], publish: str | None = None
) -> None:
    """The publication of the captured tables (made again when it lists other tables); none
    when there are none."""
    if not tables:
        drop_publication(conn, name)
        return
    have = {
        r[0]
        for r in conn.execute(
            "SELECT tablename FROM pg_publication_tables WHERE pubname = %s AND schemaname = %s",
            (name, schema),
        ).fetchall()
    }
    exists = conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)).fetchone()
    if exists and have == set(tables):
        return
    listed = sql.SQL(", ").join(qualified(schema, t) for t in tables)
    if exists:
        conn.execute(
            sql.SQL("ALTER PUBLICATION {} SET TABLE {}").format(sql.Identifier(name), listed)
        )
    else:
        only = (
            sql.SQL(" WITH (publish = {})").format(sql.Literal(publish)) if publish else sql.SQL("")
        )
        conn.execute(
            sql.SQL("CREATE PUBLICATION {} FOR TABLE {}{}").format(
                sql.Identifier(name), listed, only
            )
        )


def drop_publication(conn, name: str) -> bool:
    if conn.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (name,)).fetchone() is None:
        return False
    conn.execute(sql.SQL("DROP PUBLICATION {}").format(sql.Identifier(name)))
    return True


def drop_slot(conn, slot: str, attempts: int = 20) -> bool:
    """Drop the slot, ending the connection that holds it (a replication connection may come
    back before the drop: then again)."""
    for _ in range(attempts):
        found = conn.execute(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
        if found is None:
            return False
        if found[0] is not None:
            conn.execute("SELECT pg_terminate_backend(%s, 5000)", (found[0],))
        try:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            return True
        except psycopg.errors.ObjectInUse:
            time.sleep(0.1)
    raise ConnectQLError(f"replication slot {slot} stays in use; it was not dropped")


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


def peek(conn, slot: str, upto: int | None, limit: int | None) -> Iterator[tuple[int, object]]:
    """(LSN, decoded message) of the slot's changes up to LSN `upto` (inclusive), without
    consuming them."""
    decoder = Decoder(type_names(conn))
    for lsn, data in peek_messages(conn, slot, upto, limit):
        yield lsn, decoder.feed(data)


def peek_messages(conn, slot: str, upto: int | None, limit: int | None) -> list[tuple[int, bytes]]:
    """(LSN, pgoutput message) of the slot's changes up to LSN `upto` (inclusive), without
    consuming them."""
    rows = conn.execute(
        "SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes"
        "(%s, %s::pg_lsn, %s, 'proto_version', '1', 'publication_names', %s)",
        (slot, None if upto is None else lsn_text(upto + 1), limit, publications(conn, slot)),
    ).fetchall()
    return [(lsn_int(lsn), bytes(data)) for lsn, data in rows]


def type_names(conn):
    """(type oid, typmod) -> the type as format_type() prints it, asked once each."""
    cache: dict[tuple[int, int], str] = {}

    def name(oid: int, typmod: int) -> str:
        if (oid, typmod) not in cache:
            cache[oid, typmod] = conn.execute(  # a domain: its base type
                "SELECT format_type(CASE WHEN typtype = 'd' THEN typbasetype ELSE oid END,"
                " CASE WHEN typtype = 'd' THEN typtypmod ELSE %s END) FROM pg_type WHERE oid = %s",
                (None if typmod < 0 else typmod, oid),
            ).fetchone()[0]
        return cache[oid, typmod]

    return name


def scan(conn, slot: str, limit: int, captured: set[str], target: int | None) -> Window:
    """Look ahead (without consuming) for the next batch's end."""
    relevant, last, touched, seen = None, None, False, 0
    for lsn, item in peek(conn, slot, target, limit):
        seen += 1
        if isinstance(item, Change):
            touched = touched or item.table in captured
        elif isinstance(item, Commit):
            last = lsn
            if target is not None and last > target:
                break
            if touched:
                relevant = last
            touched = False
    return Window(relevant, last, seen >= limit)


# ------------------------------------------------------------------ reading a batch


def decoded_name(schema: str, table: str) -> str:
    """A table as logical decoding names it: schema.table."""
    return f"{schema}.{table}"


def transactions(conn, slot: str, lsn_from: int, lsn_to: int) -> Iterator[tuple]:
    """(commit LSN, ts_ms, xid, [pgoutput message]) of the transactions committed in
    (lsn_from, lsn_to], peeked from the slot over SQL: each transaction's Relation and change
    messages, as change_batches takes them."""
    frame = Decoder(lambda oid, typmod: "")  # Begin and Commit only
    pending: list[bytes] = []
    xid = 0
    for commit, data in peek_messages(conn, slot, lsn_to, None):
        kind = data[:1]
        if kind == b"B":
            pending, xid = [], frame.feed(data).xid
        elif kind == b"C":
            if lsn_from < commit <= lsn_to:
                yield commit, frame.feed(data).ts_ms, xid, pending
            pending = []
        elif kind in CHANGES or kind == b"R":
            pending.append(data)


_NEW, _KEY, _OLD = ord("N"), ord("K"), ord("O")


def change_batches(
    cfg, schemas: dict[str, StructType], keys: dict[str, list], txns, decoder: Decoder,
    seen=None, tolerant=False, fail=None,
) -> Iterator[tuple[str, pa.RecordBatch] | DeadLetter]:  # fmt: skip
    """(table, change rows) of the captured tables' changes in `txns` (commit LSN, ts_ms, xid,
    [pgoutput message]: Relation messages go to `decoder`, the rest are decoded into the
    rows; or [Change], as an earlier connectql spooled them), in commit order; `schemas` and
    `keys` by table. `seen(table, xid)`: whether the table's snapshot already holds that
    transaction's changes (they are left out). A change that cannot be read fails, naming its
    table and position, or when `tolerant` is one of the dead letters (toolkit DeadLetters)
    yielded last."""
    ones = {decoded_name(cfg.schema, t): cfg.for_table(t) for t in schemas}
    changes = Changes(
        {
            one.table: ChangeRows(
                schemas[one.table], keys[one.table], name, cfg.schema_change, _value, _column
            )
            for name, one in ones.items()
        },
        tolerant,
        fail,
    )
    with collector_paused():
        made = _collect_columns(changes, ones, txns, decoder, seen)
    yield from changes.batches(made)


def _collect_columns(changes: Changes, ones: dict, txns, decoder: Decoder, seen) -> dict:
    """The changes of `txns` of the tables of `ones` (by decoded name): the plain ones decoded
    column by column (pgcolumns), as change rows by table (returned); the others, and every
    change of a table whose columns cannot be converted whole, into `changes` as _collect
    takes them."""
    txns = txns if isinstance(txns, list) else list(txns)
    if not any(t[3] for t in txns):
        return {}
    if any(isinstance(m, Change) for t in txns for m in t[3][:1]):  # spooled decoded, long ago
        _collect(changes, ones, txns, decoder, seen)
        return {}
    prior = dict(decoder.relations)
    batch = pgcolumns.Batch(txns, decoder)
    made, slow = {}, []
    for name, table in batch.tables(ones, seen).items():
        slow.extend(table.slow)
        if not table.groups:
            continue
        one = ones[name]
        sources = [_source(one, False, commit_lsn=lsn_text(c), xid=x) for c, _t, x, _m in txns]
        try:
            made[one.table] = pgcolumns.table_batch(
                batch, changes.rows[one.table], table.groups, sources
            )
        except pgcolumns.Unfit:
            slow.extend(g.index for g in table.groups)
    if slow:  # in log order, with every Relation message (the decoder follows them again)
        decoder.relations = prior
        picked = np.union1d(np.concatenate(slow), batch.relations).tolist()
        txn, seq, relations = batch.txn.tolist(), batch.seq.tolist(), batch.relation_set
        items = ((txn[i], None if i in relations else seq[i], batch.messages[i]) for i in picked)
        _collect_messages(changes, ones, txns, decoder, seen, items)
    return made


def _collect(changes: Changes, ones: dict, txns, decoder: Decoder, seen) -> None:
    """The changes of `txns` of the tables of `ones` (by decoded name), into `changes`."""
    _collect_messages(changes, ones, txns, decoder, seen, _numbered(txns))


def _numbered(txns):
    """(transaction index, sequence number, message) of each message of `txns`: a Relation
    message's number is None; the changes count from 1 within their transaction."""
    for t, (_commit, _ts, _xid, messages) in enumerate(txns):
        seq = 0
        for message in messages:
            if not isinstance(message, Change) and message[:1] == b"R":
                yield t, None, message
            else:
                seq += 1
                yield t, seq, message


def _collect_messages(changes: Changes, ones: dict, txns, decoder: Decoder, seen, items) -> None:
    """The changes `items` ((transaction index in `txns`, sequence number, message) in log
    order; Relation messages, numbered None, go to the decoder) into `changes`."""
    tables: dict[str, tuple] = {}  # by table: (rows, __source, poison) for this transaction
    at = None
    for t, seq, message in items:
        if seq is None:
            decoder.feed(message)
            continue
        if t != at:
            tables, at = {}, t
        commit, ts_ms, xid, _messages = txns[t]
        change = message if isinstance(message, Change) else None
        rel = None if change else decoder.relation(relation_oid(message))
        name = change.table if change else rel.table
        one = ones.get(name)
        if one is None or (seen and seen(name, xid)):
            continue
        if name not in tables:
            where = {"commit_lsn": lsn_text(commit), "xid": xid}
            rows = changes.rows[one.table]
            tables[name] = (rows, _source(one, False, **where), partial(_poison, one, commit))
        rows, source, poison = tables[name]
        pos = position(commit, seq)
        if change is None and _plain(message, rel, rows, ts_ms, pos, source, poison):
            continue
        change = change or decoder.feed(message)
        values, before, unchanged = _untoasted(change)
        meta = {"__ts_ms": ts_ms, "__pos": pos, "__source": source, "__unchanged": unchanged}
        rows.add(change.op, values, before, meta, change.types, poison)


def _plain(message: bytes, rel, rows: ChangeRows, *meta) -> bool:
    """A change without an old row to compare or unchanged values (an insert, an update that
    kept its key, a delete) goes to `rows` straight from the message; False for the others."""
    kind, tag = message[:1], message[5]
    if not (tag == _NEW or (kind == b"D" and tag in (_KEY, _OLD))):
        return False
    values, _end, unchanged = texts(message, 6)
    if unchanged or len(values) != len(rel.columns):
        return False
    op = "c" if kind == b"I" else "u" if kind == b"U" else "d"
    rows.add_values(op, rel.columns, values, rel.types, *meta)
    return True


def _poison(cfg, commit: int, e: Exception, row: tuple) -> dict:
    """A change that cannot be read (row: its op, values and meta), as a dead-letter record."""
    op, values, meta = row
    message = (
        f"table {cfg.schema}.{cfg.table}: the change at LSN {lsn_text(commit)} cannot be read:"
        f" {type(e).__name__}: {str(e)[:300]}"
    )
    raw = {k: None if v is None else str(v)[:1000] for k, v in values.items()}
    return {
        "table": cfg.table, "ts_ms": meta["__ts_ms"], "pos": meta["__pos"],
        "offset": {"lsn": lsn_text(commit), "table": cfg.table},
        "error_class": type(e).__name__, "error_message": message,
        "raw_record": {"op": op, **raw},
    }  # fmt: skip


def _source(cfg, snapshot: bool, **where) -> str:
    """__source: the database coordinates of a row (snapshot or change), as JSON."""
    body = {"db": cfg.connection.get("database"), "schema": cfg.schema, "table": cfg.table}
    return json.dumps({**body, "snapshot": snapshot, **where}, sort_keys=True)


def _untoasted(change: Change) -> tuple[dict, dict | None, str | None]:
    """The new values, the old key (or row) and the __unchanged list: an unchanged large value
    is taken from the old row where it is there (REPLICA IDENTITY FULL sends it); otherwise it
    is NULL and named in the list (JSON), so that a sink keeps the value it has."""
    if UNCHANGED_TOAST not in change.values.values():  # (compared by identity first)
        return change.values, change.old_key or None, None
    old = change.old_key or {}
    values = {k: old.get(k, v) if v is UNCHANGED_TOAST else v for k, v in change.values.items()}
    unknown = sorted(k for k, v in values.items() if v is UNCHANGED_TOAST)
    values.update(dict.fromkeys(unknown))
    return values, (old if change.old_key else None), (json.dumps(unknown) if unknown else None)


def _value(text, f, types: dict):
    return spark_value(text, types.get(f.name, "text"), f.dataType)


def _column(f, pg_type: str, texts: list):
    return spark_column(texts, pg_type, f.dataType)


def with_snapshot_columns(
    batch: pa.RecordBatch, cfg, schema: StructType, lsn: int
) -> pa.RecordBatch:
    """Snapshot rows, positioned before every change after the slot's start."""
    source = _source(cfg, True, lsn=lsn_text(lsn))
    return snapshot_columns(batch, schema, position(lsn, SNAPSHOT_SEQ), source)
