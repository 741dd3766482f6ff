"""What the crash tests share, whatever the database: `connectql run` workers started in their own
session and killed with SIGKILL (with their JVM and Spark's Python workers), waits for a restarted
worker to catch up, reading the change stream, the assertions that no change appears twice and
that every committed transaction's changes are in it exactly once, and a writer that commits a
steady mix of inserts, updates, deletes and primary-key changes and remembers what it committed.

The two scenarios are here too, each a test of its own in every database's crash test module:

1. `kill_during_snapshot`: the kill lands during the snapshot; the source changes while the second
   worker resumes the snapshot and after it has finished;
2. `kill_during_change_capture`: the kill lands while the source streams changes from its change
   log, with the writer committing throughout (also while no worker runs, so the new one starts
   with a backlog).

A change in the stream is identified by (__pos, __op, key): the 'd' + 'c' pair of a primary-key
change share a __pos. Snapshot rows (__op = 'r') may be re-read when a snapshot chunk is replayed
after a restart; no other row may appear twice. A transaction is matched by the id its database
puts in __source (PostgreSQL's xid, MariaDB's GTID).

A pipeline `p` is a dict: "home" (the connectql home) and "logs" (a folder for the workers'
output); for the scenarios also "script" (batch rows -> a script creating source `src` of table
items into stream `changes` and sink `dst` from it), "fill" (total -> create items with ids
1 .. total), "source" and "target" (-> a checksum of items that starts with the row count; the
target's is None until the sink creates the table), "writer" ((live ids, next id, seed) -> a
Writer on the source) and "txn" (the transaction id's field in __source)."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from tests.helpers import read_parquet_rows, wait_until
from tests.servers import stat_fields

ROOT = Path(__file__).resolve().parents[1]
CONNECTQL = [sys.executable, "-m", "connectql.cli"]


# ------------------------------------------------------------------ worker processes


def checkout_env(**changes: str | None) -> dict[str, str]:
    """This process's environment with this checkout first on PYTHONPATH, so that a `connectql`
    process and Spark's Python workers import connectql from here, whichever checkout the
    interpreter has installed; a change to None removes the variable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def start_connectql(home: Path, args: list[str], logs: Path, tag: str, env=None, cwd=ROOT):
    """`connectql --home home *args` in its own session, so that the JVM and Spark's Python
    workers it starts can be killed with it; its output goes to logs/tag.out and .err."""
    with (logs / f"{tag}.out").open("w") as out, (logs / f"{tag}.err").open("w") as err:
        return subprocess.Popen(
            [*CONNECTQL, "--home", str(home), *args],
            cwd=cwd,
            env=env or checkout_env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )


@contextmanager
def server_process(home: Path, logs: Path, tag="server", env=None, cwd=ROOT, token=None):
    """`connectql --home home server --port 0` in its own session until the block ends: yields
    (process, url) once its server.json names it and GET /health answers (with `token`), then
    stops it (stop_server)."""
    logs.mkdir(parents=True, exist_ok=True)
    proc = start_connectql(home, ["server", "--port", "0"], logs, tag, env=env, cwd=cwd)
    try:
        yield (
            proc,
            wait_until(
                lambda: _answering(home, logs, tag, proc, token), 120, what=f"a server on {home}"
            ),
        )
    finally:
        stop_server(proc)


def _answering(home: Path, logs: Path, tag: str, proc: subprocess.Popen, token) -> str | None:
    """The server's URL once it answers /health; fails at once if it has exited."""
    assert proc.poll() is None, "the server exited\n" + describe(logs, home, tag)
    try:
        found = json.loads((home / "server.json").read_text())
        if found["pid"] != proc.pid:
            return None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(found["url"] + "/health", headers=headers)
        with urllib.request.urlopen(request, timeout=5) as resp:
            return found["url"] if resp.status == 200 else None
    except (OSError, ValueError, KeyError):
        return None


def stop_server(proc: subprocess.Popen) -> bool:
    """SIGTERM, then SIGKILL for whatever of it is left after 60 s; whether it stopped by itself."""
    by_itself = True
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            by_itself = False
    kill_everything(proc)
    return by_itself


def start_worker(home: Path, script: Path, logs: Path, tag: str) -> subprocess.Popen:
    """`connectql run script` (see start_connectql)."""
    return start_connectql(home, ["run", str(script)], logs, tag)


def session_members(sid: int) -> list[int]:
    """Pids of the live processes in session `sid` (the worker, its JVM, Spark's daemons)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = stat_fields(stat)
        # after the command: state, ppid, pgrp, session; a zombie (Z) is already dead
        if fields and int(fields[3]) == sid and fields[0] != "Z":
            pids.append(int(stat.parent.name))
    return pids


def kill_everything(proc: subprocess.Popen) -> None:
    """SIGKILL the worker's process group, then any process left in its session (the PySpark
    daemon moves to a process group of its own), and reap the worker."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while (left := session_members(proc.pid)) and time.monotonic() < deadline:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)
    assert not session_members(proc.pid), "processes of the killed worker are still alive"


def describe(logs: Path, home: Path, *tags: str) -> str:
    """What the workers printed and logged, for a failure message."""
    parts = [f"--- {f.name}\n{f.read_text()[-3000:]}" for t in tags for f in logs.glob(f"{t}.*")]
    worker_log = home / "worker.log"
    if worker_log.exists():
        parts.append(f"--- worker.log\n{worker_log.read_text()[-3000:]}")
    return "\n".join(parts)


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


def catch_up(second: subprocess.Popen, p: dict, target: Callable, expected, started: float):
    """Wait until `target()` (the target table's checksum) equals `expected` (the source's)
    while the worker lives, then stop the worker."""

    def caught_up():
        alive(second, p, "second")
        return target() == expected

    try:
        wait_until(caught_up, timeout=120, every=0.5, what="target equal to source")
    finally:
        print(f"target {target()}, source {expected}")
    print(f"target equals source at {time.monotonic() - started:.0f}s")
    stop(second, p, "second")


def assert_resumed(p: dict, names: str = "dst, src") -> None:
    out = " ".join((p["logs"] / "second.out").read_text().split())
    assert f"resumed from checkpoints: {names}" in out


# ------------------------------------------------------------------ the stream


def stream_count(p: dict, where: str = "true") -> int:
    got = read_parquet_rows(p["home"] / "streams/changes", f"SELECT count(*) FROM t WHERE {where}")
    return got[0][0] if got else 0


def snapshot_counts(p: dict, total: int) -> tuple[int, int, int]:
    """Snapshot rows in the stream: all of them, distinct ids, distinct ids of the first
    `total` (the rows there before the snapshot)."""
    return read_parquet_rows(
        p["home"] / "streams/changes",
        f"SELECT count(*), count(DISTINCT id), count(DISTINCT id) FILTER (WHERE id <= {total})"
        " FROM t WHERE __op = 'r'",
    )[0]


def stream_changes(p: dict, txn_field: str) -> list[tuple[str, str, int, object]]:
    """(__pos, __op, id, transaction id) of every committed non-snapshot row of the stream; the
    transaction id is `txn_field` of __source."""
    rows = read_parquet_rows(
        p["home"] / "streams/changes", "SELECT __pos, __op, id, __source FROM t WHERE __op <> 'r'"
    )
    return [(pos, op, key, json.loads(source)[txn_field]) for pos, op, key, source in rows or []]


def assert_no_duplicate_change(changes: list[tuple]) -> None:
    twice = {
        c: n for c, n in Counter((pos, op, key) for pos, op, key, _ in changes).items() if n > 1
    }
    assert not twice, f"{len(twice)} changes appear more than once in the stream, e.g. " + str(
        sorted(twice.items())[:10]
    )


def assert_every_transaction_once(changes, committed: list[tuple[object, list]]) -> None:
    """The stream's changes are exactly the committed transactions' (txn, op, id) changes."""
    expected = Counter((txn, op, key) for txn, ops in committed for op, key in ops)
    seen = Counter((txn, op, key) for _pos, op, key, txn in changes)
    missing, extra = expected - seen, seen - expected
    assert not missing and not extra, (
        f"{sum(expected.values())} changes committed, {sum(seen.values())} in the stream;"
        f" missing {sum(missing.values())}, e.g. {sorted(missing)[:10]};"
        f" unexpected {sum(extra.values())}, e.g. {sorted(extra)[:10]}"
    )
    # and each transaction's changes share one commit position: __pos without its sequence
    by_txn: dict[object, set[str]] = {}
    for pos, _op, _key, txn in changes:
        by_txn.setdefault(txn, set()).add(pos.rsplit("-", 1)[0])
    split = {x: s for x, s in by_txn.items() if len(s) > 1}
    assert not split, f"transactions with several commit positions: {sorted(split.items())[:5]}"


def assert_inserts_once(changes, committed) -> None:
    inserted = sum(op == "c" for _txn, ops in committed for op, _key in ops)
    assert sum(op == "c" for _pos, op, _key, _txn in changes) == inserted


# ------------------------------------------------------------------ the source's writer


class Writer:
    """Commits transactions of inserts, updates, deletes and primary-key changes on items and
    remembers, for each committed one, its id and its changes as the stream must show them.

    A database supplies `conn` (a connection to the source), `in_transaction(body)`: run
    body(execute) in one transaction, commit it and return the transaction's id as the stream's
    __source shows it; and the statements (each with %s parameters) as class attributes."""

    INSERT = "INSERT INTO items VALUES (%s, %s, %s, %s, now())"  # id, name, qty, price
    UPDATE = ""  # id: qty + 1, name + '+', price + 0.01, updated = the time now
    DELETE = "DELETE FROM items WHERE id = %s"
    REKEY = "UPDATE items SET id = %s WHERE id = %s"  # new id, old id

    def __init__(self, live: range, next_id: int, seed: int):
        self.live = list(live)
        self.next_id = next_id
        self.rng = random.Random(seed)
        self.committed: list[tuple[object, list[tuple[str, int]]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.conn = None
        self._closed = False

    def in_transaction(self, body: Callable) -> object:
        raise NotImplementedError

    def close(self) -> None:
        self.conn.close()

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

        def body(execute):
            for _ in range(rng.randint(1, 4)):
                kind = rng.choices("cudk", weights=(4, 5, 2, 1))[0]
                if kind == "c":
                    new = self._new_id()
                    price = rng.randint(1, 99999) / 100
                    execute(self.INSERT, (new, f"new {new}", rng.randint(0, 99), price))
                    ops.append(("c", new))
                    born.append(new)
                elif kind == "u":
                    key = self.live[rng.randrange(len(self.live))]
                    execute(self.UPDATE, (key,))
                    ops.append(("u", key))
                elif kind == "d":
                    key = self._take()
                    execute(self.DELETE, (key,))
                    ops.append(("d", key))
                else:  # a new primary key: the stream shows a delete and an insert
                    old, new = self._take(), self._new_id()
                    execute(self.REKEY, (new, old))
                    ops.extend((("d", old), ("c", new)))
                    born.append(new)

        txn = self.in_transaction(body)
        self.live += born  # only now: the transaction committed
        self.committed.append((txn, ops))

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
        if not self._closed:
            self._closed = True
            self.close()
        assert self.error is None, f"the writer failed: {self.error!r}"


# ------------------------------------------------------------------ the scenarios


def kill_during_snapshot(p: dict, total: int, chunk: int, changes: int) -> None:
    """Kill the worker after a few of the snapshot's chunks of `chunk` rows; `changes`
    transactions while the second worker resumes the snapshot and as many after it."""
    p["fill"](total)
    script = p["script"](chunk)
    started = time.monotonic()

    def in_target() -> int:
        return (p["target"]() or (0,))[0]

    # 1. the first worker, killed once a few snapshot chunks are in the stream and the target
    with worker(p, script, "first") as first:

        def mid_snapshot():
            alive(first, p, "first")
            snapped = stream_count(p, "__op = 'r'")
            assert snapped < total, "the snapshot finished before the kill: make it longer"
            return snapped >= 2 * chunk and (in_target() > 0 or snapped >= total // 2) and snapped

        wait_until(mid_snapshot, timeout=120, every=0.1, what="snapshot rows in the stream")
        kill_everything(first)
    assert first.returncode == -signal.SIGKILL
    at_kill = stream_count(p, "__op = 'r'"), in_target()
    print(
        f"\nkilled at {time.monotonic() - started:.0f}s: {at_kill[0]} snapshot rows in the"
        f" stream, {at_kill[1]} in the target"
    )
    assert 0 < at_kill[0] < total

    # 2. the second worker resumes the snapshot; the source changes meanwhile (the changes on
    # rows already read and on rows not read yet) and after the snapshot is done
    writer = p["writer"](range(1, total + 1), 10 * total, 1)
    try:
        with worker(p, script, "second") as second:
            for _ in range(changes):
                writer.transaction()

            def snapshot_done():
                alive(second, p, "second")
                return stream_count(p, "__op <> 'r'") > 0

            wait_until(snapshot_done, timeout=150, every=0.5, what="changes after the snapshot")
            print(f"snapshot done at {time.monotonic() - started:.0f}s")
            for _ in range(changes):
                writer.transaction()
            writer.stop()
            expected = p["source"]()
            catch_up(second, p, p["target"], expected, started)
    finally:
        writer.stop()
    assert_resumed(p)

    # 3. the stream: the snapshot whole (a replayed chunk may be read twice), each change once
    snap = snapshot_counts(p, total)
    print(f"snapshot rows in the stream: {snap[0]} ({snap[0] - snap[1]} read twice)")
    # every original row that no writer transaction deleted or re-keyed was read
    removed = {key for _txn, ops in writer.committed for op, key in ops if op == "d"}
    assert snap[2] >= total - len(removed), snap
    assert snap[0] - snap[1] <= chunk, f"more than one chunk read twice: {snap}"
    changes = stream_changes(p, p["txn"])
    assert_no_duplicate_change(changes)
    assert_every_transaction_once(changes, writer.committed)
    assert in_target() == expected[0]


def kill_during_change_capture(p: dict, total: int, batch_rows: int) -> None:
    """Snapshot `total` rows, then kill the worker while a writer commits 50 transactions a
    second; the writer goes on until the second worker has resumed."""
    p["fill"](total)
    script = p["script"](batch_rows)
    started = time.monotonic()
    writer = p["writer"](range(1, total + 1), 10 * total, 2)
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
            expected = p["source"]()
            print(
                f"writer stopped at {time.monotonic() - started:.0f}s after"
                f" {len(writer.committed)} transactions"
            )
            catch_up(second, p, p["target"], expected, started)
    finally:
        writer.stop()

    # 3. the stream holds exactly the committed transactions' changes, each once
    changes = stream_changes(p, p["txn"])
    assert_no_duplicate_change(changes)
    assert_every_transaction_once(changes, writer.committed)
    assert_inserts_once(changes, writer.committed)


def killed_once(home, script, logs, ready) -> None:
    """A worker on `script`, killed with SIGKILL (with its JVM) once `ready()` is true."""
    first = start_worker(home, script, logs, "first")
    try:

        def live_and_ready():
            assert first.poll() is None, describe(logs, home, "first")
            return ready()

        wait_until(live_and_ready, timeout=180, every=0.05, what="work before the kill")
    finally:
        kill_everything(first)
    assert first.returncode == -signal.SIGKILL


def resumed_until(home, script, logs, done, what: str) -> None:
    """A new worker on the same home and script until `done()`, then stopped with Ctrl-C."""
    second = start_worker(home, script, logs, "second")
    try:

        def live_and_done():
            assert second.poll() is None, describe(logs, home, "second")
            return done()

        wait_until(live_and_done, timeout=300, every=0.5, what=what)
        second.send_signal(signal.SIGINT)
        assert second.wait(timeout=120) == 0, describe(logs, home, "second")
    finally:
        kill_everything(second)


def kill_and_count(
    home, script, logs, ids, total: int, before: int, on_start=None, on_restart=None
):
    """A `connectql run` worker on `script` killed with SIGKILL once `ids()` (the ids in the
    stream) holds `before`, then a second one until every id of range(total) is there, stopped
    with SIGTERM. `on_start()` runs after the first starts, `on_restart()` after the second does.
    Asserts that no id is lost; returns how many are there more than once."""
    first = start_worker(home, script, logs, "first")
    try:
        if on_start:
            on_start()
        wait_until(lambda: len(ids()) >= before, 180, what="records before the kill")
    finally:
        kill_everything(first)
    assert len(set(ids())) < total, "every record was in before the kill: make it bigger"
    second = start_worker(home, script, logs, "second")
    try:
        if on_restart:
            on_restart()
        wait_until(lambda: set(ids()) >= set(range(total)), 300, what="every record")
    finally:
        second.terminate()
        try:
            second.wait(timeout=120)
        finally:
            kill_everything(second)
    counts = Counter(ids())
    assert set(counts) == set(range(total))  # none lost
    duplicated = sum(n - 1 for n in counts.values())
    print(f"{duplicated} duplicates of {total} records after the kill")
    return duplicated
