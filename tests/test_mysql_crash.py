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
its changes, matched by the MariaDB GTID in __source. The scenarios and the writer are shared
with the other databases' crash tests (tests/crash.py).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.crash import Writer, kill_during_change_capture, kill_during_snapshot
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

    def fill(total: int) -> None:
        execute(p, TABLE)
        execute(p, FILL.format(total=total))

    p = {
        "mariadb": mariadb_binlog,
        "src": src,
        "dst": dst_info,
        "home": tmp_path / "home",
        "logs": logs,
        "script": script,
        "fill": fill,
        "source": lambda: source_checksum(p),
        "target": lambda: target_checksum(p),
        "writer": lambda live, next_id, seed: MariaWriter(p, live, next_id, seed),
        "txn": "gtid",
    }
    yield p
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


# ------------------------------------------------------------------ the tests


@pytest.mark.scenario
def test_kill_during_the_snapshot_then_restart_copies_every_row_and_change_once(pipeline):
    kill_during_snapshot(pipeline, total=20_000, chunk=2_000, changes=200)


def test_kill_during_change_capture_then_restart_loses_and_repeats_no_change(pipeline):
    kill_during_change_capture(pipeline, total=5_000, batch_rows=2_000)
