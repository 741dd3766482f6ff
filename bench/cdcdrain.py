"""Issue 55's backlog drain: how fast a cdc source and its PostgreSQL sink catch up with a
backlog of changes, against the log readers that bound it, in one run.

    .venv/bin/python -m bench.cdcdrain [--source postgres|mysql|both] [--rows 1000000]
                                       [--changes 500000] [--txn 1000] [--keep]

For each source database, private servers (bench.postgres / bench.mysql: fsync-light) hold
srcdb.orders with --rows rows. A cdc source (`batch.rows` at its default) and a continuous upsert
sink into an empty PostgreSQL table start on a warm worker and catch up with the snapshot; then
the source is PAUSEd and --changes changes are committed in --txn-change transactions, each 60%
UPDATE (a range of ids), 20% INSERT (new ids) and 20% DELETE (a range of other ids), so the
source's log holds a backlog. Timed, in one run:

- the database applying the changes (its own rate, the ceiling of any follower);
- PostgreSQL: `pg_recvlogical` (pgoutput, a slot created just before the changes) reading the
  backlog to its end LSN; MariaDB: `mariadb-binlog --read-from-remote-server
  --base64-output=decode-rows -v` over the backlog's positions (its row lines counted: they must
  equal --changes) and a bare python-mysql-replication loop decoding every row (counted too);
- connectql: from RESUME until the target's row count and checksum equal the source's
  (the sink rides the source: end to end).

Figures are changes/s; the machine's load moves them, so compare within one run."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from bench.common import (
    Connectql,
    check_text,
    console,
    execute,
    load,
    tree_cpu,
    tree_cpu_since,
)
from connectql.connectors.relational.sink import PROGRESS_TABLE

TIMEOUT_S = 1800.0
SRC, DST = "cdc_src", "cdc_dst"


@dataclass
class Result:
    method: str
    seconds: float
    changes: int
    check: str
    note: str = ""

    @property
    def rate(self) -> float:
        return self.changes / self.seconds if self.seconds else float("nan")


@dataclass
class Plan:
    """The backlog: `txns` transactions of `per` changes, 60/20/20 update/insert/delete."""

    rows: int
    changes: int
    per: int

    @property
    def txns(self) -> int:
        return self.changes // self.per

    def statements(self, i: int) -> list[tuple[str, int, int]]:
        """(kind, first id, last id) of transaction i: deletes from id 1 up, updates above every
        id deleted, inserts above every id the table held."""
        upd, ins = self.per * 6 // 10, self.per * 2 // 10
        dele = self.per - upd - ins
        d0 = 1 + i * dele
        u0 = 1 + self.txns * dele + i * upd
        i0 = self.rows + 1 + i * ins
        return [("update", u0, u0 + upd - 1), ("insert", i0, i0 + ins - 1),
                ("delete", d0, d0 + dele - 1)]  # fmt: skip


PG_SQL = {
    "update": "UPDATE orders SET amount = amount + 1, status = 'upd' WHERE id BETWEEN {a} AND {b}",
    "insert": "INSERT INTO orders SELECT g, g % 1000, 1.50, 'ins', timestamp '2025-01-01'"
    " + g * interval '1 second' FROM generate_series({a}, {b}) g",
    "delete": "DELETE FROM orders WHERE id BETWEEN {a} AND {b}",
}
MY_SQL = {
    "update": "UPDATE orders SET amount = amount + 1, status = 'upd' WHERE id BETWEEN {a} AND {b}",
    "insert": "INSERT INTO orders SELECT seq, seq % 1000, 1.50, 'ins', CONCAT('n', seq),"
    " TIMESTAMP '2025-01-01 00:00:00' + INTERVAL seq SECOND FROM seq_{a}_to_{b}",
    "delete": "DELETE FROM orders WHERE id BETWEEN {a} AND {b}",
}


def apply(plan: Plan, execute: Callable[[str], None], commit: Callable[[], None], sql: dict):
    for i in range(plan.txns):
        for kind, a, b in plan.statements(i):
            execute(sql[kind].format(a=a, b=b))
        commit()


# --------------------------------------------------------------------------------------------
# connectql
# --------------------------------------------------------------------------------------------


def start_pair(cq: Connectql, rows: int, conn_src: str, conn_dst: str, target_info: str, check):
    run = cq.cdc(rows, conn_src, conn_dst, target_info, check, TIMEOUT_S, batch_rows=None)
    console.print(f"  snapshot: {run.rows:,} rows in {run.seconds:.1f} s: {run.check}")
    if not run.check.startswith("OK"):
        raise SystemExit(f"the snapshot did not arrive: {run.check}")


def pause(cq: Connectql) -> None:
    cq.run(f"PAUSE CONNECTOR {SRC}")
    deadline = time.monotonic() + 120
    while cq.worker.catalog.get_connector(SRC).state != "PAUSED":
        if time.monotonic() > deadline:
            raise SystemExit(f"{SRC} did not pause: {cq.problems([SRC])}")
        time.sleep(0.2)


def drain(cq: Connectql, changes: int, source_sum, target: str, target_sum, servers=()) -> Result:
    """RESUME, then time until the target equals the source; the CPU seconds this process's
    tree (the worker, Spark's JVM and Python workers) and the `servers` used meanwhile. The
    target's checksum (a pass over the whole table) is taken only once the sink has committed
    since the last one (its progress row in `target`, a cheap look every POLL_S): polled
    every POLL_S it would cost the target server a core of its own during the drain."""
    want = source_sum()
    roots = [os.getpid(), *(s._main_pid() for s in servers)]
    cpu = tree_cpu(roots)
    t0 = time.perf_counter()
    cq.run(f"RESUME CONNECTOR {SRC}")
    last_check, seen = t0, None
    while time.perf_counter() - t0 < TIMEOUT_S:
        committed = sink_progress(target)
        if committed != seen:
            seen = committed
            got = target_sum()
            if got == want:
                seconds = time.perf_counter() - t0
                note = f"{source_batches(cq, t0)}; {tree_cpu_since(roots, cpu)}"
                return Result(
                    "connectql (source + riding sink)", seconds, changes, check_text(got, want),
                    note,
                )  # fmt: skip
        if time.perf_counter() - last_check > 5:
            last_check = time.perf_counter()
            errors = cq.problems([SRC, DST], "RUNNING", "STARTING", "RESTARTING")
            if errors:
                return Result("connectql", last_check - t0, changes, f"FAIL: {errors}")
        time.sleep(POLL_S)
    return Result("connectql", TIMEOUT_S, changes, f"FAIL: not equal after {TIMEOUT_S:.0f} s")


POLL_S = 0.25


def sink_progress(target: str) -> tuple:
    """The sink's commits in the target so far (its progress rows)."""
    return tuple(execute(target, f"SELECT writer_id, batch_id, epoch FROM {PROGRESS_TABLE}"))


def source_batches(cq: Connectql, since_perf: float) -> str:
    since = time.time() - (time.perf_counter() - since_perf)
    sql = (
        "SELECT count(*), sum(input_rows), sum(duration_ms), max(input_rows) FROM connector_metrics"
        " WHERE connector = ? AND input_rows > 0 AND started_at >= to_timestamp(?)::TIMESTAMP"
    )
    rows = cq.worker.catalog.read(sql, [SRC, since - 1], figures=True)[1]
    n, total, ms, biggest = rows[0] if rows else (0, 0, 0, 0)
    if not n:
        return "source batches not recorded"
    return f"{n} source batches, {total:,} rows (largest {biggest:,}), {ms / 1000:.1f} s in batches"


# --------------------------------------------------------------------------------------------
# PostgreSQL
# --------------------------------------------------------------------------------------------


def postgres(args, tmp: Path) -> list[Result]:
    import psycopg

    from bench import postgres as pg

    dbs = pg.Databases()
    dbs.start()
    cq = None
    try:
        pg.fill_source(dbs, args.rows, 1000)
        src = dbs.info("srcdb")
        target = dbs.create("dstdb")
        cq = Connectql(tmp / "home-pg", "postgres")
        start_pair(cq, args.rows, dbs.options("srcdb"), dbs.options("dstdb"), target,
                   lambda: check_text(pg.checksum(target), pg.checksum(src)))  # fmt: skip
        pause(cq)
        with psycopg.connect(src, autocommit=True) as conn:
            conn.execute("CREATE PUBLICATION yard_pub FOR TABLE orders")
            conn.execute("SELECT pg_create_logical_replication_slot('yard', 'pgoutput')")
        plan = Plan(args.rows, args.changes, args.txn)
        applied, end = apply_pg(src, plan)
        results = [Result("PostgreSQL applying the changes", applied, plan.txns * plan.per, "-")]
        results.append(pg_recvlogical(dbs, end, plan.txns * plan.per))
        results.append(drain(cq, plan.txns * plan.per, lambda: pg.checksum(src), target,
                             lambda: pg.checksum(target), [dbs.server]))  # fmt: skip
        return results
    finally:
        if cq is not None:
            cq.close()
        dbs.stop()


def apply_pg(info: str, plan: Plan) -> tuple[float, str]:
    """The plan's changes committed on the PostgreSQL of `info`: (seconds they took, the end
    of WAL after them)."""
    import psycopg

    with psycopg.connect(info) as conn:
        t0 = time.perf_counter()
        apply(plan, conn.execute, conn.commit, PG_SQL)
        applied = time.perf_counter() - t0
        end = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
        conn.commit()
    return applied, end


def pg_recvlogical(dbs, end_lsn: str, changes: int) -> Result:
    s = dbs.server
    bin_dir = os.environ.get("CONNECTQL_PG_BIN", "/usr/lib/postgresql/15/bin")
    out = Path(tempfile.mkstemp(prefix="recvlogical-")[1])
    cmd = [f"{bin_dir}/pg_recvlogical", "-h", s.host, "-p", str(s.port), "-U", s.user,
           "-d", "srcdb", "--slot", "yard", "--start", "-E", end_lsn, "--no-loop",
           "-o", "proto_version=1", "-o", "publication_names=yard_pub", "-f", str(out)]  # fmt: skip
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    seconds = time.perf_counter() - t0
    size = out.stat().st_size
    out.unlink()
    check = "OK (read to the end LSN)" if done.returncode == 0 else f"FAIL: {done.stderr[-300:]}"
    return Result("pg_recvlogical (pgoutput), to the end LSN", seconds, changes, check,
                  f"{size / 2**20:,.0f} MB of messages")  # fmt: skip


# --------------------------------------------------------------------------------------------
# MariaDB
# --------------------------------------------------------------------------------------------


def mysql(args, tmp: Path) -> list[Result]:
    from bench import mysql as my

    srv = my.Servers()
    srv.start()
    cq = None
    try:
        my.fill_source(srv, args.rows, 1000)
        target = srv.pg_create("dstdb")
        cq = Connectql(tmp / "home-my", "mysql")
        start_pair(cq, args.rows, srv.my_options(), srv.pg_options("dstdb"), target,
                   lambda: check_text(srv.pg_checksum(target), srv.my_checksum()))  # fmt: skip
        pause(cq)
        start = binlog_position(srv)
        plan = Plan(args.rows, args.changes, args.txn)
        conn = srv.my.connect("srcdb")
        try:
            cur = conn.cursor()
            t0 = time.perf_counter()
            apply(plan, cur.execute, conn.commit, MY_SQL)
            applied = time.perf_counter() - t0
        finally:
            conn.close()
        end = binlog_position(srv)
        n = plan.txns * plan.per
        results = [Result("MariaDB applying the changes", applied, n, "-")]
        results.append(mariadb_binlog(srv, start, end, n))
        results.append(replication_loop(srv, start, end, n))
        results.append(
            drain(
                cq, n, srv.my_checksum, target, lambda: srv.pg_checksum(target), [srv.my, srv.pg]
            )  # fmt: skip
        )
        return results
    finally:
        if cq is not None:
            cq.close()
        srv.stop()


def binlog_position(srv) -> tuple[str, int]:
    file, pos = srv.my_rows("SHOW MASTER STATUS")[0][:2]
    return str(file), int(pos)


def mariadb_binlog(srv, start: tuple[str, int], end: tuple[str, int], changes: int) -> Result:
    s = srv.my
    if start[0] != end[0]:
        return Result(
            "mariadb-binlog", float("nan"), changes, "FAIL: the backlog spans binlog files"
        )
    cmd = ["mariadb-binlog", "--no-defaults", "--read-from-remote-server", "-h", s.host,
           "-P", str(s.port), "-u", s.user, "--base64-output=decode-rows", "-v",
           f"--start-position={start[1]}", f"--stop-position={end[1]}", start[0]]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    rows = sum(1 for line in proc.stdout if re.match(rb"### (INSERT|UPDATE|DELETE) ", line))
    err = proc.stderr.read().decode(errors="replace")
    proc.wait()
    seconds = time.perf_counter() - t0
    ok = proc.returncode == 0 and rows == changes
    check = (
        "OK (every row counted)"
        if ok
        else f"FAIL: {rows:,} rows, exit {proc.returncode} {err[-200:]}"
    )
    return Result("mariadb-binlog --base64-output=decode-rows -v", seconds, changes, check)


def replication_loop(srv, start: tuple[str, int], end: tuple[str, int], changes: int) -> Result:
    """A bare python-mysql-replication loop: every row of the backlog decoded."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    s = srv.my
    settings = {"host": s.host, "port": s.port, "user": s.user, "passwd": ""}
    t0 = time.perf_counter()
    stream = BinLogStreamReader(
        connection_settings=settings, server_id=4242, log_file=start[0], log_pos=start[1],
        resume_stream=True, blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
    )  # fmt: skip
    rows = 0
    try:
        for ev in stream:
            if (stream.log_file, ev.packet.log_pos) > (end[0], end[1]):
                break
            rows += sum(1 for r in ev.rows if r)
    finally:
        stream.close()
    seconds = time.perf_counter() - t0
    check = "OK (every row decoded)" if rows == changes else f"FAIL: {rows:,} rows"
    return Result("python-mysql-replication loop, rows decoded", seconds, changes, check)


# --------------------------------------------------------------------------------------------


def table(title: str, results: list[Result]) -> Table:
    t = Table(title=title)
    for col in ("method", "seconds", "changes/s", "check", "note"):
        t.add_column(col, justify="right" if col in ("seconds", "changes/s") else "left")
    for r in results:
        t.add_row(r.method, f"{r.seconds:.1f}", f"{r.rate:,.0f}", r.check, r.note)
    return t


def arguments(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench.cdcdrain", description=__doc__.split("\n\n")[0])
    p.add_argument("--source", choices=["postgres", "mysql", "both"], default="both")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--changes", type=int, default=500_000)
    p.add_argument("--txn", type=int, default=1000, help="changes per transaction")
    p.add_argument("--keep", action="store_true")
    args = p.parse_args(argv)
    if args.rows < args.changes * 8 // 10 or args.txn < 5:
        p.error("--rows must be at least 0.8 x --changes and --txn at least 5")
    return args


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    tmp = Path(tempfile.mkdtemp(prefix="connectql-cdcdrain-"))
    console.print(f"cdc drain: {args.changes:,} changes over {args.rows:,} rows, load {load()}")
    failed = False
    try:
        for name, run in (("postgres", postgres), ("mysql", mysql)):
            if args.source in (name, "both"):
                results = run(args, tmp)
                console.print(table(f"{name}: a backlog of {args.changes:,} changes", results))
                failed |= any(r.check.startswith("FAIL") for r in results)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            console.print(f"kept {tmp}")
    console.print(f"load at the end: {load()}")
    return 1 if failed else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
