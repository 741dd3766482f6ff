"""MySQL/MariaDB change-data capture survives `kill -9` of the worker: once a new `connectql run`
of the same script has caught up, the PostgreSQL target table equals the MariaDB source and the
stream holds every committed change exactly once.

Two scenarios, through real processes (the worker and its JVM killed with SIGKILL, as in
test_crash_recovery.py) from a private MariaDB with ROW binary logging into a database on the
shared PostgreSQL:

1. the kill lands during the snapshot (20,000 rows read in chunks of 2,000); the source changes
   while the second worker resumes the snapshot and after it has finished;
2. the kill lands while the source reads the binary log, with a writer committing a steady mix
   of inserts, updates, deletes and primary-key changes throughout (also while no worker runs,
   so the new one starts with a backlog).

Snapshot rows may be re-read when a snapshot chunk is replayed after the restart; no other row
may appear twice, and every transaction the writer committed must be in the stream with exactly
its changes, matched by the MariaDB GTID in __source (see tests/crash.py).
"""

from __future__ import annotations

import datetime as dt
import hashlib
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
from tests.mariadbserver import create_database as create_mariadb_database
from tests.mariadbserver import mariadb_binlog  # noqa: F401 (fixture)
from tests.pgserver import create_database as create_pg_database

pytestmark = pytest.mark.spark

SCRIPT = """
CREATE SOURCE CONNECTOR IF NOT EXISTS src FROM mysql INTO changes WITH (
  host = '{host}', port = {port}, user = '{user}', database = '{src}', table = 'items',
  'batch.rows' = {batch_rows});
CREATE SINK CONNECTOR IF NOT EXISTS dst TO postgres FROM changes WITH (
  host = '{pg_host}', port = {pg_port}, user = '{pg_user}', database = '{dst}', table = 'items');
"""

TABLE = (
    "CREATE TABLE items (id bigint PRIMARY KEY, name varchar(255), qty int,"
    " price decimal(12,2), updated datetime(6))"
)
FILL = (
    "INSERT INTO items SELECT seq, CONCAT('item ', seq), seq % 100, seq * 0.25,"
    " TIMESTAMP'2024-01-01 00:00:00' + INTERVAL seq * 1500000 MICROSECOND"
    " FROM seq_1_to_{total}"
)
ROWS = "SELECT id, name, qty, price, updated FROM items ORDER BY id"


# ------------------------------------------------------------------ databases


def checksum(rows) -> tuple[int, str]:
    """(rows, digest of every row by value): the same on both sides for equal tables."""
    digest = hashlib.md5()
    n = 0
    for id_, name, qty, price, updated in rows:
        if updated is not None and updated.tzinfo is not None:
            updated = updated.astimezone(dt.timezone.utc).replace(tzinfo=None)
        digest.update(repr((int(id_), name, qty, str(price), updated)).encode())
        n += 1
    return n, digest.hexdigest()


def source_checksum(p: dict):
    conn = p["mariadb"].connect(p["src"])
    try:
        with conn.cursor() as cur:
            cur.execute(ROWS)
            return checksum(cur.fetchall())
    finally:
        conn.close()


def target_checksum(p: dict):
    """The target's checksum, or None while the sink has not created the table yet."""
    try:
        with psycopg.connect(p["dst"]) as c:
            return checksum(c.execute(ROWS).fetchall())
    except psycopg.errors.UndefinedTable:
        return None


def target_rows(p: dict) -> int:
    return (target_checksum(p) or (0,))[0]


def execute(p: dict, statement: str) -> None:
    conn = p["mariadb"].connect(p["src"])
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
    finally:
        conn.close()


@pytest.fixture
def pipeline(mariadb_binlog, pg_shared, tmp_path):  # noqa: F811
    """A source database on the private MariaDB, a target database on the shared PostgreSQL, a
    home, and the script joining them; both databases are dropped afterwards."""
    tag = uuid.uuid4().hex[:8]
    src, dst = f"cq_crash_src_{tag}", f"cq_crash_dst_{tag}"
    create_mariadb_database(mariadb_binlog, src)
    dst_info = create_pg_database(pg_shared.conninfo(), dst)
    logs = tmp_path / "logs"
    logs.mkdir()

    def script(batch_rows: int) -> Path:
        path = tmp_path / "pipeline.sql"
        path.write_text(
            SCRIPT.format(
                host=mariadb_binlog.host,
                port=mariadb_binlog.port,
                user=mariadb_binlog.user,
                src=src,
                pg_host=pg_shared.host,
                pg_port=pg_shared.port,
                pg_user=pg_shared.user,
                dst=dst,
                batch_rows=batch_rows,
            )
        )
        return path

    yield {
        "mariadb": mariadb_binlog,
        "src": src,
        "dst": dst_info,
        "home": tmp_path / "home",
        "logs": logs,
        "script": script,
    }
    conn = mariadb_binlog.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{src}`")
    finally:
        conn.close()
    with psycopg.connect(pg_shared.conninfo(), autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{dst}" WITH (FORCE)')


# ------------------------------------------------------------------ the source's writer


class MariaWriter(Writer):
    """The crash tests' writer on MariaDB; a transaction is known by its GTID."""

    INSERT = "INSERT INTO items VALUES (%s, %s, %s, %s, NOW(6))"
    UPDATE = (
        "UPDATE items SET qty = qty + 1, name = CONCAT(name, '+'), price = price + 0.01,"
        " updated = NOW(6) WHERE id = %s"
    )

    def __init__(self, p: dict, live: range, next_id: int, seed: int):
        super().__init__(live, next_id, seed)
        self.conn = p["mariadb"].connect(p["src"])

    def in_transaction(self, body) -> str:
        with self.conn.cursor() as cur:
            cur.execute("BEGIN")
            try:
                body(cur.execute)
                cur.execute("COMMIT")
            except BaseException:
                self.conn.rollback()
                raise
            cur.execute("SELECT @@last_gtid")  # this session's last committed transaction
            return cur.fetchone()[0]

    def close(self) -> None:
        self.conn.close()


# ------------------------------------------------------------------ the tests


def test_kill_during_the_snapshot_then_restart_copies_every_row_and_change_once(pipeline):
    p, total, chunk = pipeline, 20_000, 2_000
    execute(p, TABLE)
    execute(p, FILL.format(total=total))
    script = p["script"](chunk)
    started = time.monotonic()

    # 1. the first worker, killed once a few snapshot chunks are in the stream and the target
    with worker(p, script, "first") as first:

        def mid_snapshot():
            alive(first, p, "first")
            snapped = stream_count(p, "__op = 'r'")
            assert snapped < total, "the snapshot finished before the kill: make it longer"
            return snapped >= 2 * chunk and (target_rows(p) > 0 or snapped >= total // 2)

        wait_until(mid_snapshot, timeout=120, every=0.1, what="snapshot rows in the stream")
        kill_everything(first)
    assert first.returncode == -signal.SIGKILL
    at_kill = stream_count(p, "__op = 'r'"), target_rows(p)
    print(
        f"\nkilled at {time.monotonic() - started:.0f}s: {at_kill[0]} snapshot rows in the"
        f" stream, {at_kill[1]} in the target"
    )
    assert 0 < at_kill[0] < total

    # 2. the second worker resumes the snapshot; the source changes meanwhile (the changes on
    # rows already read and on rows not read yet) and after the snapshot is done
    writer = MariaWriter(p, range(1, total + 1), 10 * total, seed=1)
    try:
        with worker(p, script, "second") as second:
            for _ in range(200):
                writer.transaction()

            def snapshot_done():
                alive(second, p, "second")
                return stream_count(p, "__op <> 'r'") > 0

            wait_until(snapshot_done, timeout=120, every=0.5, what="changes after the snapshot")
            print(f"snapshot done at {time.monotonic() - started:.0f}s")
            for _ in range(200):
                writer.transaction()
            writer.stop()
            expected = source_checksum(p)
            catch_up(second, p, lambda: target_checksum(p), expected, started)
    finally:
        writer.stop()
    assert_resumed(p)

    # 3. the stream: the snapshot whole (a replayed chunk may be read twice), each change once
    snap = snapshot_counts(p, total)
    print(f"snapshot rows in the stream: {snap[0]} ({snap[0] - snap[1]} read twice)")
    # every original row that no writer transaction deleted or re-keyed was read
    removed = {key for _gtid, ops in writer.committed for op, key in ops if op == "d"}
    assert snap[2] >= total - len(removed), snap
    assert snap[0] - snap[1] <= chunk, f"more than one chunk read twice: {snap}"
    changes = stream_changes(p, "gtid")
    assert_no_duplicate_change(changes)
    assert_every_transaction_once(changes, writer.committed)
    assert target_rows(p) == expected[0]


def test_kill_during_change_capture_then_restart_loses_and_repeats_no_change(pipeline):
    p, total = pipeline, 5_000
    execute(p, TABLE)
    execute(p, FILL.format(total=total))
    script = p["script"](2_000)
    started = time.monotonic()
    writer = MariaWriter(p, range(1, total + 1), 10 * total, seed=2)
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
            expected = source_checksum(p)
            print(
                f"writer stopped at {time.monotonic() - started:.0f}s after"
                f" {len(writer.committed)} transactions"
            )
            catch_up(second, p, lambda: target_checksum(p), expected, started)
    finally:
        writer.stop()

    # 3. the stream holds exactly the committed transactions' changes, each once
    changes = stream_changes(p, "gtid")
    assert_no_duplicate_change(changes)
    assert_every_transaction_once(changes, writer.committed)
    assert_inserts_once(changes, writer.committed)
