"""Issue 55's PostgreSQL change path outside Spark, step by step, on a backlog like
bench.cdcdrain's: where a drain's time goes in connectql's own code.

    .venv/bin/python -m bench.cdcdrain ...   (end to end, in Spark)
    .venv/bin/python -m bench.pgchanges [--rows 200000] [--changes 200000] [--txn 1000]
                                        [--batch-rows 100000] [--repeat 2] [--profile N]

A private PostgreSQL (bench.postgres) holds srcdb.orders with --rows rows; a connectql slot and
publication (cdc.ensure_slot) are made, then --changes changes are committed as bench.cdcdrain
commits them (60% UPDATE, 20% INSERT, 20% DELETE, --txn changes a transaction). Timed, each
from the slot's start to the backlog's last commit (the slot is never confirmed, so each step
reads the same backlog again):

- `pg_recvlogical` (pgoutput, its own slot made before the changes) to the end LSN: the floor;
- a bare psycopg2 replication loop: every message read and copied to bytes, nothing else;
- the tailer (walstream.Tailer, as the source process runs it): the loop plus framing the
  captured tables' messages and writing the spool files;
- a batch's read (what read() does in a Spark worker): the spool read back
  (walstream.read_spool) and its changes made into Arrow change rows (cdc.change_batches) in
  windows of --batch-rows changes, as the tailer plans them; each window's rows checked
  (count of each op against the backlog's).

--profile N: cProfile of the read, its N most expensive functions (by own time)."""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import select
import shutil
import tempfile
import time
from pathlib import Path

import psycopg
from pyspark.sql.types import (
    DecimalType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
)

from bench import postgres as pg
from bench.cdcdrain import Plan, apply_pg, pg_recvlogical
from bench.common import console, load
from connectql.connectors.postgres import cdc, walstream
from connectql.connectors.postgres.pgoutput import Decoder
from connectql.connectors.postgres.source import ReaderConfig

SLOT = "connectql_pgchanges"
SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("customer", IntegerType()),
        StructField("amount", DecimalType(12, 2)),
        StructField("status", StringType()),
        StructField("created", TimestampNTZType()),
        *(StructField(n, t) for n, t in (
            ("__op", StringType()), ("__ts_ms", LongType()), ("__pos", StringType()),
            ("__source", StringType()), ("__unchanged", StringType()))),
    ]
)  # fmt: skip


def bare_loop(cfg, start: int, changes: int) -> tuple[float, int]:
    """(seconds, the last commit's end LSN) of a plain read of `changes` change messages and
    the commit after them."""
    conn = walstream.replication_connection(cfg.connection)
    try:
        cur = conn.cursor()
        t0 = time.perf_counter()
        cur.start_replication(
            slot_name=cfg.slot, decode=False, start_lsn=start,
            options={"proto_version": "1", "publication_names": cfg.slot},
        )  # fmt: skip
        seen = 0
        while True:
            msg = cur.read_message()
            if msg is None:
                select.select([cur], [], [], 0.05)
                continue
            data = bytes(msg.payload)
            kind = data[:1]
            if kind in (b"I", b"U", b"D"):
                seen += 1
            elif kind == b"C" and seen >= changes:
                return time.perf_counter() - t0, int.from_bytes(data[10:18], "big")
    finally:
        conn.close()


def tail(cfg, spool: Path, start: int, last: int) -> tuple[float, walstream.Tailer]:
    shutil.rmtree(spool, ignore_errors=True)
    t0 = time.perf_counter()
    tailer = walstream.Tailer(cfg, spool, start, {"public.orders"}, 10**9)
    while tailer.seen < last:
        if tailer.error is not None:
            raise tailer.error
        time.sleep(0.01)
    seconds = time.perf_counter() - t0
    tailer.close()
    return seconds, tailer


def windows(tailer: walstream.Tailer, start: int, rows: int) -> list[tuple[int, int]]:
    tailer.limit, out, at = rows, [], start
    while True:
        w = tailer.window(at)
        if w.last_relevant is None or w.last_relevant <= at:
            return out
        out.append((at, w.last_relevant))
        at = w.last_relevant


def read(cfg, conn, spool: Path, ranges, want: dict[str, int]) -> tuple[float, float, str]:
    """(seconds reading the spool, seconds in all, check) of every window's change rows."""
    spooled = total = 0.0
    ops: dict[str, int] = {}
    outs = []
    for lsn_from, lsn_to in ranges:
        t0 = time.perf_counter()
        txns = list(walstream.read_spool(spool, lsn_from, lsn_to))
        t1 = time.perf_counter()
        decoder = Decoder(cdc.type_names(conn))
        out = list(cdc.change_batches(cfg, {"orders": SCHEMA}, {"orders": ["id"]}, txns, decoder))
        t2 = time.perf_counter()
        spooled, total = spooled + t1 - t0, total + t2 - t0
        outs.extend(out)
    for _table, batch in outs:
        for count in batch.column("__op").value_counts().to_pylist():
            ops[count["values"]] = ops.get(count["values"], 0) + count["counts"]
    check = "OK" if ops == want else f"FAIL: {ops} != {want}"
    return spooled, total, check


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.pgchanges", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--changes", type=int, default=200_000)
    p.add_argument("--txn", type=int, default=1000)
    p.add_argument("--batch-rows", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--profile", type=int, default=0)
    args = p.parse_args(argv)
    console.print(
        f"pg change path: {args.changes:,} changes over {args.rows:,} rows, load {load()}"
    )
    tmp = Path(tempfile.mkdtemp(prefix="connectql-pgchanges-"))
    dbs = pg.Databases()
    dbs.start()
    try:
        pg.fill_source(dbs, args.rows, 1000)
        info = dbs.info("srcdb")
        s = dbs.server
        cfg = ReaderConfig(
            connection={"host": s.host, "port": s.port, "user": s.user, "database": "srcdb"},
            schema="public", table="orders", query=None, mode="cdc", slot=SLOT,
        )  # fmt: skip
        conn = psycopg.connect(info, autocommit=True)
        start = cdc.ensure_slot(conn, SLOT, "public", ["orders"], "refuse", "bench")
        conn.execute("CREATE PUBLICATION yard_pub FOR TABLE orders")
        conn.execute("SELECT pg_create_logical_replication_slot('yard', 'pgoutput')")
        plan = Plan(args.rows, args.changes, args.txn)
        applied, end = apply_pg(info, plan)
        n, per = plan.txns * plan.per, plan.per
        upd, ins = per * 6 // 10, per * 2 // 10
        # an UPDATE keeps its key: 'u'; the bench's rows are all there
        want = {"u": upd * plan.txns, "c": ins * plan.txns, "d": (per - upd - ins) * plan.txns}

        def line(what: str, seconds: float, note: str = "") -> None:
            console.print(
                f"  {what:<44} {seconds:6.2f} s  {n / seconds:>9,.0f} changes/s  {note}"
                f"  (load {load()})"
            )

        line("PostgreSQL applying the changes", applied)
        r = pg_recvlogical(dbs, end, n)
        line("pg_recvlogical to the end LSN", r.seconds, r.check)
        for _ in range(args.repeat):
            seconds, last = bare_loop(cfg, start, n)
            line("bare psycopg2 replication loop", seconds)
        spool = tmp / "spool"
        for _ in range(args.repeat):
            seconds, tailer = tail(cfg, spool, start, last)
            line("tailer (loop + framing + spool files)", seconds)
        ranges = windows(tailer, start, args.batch_rows)
        for _ in range(args.repeat):
            spooled, total, check = read(cfg, conn, spool, ranges, want)
            line(f"read: the spool back ({len(ranges)} windows)", spooled)
            line("read: spool + change rows in Arrow", total, check)
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            read(cfg, conn, spool, ranges, want)
            prof.disable()
            out = io.StringIO()
            pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.profile)
            console.print(out.getvalue(), markup=False, highlight=False)
        cdc.drop_slot(conn, SLOT)
        conn.close()
    finally:
        dbs.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    console.print(f"load at the end: {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
