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

import json
import random
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from tests.helpers import read_parquet_rows, wait_until
from tests.pgserver import create_database
from tests.test_crash_recovery import describe, kill_everything, start_worker

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


# ------------------------------------------------------------------ workers


@contextmanager
def worker(p: dict, script: Path, tag: str):
    """A `connectql run` worker in its own session; whatever happens, nothing of it is left
    running afterwards (a worker still alive is asked to stop with SIGINT first)."""
    proc = start_worker(p["home"], script, p["logs"], tag)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=90)
            except subprocess.TimeoutExpired:
                pass
        kill_everything(proc)


def stop(proc: subprocess.Popen, p: dict, tag: str) -> None:
    """Ctrl-C: the worker stops its queries and exits 0."""
    proc.send_signal(signal.SIGINT)
    try:
        code = proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        code = None
    assert code == 0, f"worker {tag} exited with {code}\n{describe(p['logs'], p['home'], tag)}"


def alive(proc: subprocess.Popen, p: dict, tag: str) -> None:
    assert proc.poll() is None, f"worker {tag} died\n{describe(p['logs'], p['home'], tag)}"


# ------------------------------------------------------------------ the stream


def catch_up(second: subprocess.Popen, p: dict, expected, started: float) -> None:
    """Wait until the target equals the source (while the worker lives), then stop it."""

    def caught_up():
        alive(second, p, "second")
        return checksum(p["dst"]) == expected

    try:
        wait_until(caught_up, timeout=120, every=0.5, what="target equal to source")
    finally:
        print(f"target {checksum(p['dst'])}, source {expected}")
    print(f"target equals source at {time.monotonic() - started:.0f}s")
    stop(second, p, "second")


def stream_count(p: dict, where: str = "true") -> int:
    got = read_parquet_rows(p["home"] / "streams/changes", f"SELECT count(*) FROM t WHERE {where}")
    return got[0][0] if got else 0


def stream_changes(p: dict) -> list[tuple[str, str, int, int]]:
    """(__pos, __op, id, xid) of every committed non-snapshot row of the stream."""
    rows = read_parquet_rows(
        p["home"] / "streams/changes", "SELECT __pos, __op, id, __source FROM t WHERE __op <> 'r'"
    )
    return [(pos, op, key, json.loads(source)["xid"]) for pos, op, key, source in rows or []]


def assert_no_duplicate_change(changes: list[tuple[str, str, int, int]]) -> None:
    twice = {
        c: n for c, n in Counter((pos, op, key) for pos, op, key, _ in changes).items() if n > 1
    }
    assert not twice, f"{len(twice)} changes appear more than once in the stream, e.g. " + str(
        sorted(twice.items())[:10]
    )


def assert_every_transaction_once(changes, committed: list[tuple[int, list]]) -> None:
    """The stream's changes are exactly the committed transactions' (xid, op, id) changes."""
    expected = Counter((xid, op, key) for xid, ops in committed for op, key in ops)
    seen = Counter((xid, op, key) for _pos, op, key, xid in changes)
    missing, extra = expected - seen, seen - expected
    assert not missing and not extra, (
        f"{sum(expected.values())} changes committed, {sum(seen.values())} in the stream;"
        f" missing {sum(missing.values())}, e.g. {sorted(missing)[:10]};"
        f" unexpected {sum(extra.values())}, e.g. {sorted(extra)[:10]}"
    )
    # and each transaction's changes share one commit position (its commit LSN)
    by_xid: dict[int, set[str]] = {}
    for pos, _op, _key, xid in changes:
        by_xid.setdefault(xid, set()).add(pos.split("-")[0])
    split = {x: s for x, s in by_xid.items() if len(s) > 1}
    assert not split, f"transactions with several commit positions: {sorted(split.items())[:5]}"


# ------------------------------------------------------------------ the source's writer


class Writer:
    """Commits transactions of inserts, updates, deletes and primary-key changes on items and
    remembers, for each committed one, its xid and its changes as the stream must show them."""

    def __init__(self, info: str, live: range, next_id: int, seed: int):
        self.conn = psycopg.connect(info, autocommit=True)
        self.conn.execute("SET synchronous_commit = on")
        self.live = list(live)
        self.next_id = next_id
        self.rng = random.Random(seed)
        self.committed: list[tuple[int, list[tuple[str, int]]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def _take(self) -> int:
        """A live id, removed from the live set (a delete or the old side of a key change)."""
        i = self.rng.randrange(len(self.live))
        self.live[i], self.live[-1] = self.live[-1], self.live[i]
        return self.live.pop()

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id

    def transaction(self) -> None:
        rng, ops, born = self.rng, [], []
        with self.conn.transaction():
            xid = self.conn.execute("SELECT txid_current() % 4294967296").fetchone()[0]
            for _ in range(rng.randint(1, 4)):
                kind = rng.choices("cudk", weights=(4, 5, 2, 1))[0]
                if kind == "c":
                    new = self._new_id()
                    self.conn.execute(
                        "INSERT INTO items VALUES (%s, %s, %s, %s, now())",
                        (new, f"new {new}", rng.randint(0, 99), rng.randint(1, 99999) / 100),
                    )
                    ops.append(("c", new))
                    born.append(new)
                elif kind == "u":
                    key = self.live[rng.randrange(len(self.live))]
                    self.conn.execute(
                        "UPDATE items SET qty = qty + 1, name = name || '+', price = price + 0.01,"
                        " updated = clock_timestamp() WHERE id = %s",
                        (key,),
                    )
                    ops.append(("u", key))
                elif kind == "d":
                    key = self._take()
                    self.conn.execute("DELETE FROM items WHERE id = %s", (key,))
                    ops.append(("d", key))
                else:  # a new primary key: the stream shows a delete and an insert
                    old, new = self._take(), self._new_id()
                    self.conn.execute("UPDATE items SET id = %s WHERE id = %s", (new, old))
                    ops += [("d", old), ("c", new)]
                    born.append(new)
        self.live += born  # only now: the transaction committed
        self.committed.append((xid, ops))

    def run(self, per_second: float) -> None:
        def loop():
            try:
                while not self._stop.is_set():
                    t = time.monotonic()
                    self.transaction()
                    self._stop.wait(max(0.0, 1 / per_second - (time.monotonic() - t)))
            except BaseException as e:  # reported by stop()
                self.error = e

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self.conn.close()
        assert self.error is None, f"the writer failed: {self.error!r}"


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
    writer = Writer(p["src"], range(1, total + 1), 10 * total, seed=1)
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
            catch_up(second, p, expected, started)
    finally:
        writer.stop()
    assert "resumed from checkpoints: dst, src" in " ".join(
        (p["logs"] / "second.out").read_text().split()
    )

    # 3. the stream: the snapshot whole (a replayed chunk may be read twice), each change once
    snap = read_parquet_rows(
        p["home"] / "streams/changes",
        f"SELECT count(*), count(DISTINCT id), count(DISTINCT id) FILTER (WHERE id <= {total})"
        " FROM t WHERE __op = 'r'",
    )[0]
    print(f"snapshot rows in the stream: {snap[0]} ({snap[0] - snap[1]} read twice)")
    # every original row that no writer transaction deleted or re-keyed was read
    removed = {key for _xid, ops in writer.committed for op, key in ops if op == "d"}
    assert snap[2] >= total - len(removed), snap
    assert snap[0] - snap[1] <= chunk, f"more than one chunk read twice: {snap}"
    changes = stream_changes(p)
    assert_no_duplicate_change(changes)
    assert_every_transaction_once(changes, writer.committed)
    assert sql(p["dst"], "SELECT count(*) FROM items")[0][0] == expected[0]


def test_kill_during_change_capture_then_restart_loses_and_repeats_no_change(pipeline):
    p, total = pipeline, 10_000
    sql(p["src"], TABLE)
    sql(p["src"], FILL, (total,))
    script = p["script"](5000)
    started = time.monotonic()
    writer = Writer(p["src"], range(1, total + 1), 10 * total, seed=2)
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
            catch_up(second, p, expected, started)
    finally:
        writer.stop()

    # 3. the stream holds exactly the committed transactions' changes, each once
    changes = stream_changes(p)
    assert_no_duplicate_change(changes)
    assert_every_transaction_once(changes, writer.committed)
    inserted = sum(op == "c" for _xid, ops in writer.committed for op, _key in ops)
    assert sum(op == "c" for _pos, op, _key, _xid in changes) == inserted
