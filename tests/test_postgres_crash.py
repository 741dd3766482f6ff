"""PostgreSQL change-data capture survives `kill -9` of the worker: once a new `connectql run` of
the same script has caught up, the target table equals the source and the stream holds every
committed change exactly once.

Two scenarios, through real processes (the worker and its JVM killed with SIGKILL, as in
test_crash_recovery.py) against a private PostgreSQL with wal_level = logical:

1. the kill lands during the snapshot (200,000 rows read in chunks of 5,000); the source changes
   while the second worker resumes the snapshot and after it has finished;
2. the kill lands while the source streams changes from the write-ahead log, with a writer
   committing a steady mix of inserts, updates, deletes and primary-key changes throughout
   (also while no worker runs, so the new one starts with a backlog).

A change in the stream is identified by (__pos, __op, key): the 'd' + 'c' pair of a primary-key
change share a __pos. Snapshot rows (__op = 'r') may be re-read when a snapshot chunk is replayed
after the restart; no other row may appear twice, and every transaction the writer committed
must be in the stream with exactly its changes (matched by the xid in __source).
"""

from __future__ import annotations

import random
import signal
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.crash import (
    Writer,
    alive,
    assert_every_transaction_once,
    assert_inserts_once,
    assert_no_duplicate_change,
    assert_resumed,
    catch_up,
    kill_everything,
    snapshot_counts,
    stream_changes,
    stream_count,
    worker,
)
from tests.helpers import wait_until
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

    yield {
        "src": src_info,
        "dst": dst_info,
        "home": tmp_path / "home",
        "logs": logs,
        "script": script,
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

    def close(self) -> None:
        self.conn.close()


# ------------------------------------------------------------------ the tests


def test_kill_during_the_snapshot_then_restart_copies_every_row_and_change_once(pipeline):
    p, total, chunk = pipeline, 120_000, 10_000
    sql(p["src"], TABLE)
    sql(p["src"], FILL, (total,))
    script = p["script"](chunk)
    started = time.monotonic()

    # 1. the first worker, killed once a few snapshot chunks are in the stream and the target
    with worker(p, script, "first") as first:

        def mid_snapshot():
            alive(first, p, "first")
            snapped = stream_count(p, "__op = 'r'")
            assert snapped < total, "the snapshot finished before the kill: make it longer"
            in_target = (checksum(p["dst"]) or (0,))[0]
            return snapped >= 2 * chunk and (in_target > 0 or snapped >= total // 2) and snapped

        wait_until(mid_snapshot, timeout=120, every=0.1, what="snapshot rows in the stream")
        kill_everything(first)
    assert first.returncode == -signal.SIGKILL
    at_kill = stream_count(p, "__op = 'r'"), (checksum(p["dst"]) or (0,))[0]
    print(
        f"\nkilled at {time.monotonic() - started:.0f}s: {at_kill[0]} snapshot rows in the"
        f" stream, {at_kill[1]} in the target"
    )
    assert 0 < at_kill[0] < total

    # 2. the second worker resumes the snapshot; the source changes meanwhile (the changes on
    # rows already read and on rows not read yet) and after the snapshot is done
    writer = PgWriter(p["src"], range(1, total + 1), 10 * total, seed=1)
    try:
        with worker(p, script, "second") as second:
            for _ in range(300):
                writer.transaction()

            def snapshot_done():
                alive(second, p, "second")
                return stream_count(p, "__op <> 'r'") > 0

            wait_until(snapshot_done, timeout=150, every=0.5, what="changes after the snapshot")
            print(f"snapshot done at {time.monotonic() - started:.0f}s")
            for _ in range(300):
                writer.transaction()
            writer.stop()
            expected = checksum(p["src"])
            catch_up(second, p, lambda: checksum(p["dst"]), expected, started)
    finally:
        writer.stop()
    assert_resumed(p)

    # 3. the stream: the snapshot whole (a replayed chunk may be read twice), each change once
    snap = snapshot_counts(p, total)
    print(f"snapshot rows in the stream: {snap[0]} ({snap[0] - snap[1]} read twice)")
    # every original row that no writer transaction deleted or re-keyed was read
    removed = {key for _xid, ops in writer.committed for op, key in ops if op == "d"}
    assert snap[2] >= total - len(removed), snap
    assert snap[0] - snap[1] <= chunk, f"more than one chunk read twice: {snap}"
    changes = stream_changes(p, "xid")
    assert_no_duplicate_change(changes)
    assert_every_transaction_once(changes, writer.committed)
    assert sql(p["dst"], "SELECT count(*) FROM items")[0][0] == expected[0]


def test_kill_during_change_capture_then_restart_loses_and_repeats_no_change(pipeline):
    p, total = pipeline, 10_000
    sql(p["src"], TABLE)
    sql(p["src"], FILL, (total,))
    script = p["script"](5000)
    started = time.monotonic()
    writer = PgWriter(p["src"], range(1, total + 1), 10 * total, seed=2)
    try:
        # 1. the first worker: snapshot, then changes from a steady writer; killed mid-stream
        with worker(p, script, "first") as first:

            def snapshot_done():
                alive(first, p, "first")
                return stream_count(p, "__op = 'r'") >= total

            wait_until(snapshot_done, timeout=120, every=0.2, what="the snapshot in the stream")
            # every row is read, but the source leaves the snapshot phase only once a chunk
            # finds nothing more: one transaction, and its changes mark the stream phase
            writer.transaction()

            def changes_flow():
                alive(first, p, "first")
                return stream_count(p, "__op <> 'r'") > 0

            wait_until(changes_flow, timeout=60, every=0.2, what="a first change in the stream")
            writer.run(per_second=50)
            streamed = len(writer.committed)

            def streaming():
                alive(first, p, "first")
                return stream_count(p, "__op <> 'r'") >= 300 and len(writer.committed) > streamed

            wait_until(streaming, timeout=90, every=0.2, what="changes in the stream")
            time.sleep(random.uniform(0, 1.5))  # somewhere inside a batch, or between two
            kill_everything(first)
        at_kill = stream_count(p, "__op <> 'r'"), len(writer.committed)
        print(
            f"\nkilled at {time.monotonic() - started:.0f}s: {at_kill[0]} changes in the stream,"
            f" {at_kill[1]} transactions committed"
        )

        # 2. the second worker starts with a backlog (the writer went on) and catches up
        with worker(p, script, "second") as second:

            def resumed():
                alive(second, p, "second")
                return stream_count(p, "__op <> 'r'") > at_kill[0]

            wait_until(resumed, timeout=120, every=0.2, what="new changes after the restart")
            time.sleep(3)
            writer.stop()
            expected = checksum(p["src"])
            print(
                f"writer stopped at {time.monotonic() - started:.0f}s after"
                f" {len(writer.committed)} transactions"
            )
            catch_up(second, p, lambda: checksum(p["dst"]), expected, started)
    finally:
        writer.stop()

    # 3. the stream holds exactly the committed transactions' changes, each once
    changes = stream_changes(p, "xid")
    assert_no_duplicate_change(changes)
    assert_every_transaction_once(changes, writer.committed)
    assert_inserts_once(changes, writer.committed)
