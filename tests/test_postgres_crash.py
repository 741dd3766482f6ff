"""PostgreSQL change-data capture survives `kill -9` of the worker: once a new `connectql run` of
the same script has caught up, the target table equals the source and the stream holds every
committed change exactly once.

Two scenarios, through real processes (the worker and its JVM killed with SIGKILL, as in
test_crash_recovery.py) against a private PostgreSQL with wal_level = logical:

1. the kill lands during the snapshot (120,000 rows read in chunks of 10,000); the source changes
   while the second worker resumes the snapshot and after it has finished;
2. the kill lands while the source streams changes from the write-ahead log, with a writer
   committing a steady mix of inserts, updates, deletes and primary-key changes throughout
   (also while no worker runs, so the new one starts with a backlog).

A change in the stream is identified by (__pos, __op, key): the 'd' + 'c' pair of a primary-key
change share a __pos. Snapshot rows (__op = 'r') may be re-read when a snapshot chunk is replayed
after the restart; no other row may appear twice, and every transaction the writer committed
must be in the stream with exactly its changes (matched by the xid in __source). The scenarios
and the writer are shared with the other databases' crash tests (tests/crash.py).
"""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
import pytest

from tests.crash import Writer, kill_during_change_capture, kill_during_snapshot
from tests.pgserver import create_database

pytestmark = pytest.mark.spark

SCRIPT = """
CREATE SOURCE CONNECTOR IF NOT EXISTS src FROM postgres INTO changes WITH (
  host = '{host}', port = {port}, user = '{user}', database = '{src}', table = 'items',
  'slot.name' = '{slot}', 'batch.rows' = {batch_rows});
CREATE SINK CONNECTOR IF NOT EXISTS dst TO postgres FROM changes WITH (
  host = '{host}', port = {port}, user = '{user}', database = '{dst}', table = 'items');
"""

TABLE = (
    "CREATE TABLE items (id bigint PRIMARY KEY, name text, qty int, price numeric(12,2),"
    " updated timestamptz)"
)
FILL = (
    "INSERT INTO items SELECT g, 'item ' || g, g %% 100, g * 0.25,"
    " '2024-01-01 00:00:00+00'::timestamptz + g * interval '1.5 second'"
    " FROM generate_series(1, %s) g"
)
# the same columns, with the source's types, on both sides (the target is created by the sink)
CHECKSUM = (
    "SELECT count(*), md5(coalesce(string_agg((id, name, qty, price::numeric(12,2),"
    " updated::timestamptz)::text, ',' ORDER BY id), '')) FROM items"
)


# ------------------------------------------------------------------ databases


def sql(info: str, statement: str, params=None):
    with psycopg.connect(info, autocommit=True) as c:
        c.execute("SET synchronous_commit = on")  # logical decoding sees flushed WAL only
        cur = c.execute(statement, params)
        return cur.fetchall() if cur.description else None


def checksum(info: str):
    """(rows, md5 of every row) of items, or None while the table does not exist yet."""
    try:
        return sql(info, CHECKSUM)[0]
    except psycopg.errors.UndefinedTable:
        return None


@pytest.fixture
def pipeline(pg_logical, tmp_path):
    """Source and target databases on the private server, a home, and the script joining them;
    the slot and the databases are dropped afterwards."""
    tag = uuid.uuid4().hex[:8]
    src, dst, slot = f"cq_crash_src_{tag}", f"cq_crash_dst_{tag}", f"cq_crash_{tag}"
    src_info = create_database(pg_logical.conninfo(), src)
    dst_info = create_database(pg_logical.conninfo(), dst)
    logs = tmp_path / "logs"
    logs.mkdir()

    def script(batch_rows: int) -> Path:
        path = tmp_path / "pipeline.sql"
        path.write_text(
            SCRIPT.format(
                host=pg_logical.host,
                port=pg_logical.port,
                user=pg_logical.user,
                src=src,
                dst=dst,
                slot=slot,
                batch_rows=batch_rows,
            )
        )
        return path

    def fill(total: int) -> None:
        sql(src_info, TABLE)
        sql(src_info, FILL, (total,))

    yield {
        "src": src_info,
        "dst": dst_info,
        "home": tmp_path / "home",
        "logs": logs,
        "script": script,
        "fill": fill,
        "source": lambda: checksum(src_info),
        "target": lambda: checksum(dst_info),
        "writer": lambda live, next_id, seed: PgWriter(src_info, live, next_id, seed),
        "txn": "xid",
    }
    with psycopg.connect(pg_logical.conninfo(), autocommit=True) as c:
        for (name,) in c.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE slot_name = %s OR database = %s",
            (slot, src),
        ).fetchall():
            c.execute("SELECT pg_drop_replication_slot(%s)", (name,))
        for db in (src, dst):
            c.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


# ------------------------------------------------------------------ the source's writer


class PgWriter(Writer):
    """The crash tests' writer on PostgreSQL; a transaction is known by its xid."""

    UPDATE = (
        "UPDATE items SET qty = qty + 1, name = name || '+', price = price + 0.01,"
        " updated = clock_timestamp() WHERE id = %s"
    )

    def __init__(self, info: str, live: range, next_id: int, seed: int):
        super().__init__(live, next_id, seed)
        self.conn = psycopg.connect(info, autocommit=True)
        self.conn.execute("SET synchronous_commit = on")

    def in_transaction(self, body) -> int:
        with self.conn.transaction():
            xid = self.conn.execute("SELECT txid_current() % 4294967296").fetchone()[0]
            body(self.conn.execute)
        return xid


# ------------------------------------------------------------------ the tests


@pytest.mark.scenario
def test_kill_during_the_snapshot_then_restart_copies_every_row_and_change_once(pipeline):
    kill_during_snapshot(pipeline, total=120_000, chunk=10_000, changes=300)


def test_kill_during_change_capture_then_restart_loses_and_repeats_no_change(pipeline):
    kill_during_change_capture(pipeline, total=10_000, batch_rows=5000)
