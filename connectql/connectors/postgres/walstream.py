"""The change log over PostgreSQL's streaming replication protocol: a tailer thread in the source
process holds the slot's one replication connection (psycopg2's LogicalReplicationConnection;
psycopg 3 has no replication protocol) and spools each transaction of the captured tables, as
the pgoutput messages the server sent (and the Relation messages they need), to files in a
directory beside the checkpoint, each holding the transactions of up to GROUP_S (or
GROUP_MESSAGES messages, or until the stream pauses) and named by the last one's commit LSN:
the tailer only frames and counts them, a batch's reader decodes them, once. latestOffset looks
batches up in the spool, read() (in other processes) reads a range of its files, and commit
sends the committed LSN as the slot's flush position and deletes the files up to it. The slot never passes what the checkpoint committed, so
after a restart the tailer spools again from there and a replayed batch reads the same
transactions."""

from __future__ import annotations

import os
import pickle
import select
import tempfile
import threading
import time
from bisect import bisect_right
from pathlib import Path

import psycopg

from connectql.connectors.postgres.cdc import lsn_int, publications, type_names
from connectql.connectors.postgres.client import connect, connect_error, libpq_params
from connectql.connectors.postgres.pgoutput import CHANGES, Begin, Commit, Decoder, relation_oid
from connectql.connectors.relational.tablereader import Window
from connectql.errors import ConnectQLError

COVERED = "covered"  # the spool's file holding the LSN up to which every commit is spooled
POLL_S = 0.05
GROUP_S = 0.05  # a spool file holds the transactions of this long at most (one write, not many)
GROUP_MESSAGES = 50_000  # ... or of this many change messages
ASK_EVERY_S = 0.5  # while idle, ask the server where it is (a keepalive reply), this often
PING_S = 5.0  # while idle, check the server answers a query (a silent one is hung), this often
HEARD_S = 15.0  # ... within this long (at most: read.timeout.ms when shorter)
READ_WAIT_S = 120.0
AHEAD_BATCHES = 4  # the tailer stops reading this many batches' rows past the committed LSN
IN_USE_WAIT_S = 15.0  # START_REPLICATION waits this long for a dead process's hold on the slot
# a batch planned while the tailer catches up a backlog (this far behind the server's end of
# WAL) waits this long at most for a batch's rows, rather than taking the few spooled so far
BACKLOG_BYTES = 4 * 2**20
FILL_WAIT_S = 1.0


def spool_dir(checkpoint: str | None, cfg) -> Path:
    """Beside the checkpoint (shared by every process of the query, and gone with it); without
    one (a reader made outside connectql), under the temporary directory."""
    if checkpoint:
        return Path(checkpoint) / "pgoutput-spool" / cfg.slot
    c = cfg.connection
    where = f"{c.get('host', 'localhost')}_{c.get('port', 5432)}_{c.get('database')}_{cfg.slot}"
    return Path(tempfile.gettempdir()) / "connectql-spool" / where


def _name(lsn: int) -> str:
    return f"{lsn:016X}.txn"


def write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def covered(spool: Path) -> int:
    try:
        return int((spool / COVERED).read_text())
    except (FileNotFoundError, ValueError):
        return -1


def read_spool(spool: Path, lsn_from: int, lsn_to: int):
    """(commit LSN, ts_ms, xid, messages) of the spooled transactions in (lsn_from, lsn_to], in
    commit order, once the spool covers lsn_to (waiting for the tailer if need be): the
    pgoutput Relation messages a transaction's changes need, then its change messages (or,
    spooled by an earlier connectql, its decoded changes), as cdc.change_batches takes them."""
    deadline = time.monotonic() + READ_WAIT_S
    while covered(spool) < lsn_to:
        if time.monotonic() > deadline:
            raise ConnectQLError(
                f"the change log spool {spool} does not reach LSN {lsn_to:X} after"
                f" {READ_WAIT_S:.0f} s (is the source's replication connection down?)"
            )
        time.sleep(POLL_S)
    for name in sorted(p.name for p in spool.glob("*.txn")):
        if int(name.removesuffix(".txn"), 16) <= lsn_from:
            continue
        body = pickle.loads((spool / name).read_bytes())
        for txn in body if isinstance(body, list) else [body]:
            lsn = txn[0]
            if lsn > lsn_to:
                return
            if lsn <= lsn_from:
                continue
            if len(txn) == 4:  # spooled decoded, by an earlier connectql (a [Change] list)
                yield txn
                continue
            lsn, ts_ms, xid, relations, messages = txn
            yield lsn, ts_ms, xid, [*relations, *messages]


# ------------------------------------------------------------------ keyless tables' snapshots


def save_snapshot(spool: Path, table: str, snapshot: str) -> None:
    """The transaction snapshot (pg_current_snapshot()) a keyless table's rows were read in."""
    spool.mkdir(parents=True, exist_ok=True)
    write_atomic(spool / f"{table}.snapshot", snapshot.encode())


def snapshots(spool: Path) -> dict[str, str]:
    return {p.name.removesuffix(".snapshot"): p.read_text() for p in spool.glob("*.snapshot")}


def visible(xid: int, snapshot: str) -> bool:
    """Whether transaction `xid` (32 bits, as pgoutput gives it) committed before `snapshot`
    ('xmin:xmax:xip,...') was taken, i.e. its rows were in what that snapshot read."""
    xmin, xmax, xip = snapshot.split(":")
    if _precedes(xid, int(xmin)):
        return True
    return _precedes(xid, int(xmax)) and str(xid) not in {
        str(int(x) & 0xFFFFFFFF) for x in xip.split(",") if x
    }


def _precedes(a: int, b: int) -> bool:
    """a < b among 32-bit transaction ids (modulo 2^32, as PostgreSQL compares them)."""
    return ((a - (b & 0xFFFFFFFF)) & 0xFFFFFFFF) >= 0x80000000


class Tailer:
    """Follows the slot from `start` in a thread, spooling the captured tables' transactions."""

    def __init__(self, cfg, spool: Path, start: int, captured: set[str], batch_rows: int):
        self.cfg, self.spool, self.captured = cfg, spool, captured
        self.limit = batch_rows
        self.start = start
        self.commits: list[int] = []  # spooled commit LSNs past the confirmed one, in order
        self.rows: list[int] = []  # their captured row counts
        self.pending = 0  # sum(rows)
        self.seen = start  # every commit up to this LSN is spooled
        self.files: list[int] = []  # the spool files' names (their last commit LSN), in order
        self.group: list[tuple] = []  # transactions to spool with the next file
        self.grouped = 0  # their change messages
        self.flushed_at = 0.0  # when the last file (or coverage) was written
        self.reached = start  # the last commit read (spooled or not)
        self.server_end = start  # the server's end of WAL, as its last message said
        self.confirmed = start
        self.told = start  # the flush position last sent
        self.error: BaseException | None = None
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        spool.mkdir(parents=True, exist_ok=True)
        for stale in spool.glob("*.txn"):  # grouped otherwise by an earlier tailer: spooled again
            stale.unlink()
        write_atomic(spool / COVERED, str(start).encode())
        self.thread = threading.Thread(target=self._run, name="pgoutput-tailer", daemon=True)
        self.thread.start()

    # ------------------------------------------------------------------ the source's side
    def covers(self, start: int) -> bool:
        return self.error is None and self.start <= start and self.thread.is_alive()

    def window(self, start: int) -> Window:
        """The next batch after `start`: whole transactions, about batch_rows rows. While the
        tailer catches up a backlog (a source started or resumed behind the log), it waits up
        to FILL_WAIT_S for a batch's rows: a first batch of the few rows spooled in the
        tailer's first moments costs a whole batch's overhead, and its sink's write too."""
        deadline = time.monotonic() + FILL_WAIT_S
        while True:
            if self.error is not None:
                raise self.error
            window, rows = self._window(start)
            if rows >= self.limit or not self._catching_up() or time.monotonic() >= deadline:
                return window
            time.sleep(POLL_S)

    def _window(self, start: int) -> tuple[Window, int]:
        with self.lock:
            i = bisect_right(self.commits, start)
            relevant, total = None, 0
            while i < len(self.commits) and (relevant is None or total < self.limit):
                relevant, total = self.commits[i], total + self.rows[i]
                i += 1
            full = i < len(self.commits)
            return Window(relevant, self.seen if self.seen > start else None, full), total

    def _catching_up(self) -> bool:
        """Far behind the server's end of WAL (as its last message said), and reading."""
        return self.server_end - self.seen > BACKLOG_BYTES and self.thread.is_alive()

    def confirm(self, lsn: int) -> None:
        """Everything up to `lsn` is committed: the slot may advance, the files go."""
        with self.lock:
            if lsn <= self.confirmed:
                return
            self.confirmed = lsn
            i = bisect_right(self.commits, lsn)
            self.commits = self.commits[i:]
            self.pending -= sum(self.rows[:i])
            self.rows = self.rows[i:]
            f = bisect_right(self.files, lsn)
            gone, self.files = self.files[:f], self.files[f:]
        for name in gone:
            (self.spool / _name(name)).unlink(missing_ok=True)

    def close(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        try:
            with connect(self.cfg.connection, autocommit=True) as sql:
                decoder = Decoder(type_names(sql))
                self._follow(decoder, sql)
        except BaseException as e:  # noqa: BLE001 (handed to the source's next call)
            if not self.stopping.is_set():
                self.error = ConnectQLError(f"postgres change log stream: {e}")

    def _follow(self, decoder: Decoder, sql) -> None:
        names = publications(sql, self.cfg.slot)
        conn = replication_connection(self.cfg.connection)
        try:
            cur = conn.cursor()
            self._start(cur, names)
            self._loop(cur, decoder, sql)
        finally:
            conn.close()

    def _start(self, cur, names: str) -> None:
        """START_REPLICATION; while the connection of a process that died still holds the slot
        (the server has not noticed yet), wait a little for it."""
        import psycopg2.errors

        deadline = time.monotonic() + IN_USE_WAIT_S
        while True:
            try:
                cur.start_replication(
                    slot_name=self.cfg.slot,
                    decode=False,
                    start_lsn=self.start,
                    options={"proto_version": "1", "publication_names": names},
                )
                return
            except psycopg2.errors.ObjectInUse:
                if time.monotonic() > deadline or self.stopping.is_set():
                    raise
                time.sleep(0.5)

    def _loop(self, cur, decoder: Decoder, sql) -> None:
        txn: list[bytes] = []  # the captured tables' change messages
        used: set[int] = set()  # their relations
        relations: dict[int, bytes] = {}  # each relation's last Relation message
        begin: Begin | None = None
        asked = pinged = time.monotonic()
        measured = 0.0
        while not self.stopping.is_set():
            if time.monotonic() - measured > ASK_EVERY_S:
                self._measure_end(sql)
                measured = time.monotonic()
            if self._ahead():
                self._flush(self.reached)
                self._feedback(cur)
                time.sleep(POLL_S)
                continue
            msg = cur.read_message()
            self.server_end = max(self.server_end, cur.wal_end or 0)
            if msg is None:
                now = time.monotonic()
                if now - pinged > PING_S:  # a silent stream: idle, or a server that hangs?
                    self._ping(sql)
                    pinged = now
                if now - asked > ASK_EVERY_S:
                    self._feedback(cur, reply=True)
                    asked = now
                if not txn and begin is None:
                    self._flush(max(self.reached, cur.wal_end or 0))
                select.select([cur], [], [], POLL_S)
                continue
            data = bytes(msg.payload)
            kind = data[:1]
            if kind in CHANGES:
                oid = relation_oid(data)
                if decoder.relation(oid).table in self.captured:
                    txn.append(data)
                    used.add(oid)
            elif kind == b"R":
                decoder.feed(data)
                relations[relation_oid(data)] = data
            else:
                item = decoder.feed(data)
                if isinstance(item, Begin):
                    begin, txn, used = item, [], set()
                elif isinstance(item, Commit):
                    self._spool(item, begin, txn, [relations[o] for o in sorted(used)])
                    begin, txn = None, []
                    if self._due():
                        self._flush(self.reached)
            self._feedback(cur)

    def _measure_end(self, sql) -> None:
        """The server's end of WAL, asked on the tailer's own connection: the stream's
        messages carry their own position as theirs, so without this a tailer catching up a
        backlog could not tell it is behind (nor the source its lag)."""
        bound = sql.read_s
        sql.read_s = min(bound or HEARD_S, HEARD_S)
        try:
            row = sql.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        except psycopg.errors.ObjectNotInPrerequisiteState:  # a standby: the stream's figure
            return
        except Exception as e:
            raise ConnectQLError(f"{e} (replication stream)") from None
        finally:
            sql.read_s = bound
        self.server_end = max(self.server_end, lsn_int(row[0]))

    def _ping(self, sql) -> None:
        """A query on the tailer's own connection, bounded by HEARD_S (or a shorter
        read.timeout.ms): a server that does not answer fails the tailer, naming it."""
        bound = sql.read_s
        sql.read_s = min(bound or HEARD_S, HEARD_S)
        try:
            sql.execute("SELECT 1")
        except Exception as e:
            raise ConnectQLError(f"{e} (replication stream idle)") from None
        finally:
            sql.read_s = bound

    def _feedback(self, cur, reply: bool = False) -> None:
        """The confirmed LSN as the slot's flush position: sent at once when it moved (the
        server may free WAL), else with psycopg2's periodic status."""
        moved, self.told = self.confirmed > self.told, self.confirmed
        cur.send_feedback(flush_lsn=self.confirmed, reply=reply, force=moved)

    def _ahead(self) -> bool:
        return self.pending > AHEAD_BATCHES * self.limit

    def _spool(self, commit: Commit, begin: Begin | None, txn: list[bytes], relations) -> None:
        """A committed transaction: into the next spool file when it changed captured rows."""
        lsn = commit.end_lsn
        if txn and lsn > self.confirmed:
            self.group.append((lsn, commit.ts_ms, begin.xid if begin else 0, relations, txn))
            self.grouped += len(txn)
        self.reached = max(self.reached, lsn)

    def _due(self) -> bool:
        """Write what is grouped: enough messages, or the first of them waited long enough."""
        if self.grouped >= GROUP_MESSAGES:
            return True
        waiting = self.group or self.reached > self.seen
        return bool(waiting) and time.monotonic() - self.flushed_at >= GROUP_S

    def _flush(self, covered: int) -> None:
        """Write the grouped transactions as one file, then make them (and every commit up to
        `covered`) visible to batches: the file before the coverage, never the other way."""
        if self.group:
            last = self.group[-1][0]
            body = pickle.dumps(self.group, pickle.HIGHEST_PROTOCOL)
            write_atomic(self.spool / _name(last), body)
            with self.lock:
                self.files.append(last)
                for lsn, _ts, _xid, _relations, messages in self.group:
                    self.commits.append(lsn)
                    self.rows.append(len(messages))
                    self.pending += len(messages)
            self.group, self.grouped = [], 0
        if covered > self.seen:
            self.seen = covered
            write_atomic(self.spool / COVERED, str(covered).encode())
        self.flushed_at = time.monotonic()


def replication_connection(cfg: dict):
    """A psycopg2 logical replication connection, bounded like every other connection."""
    import psycopg2
    from psycopg2.extras import LogicalReplicationConnection

    params = libpq_params(cfg, "connectql-cdc")
    try:
        return psycopg2.connect(**params, connection_factory=LogicalReplicationConnection)
    except psycopg2.OperationalError as e:
        raise connect_error(e, cfg) from None
