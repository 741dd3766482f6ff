"""PostgreSQL bench: connectql's postgres source and sink against `psql COPY | psql COPY`.

    .venv/bin/python -m bench.postgres [--rows 1000000] [--skip-latency] [--skip-breakdown]
                                       [--seconds 30] [--keep]

Everything runs on one private PostgreSQL cluster (tests.pgserver.PrivatePostgres: wal_level
logical, fsync off, synchronous_commit off) started for the bench and removed at the end, so the
yardstick and connectql share a server. The source table is

    srcdb.orders (id bigint primary key, customer int, amount numeric(12,2), status varchar(16),
                  created timestamp)

filled with --rows rows by generate_series (about 1% NULL statuses, microsecond timestamps),
then VACUUM (FREEZE, ANALYZE) so that no reader pays for hint bits. Every target is an empty
table with the same definition (primary key included), created before its run.

1. Snapshot + sink throughput (rows/s, and the time ratio against the pipe; goal: within 3x):
   - pipe: `psql -c "COPY (SELECT * FROM orders) TO STDOUT" | psql -c "COPY orders FROM STDIN"`,
     wall clock, run twice (before and after connectql's bulk run); the yardstick is their mean.
   - (a) connectql bulk: `mode = 'bulk', run = 'once'` source into a stream, `run = 'once'`
     sink into another database; from before the first CREATE until both are FINISHED
     (Worker.wait_for_once). The Worker's SparkSession is started first and its start time is
     shown apart; a warm-up of WARMUP_ROWS rows runs the same path first (a session's first
     jobs are slower, NOTES.md) and is shown but not counted.
   - (b) connectql cdc: the default mode (snapshot in 'batch.rows' chunks, then changes) with a
     continuous sink; from before the first CREATE until the target holds all rows (count polled
     every POLL_COUNT_S).
   Each target is checked by value: its row count and the sum of a 64-bit hash of each row's
   text equal the source's. The per-batch timings Spark reports (a StreamingQueryListener of the
   bench) split connectql's time into query start-up, source and sink batches, and inside them
   `latestOffset` (planning a chunk) and `addBatch` (reading and writing it).
2. Where the time goes, outside Spark (unless --skip-breakdown): the steps connectql's tasks run,
   timed one by one in this process with connectql's own functions, for the whole table: the
   server's side of the COPYs (psql to /dev/null: the pipe's SELECT * and the source's
   SELECT), the source's `COPY (SELECT ...) TO STDOUT (FORMAT csv)` read row by row through
   psycopg, the CSV -> Arrow conversion, the sink's Arrow -> CSV conversion, its COPY into an
   unlogged staging table, and its merge (DISTINCT ON + INSERT ... ON CONFLICT) into an empty
   target; a plain INSERT ... SELECT from the staging table is shown for comparison. The sink's
   steps run twice: with the bulk stream's rows, and with the same rows as the cdc snapshot
   writes them (plus __op, __ts_ms, __pos and a ~90-byte __source JSON per row).
3. CDC latency (unless --skip-latency): with (b)'s source and sink still running (default
   trigger: as fast as data arrives), one probe change first (the pipeline's first change after
   the snapshot, shown apart), then RATE changes/s for SECONDS s, each its own transaction with
   synchronous_commit = on: half inserts of new ids, half updates of distinct existing ids, so
   each change is one row whose `status` holds the change's marker. Its commit time is taken
   on the client when COMMIT returns; another thread polls the target every POLL_S for the
   pending ids (`WHERE id = ANY(...)`) and takes a change as visible at the start of the first
   poll that sees its marker (the poll's snapshot is taken then, so the figure is late by at
   most one poll interval). Reports p50 / p90 / p99 / max, changes observed against
   committed (goal: p50 < 1.5 s, p99 < 3 s), and then whether the target equals the source.
4. A summary: each metric, connectql, the yardstick, the ratio, the goal.
The machine's load moves all figures; compare connectql and the pipe within one run.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace

import psycopg
from rich.console import Console
from rich.table import Table

RATIO_GOAL = 3.0  # connectql time / pipe time
P50_GOAL_S = 1.5
P99_GOAL_S = 3.0
WARMUP_ROWS = 20_000
BATCH_ROWS = 200_000
TASKS = 2
RATE = 200  # changes per second in the latency section
SECONDS = 30
POLL_S = 0.05  # the latency poller's interval
POLL_COUNT_S = 0.25  # the cdc snapshot's target-count poll
DRAIN_S = 30  # after the last change, how long to wait for the rest to show
CONSISTENT_S = 120  # after the latency run, how long to wait for target == source
LIVE = ("STARTING", "RUNNING", "RESTARTING", "STALLED")  # a continuous connector not (yet) failed
SERVER_SETTINGS = {"max_wal_size": "4GB"}  # fewer checkpoints while loading 1M-row tables

TABLE_DDL = (
    "CREATE TABLE {name} (id bigint PRIMARY KEY, customer int, amount numeric(12,2),"
    " status varchar(16), created timestamp)"
)
FILL_SQL = """
SELECT setseed(0.42);
INSERT INTO orders
SELECT g,
       1 + (random() * 99999)::int,
       round((random() * 5000)::numeric, 2),
       CASE WHEN g % 97 = 0 THEN NULL
            ELSE (ARRAY['new', 'paid', 'shipped', 'delivered', 'cancelled'])[1 + g % 5] END,
       timestamp '2024-01-01' + random() * interval '365 days'
FROM generate_series(1, {n}) g;
"""
CHECKSUM_SQL = "SELECT count(*), coalesce(sum(hashtextextended(t::text, 0)), 0) FROM {name} t"

console = Console(width=140)


# --------------------------------------------------------------------------------------------
# The server and its databases
# --------------------------------------------------------------------------------------------


def execute(info: str, statement: str, params=None) -> list[tuple] | None:
    with psycopg.connect(info, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else None


def checksum(info: str, table: str = "orders") -> tuple[int, int]:
    count, total = execute(info, CHECKSUM_SQL.format(name=table))[0]
    return int(count), int(total)


def check_text(got: tuple[int, int], want: tuple[int, int]) -> str:
    if got == want:
        return f"OK ({got[0]:,} rows, checksum equal)"
    if got[0] != want[0]:
        return f"FAIL: {got[0]:,} rows, expected {want[0]:,}"
    return f"FAIL: {got[0]:,} rows but the checksum differs ({got[1]} != {want[1]})"


class Databases:
    """The private server and the bench's databases on it."""

    def __init__(self):
        from tests.pgserver import PrivatePostgres

        self.server = PrivatePostgres(extra_settings=SERVER_SETTINGS)

    def start(self) -> None:
        t0 = time.perf_counter()
        try:
            self.server.start()
        except (RuntimeError, OSError) as e:
            raise SystemExit(
                f"cannot start a private PostgreSQL (initdb/pg_ctl from"
                f" {os.environ.get('CONNECTQL_PG_BIN', '/usr/lib/postgresql/15/bin')};"
                f" set CONNECTQL_PG_BIN to use others): {e}"
            ) from None
        console.print(
            f"  private PostgreSQL on {self.server.host}:{self.server.port}"
            f" ({time.perf_counter() - t0:.1f} s)"
        )

    def stop(self) -> None:
        self.server.stop()

    def info(self, db: str) -> str:
        return self.server.conninfo(db)

    def create(self, db: str, table: str | None = "orders") -> str:
        from tests.pgserver import create_database

        info = create_database(self.server.conninfo(), db)
        if table:
            execute(info, TABLE_DDL.format(name=table))
        return info

    def options(self, db: str) -> str:
        s = self.server
        return f"host = '{s.host}', port = {s.port}, user = '{s.user}', database = '{db}'"


def fill_source(dbs: Databases, n: int, warm: int) -> tuple[int, int]:
    """srcdb.orders with n rows and srcdb.orders_warm with the first `warm` of them; returns the
    checksum of orders."""
    info = dbs.create("srcdb")
    t0 = time.perf_counter()
    with psycopg.connect(info, autocommit=True) as conn:
        conn.execute(FILL_SQL.format(n=int(n)))
        conn.execute(TABLE_DDL.format(name="orders_warm"))
        conn.execute("INSERT INTO orders_warm SELECT * FROM orders WHERE id <= %s", (warm,))
        conn.execute("VACUUM (FREEZE, ANALYZE) orders")
        conn.execute("VACUUM (FREEZE, ANALYZE) orders_warm")
        conn.execute("CHECKPOINT")
        size = conn.execute("SELECT pg_size_pretty(pg_total_relation_size('orders'))").fetchone()
    want = checksum(info)
    console.print(
        f"  srcdb.orders: {n:,} rows, {size[0]} with its index, filled and vacuumed in"
        f" {time.perf_counter() - t0:.1f} s"
    )
    return want


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass
class Run:
    method: str
    rows: int
    seconds: float
    check: str
    counted: bool = True
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.check.startswith("OK")


# --------------------------------------------------------------------------------------------
# The yardstick: psql COPY | psql COPY
# --------------------------------------------------------------------------------------------


def psql_command(dbs: Databases, db: str, command: str) -> list[str]:
    s = dbs.server
    return [
        "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", s.host, "-p", str(s.port),
        "-U", s.user, "-d", db, "-c", command,
    ]  # fmt: skip


def run_pipe(dbs: Databases, target_db: str, want: tuple[int, int], label: str) -> Run:
    info = dbs.create(target_db)
    out_cmd = psql_command(dbs, "srcdb", "COPY (SELECT * FROM orders) TO STDOUT")
    in_cmd = psql_command(dbs, target_db, "COPY orders FROM STDIN")
    with tempfile.TemporaryFile() as err_out:
        t0 = time.perf_counter()
        copy_out = subprocess.Popen(out_cmd, stdout=subprocess.PIPE, stderr=err_out)
        copy_in = subprocess.Popen(
            in_cmd, stdin=copy_out.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        copy_out.stdout.close()  # copy_in holds the read end: copy_out sees EPIPE if it dies
        _out, err_in = copy_in.communicate()
        copy_out.wait()
        seconds = time.perf_counter() - t0
        err_out.seek(0)
        errors = err_out.read().decode(errors="replace") + err_in.decode(errors="replace")
    if copy_out.returncode or copy_in.returncode:
        check = (
            f"FAIL: psql exited {copy_out.returncode} | {copy_in.returncode}:"
            f" {errors.strip()[:200]}"
        )
    else:
        check = check_text(checksum(info), want)
    return Run(label, want[0], seconds, check, note="psql 15, text format")


# --------------------------------------------------------------------------------------------
# Spark's per-batch timings
# --------------------------------------------------------------------------------------------


@dataclass
class Batch:
    batch_id: int
    start: float  # epoch s
    durations: dict[str, int]  # ms: triggerExecution, latestOffset, addBatch, ...
    rows: int
    end_offset: str | None

    @property
    def seconds(self) -> float:
        return self.durations.get("triggerExecution", 0) / 1000

    @property
    def end(self) -> float:
        return self.start + self.seconds


def progress_listener():
    """A StreamingQueryListener that keeps every batch's progress by query name."""
    from pyspark.sql.streaming import StreamingQueryListener

    class Listener(StreamingQueryListener):
        def __init__(self):
            self.batches: dict[str, list[Batch]] = defaultdict(list)
            self.lock = threading.Lock()

        def onQueryStarted(self, event):  # noqa: N802 (Spark's names)
            pass

        def onQueryProgress(self, event):  # noqa: N802
            try:
                p = event.progress
                start = datetime.fromisoformat(p.timestamp.replace("Z", "+00:00"))
                src = p.sources[0] if p.sources else None
                batch = Batch(
                    p.batchId,
                    start.timestamp(),
                    dict(p.durationMs),
                    int(p.numInputRows),
                    src.endOffset if src else None,
                )
                with self.lock:
                    self.batches[p.name].append(batch)
            except Exception as e:  # never break Spark's listener bus
                console.print(f"[red]  progress listener: {e}[/red]")

        def onQueryIdle(self, event):  # noqa: N802
            pass

        def onQueryTerminated(self, event):  # noqa: N802
            pass

        def of(self, name: str, since: float = 0.0, until: float = float("inf")) -> list[Batch]:
            with self.lock:
                return [b for b in self.batches.get(name, []) if since <= b.start < until]

        def wait_rows(self, name: str, rows: int, timeout: float = 15.0) -> None:
            """The listener bus runs behind the queries: wait until it has seen `rows` rows."""
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if sum(b.rows for b in self.of(name)) >= rows:
                    return
                time.sleep(0.1)

    return Listener()


@dataclass
class Phase:
    """One connector's share of a timed run, from Spark's progress reports."""

    connector: str
    started: float  # epoch s of the run's first CREATE
    batches: list[Batch]
    done_at: float | None = None  # epoch s: FINISHED, or when its work was complete

    def row(self) -> list[str]:
        work = [b for b in self.batches if b.rows > 0]
        if not self.batches:
            return [self.connector, "0", "0", "-", "-", "-", "-", "-", "-"]
        first = self.batches[0].start - self.started
        total = sum(b.seconds for b in self.batches)
        latest = sum(b.durations.get("latestOffset", 0) for b in self.batches) / 1000
        add = sum(b.durations.get("addBatch", 0) for b in self.batches) / 1000
        done = f"{self.done_at - self.started:.1f}" if self.done_at else "-"
        return [
            self.connector,
            f"{len(work)}/{len(self.batches)}",
            f"{sum(b.rows for b in self.batches):,}",
            f"{first:.1f}",
            done,
            f"{total:.1f}",
            f"{add:.1f}",
            f"{latest:.1f}",
            f"{total - add - latest:.1f}",
        ]


def phases_table(title: str, phases: list[Phase]) -> Table:
    table = Table(
        title=title,
        title_justify="left",
        caption="from Spark's progress reports; times in s. 1st batch / done: after the run's"
        " first CREATE (done: FINISHED, or its last row written); batches: with rows / all;"
        " addBatch: reading the input and writing it (for the sink: staging COPY and the merge"
        " in the driver's commit); latestOffset: finding the next chunk's bound",
        caption_justify="left",
    )
    for col in ("connector", "batches", "rows", "1st batch", "done", "in batches"):
        table.add_column(col, justify="right")
    for col in ("addBatch", "latestOffset", "other"):
        table.add_column(col, justify="right")
    for p in phases:
        table.add_row(*p.row())
    return table


# --------------------------------------------------------------------------------------------
# connectql
# --------------------------------------------------------------------------------------------

BULK_SQL = """
CREATE SOURCE CONNECTOR {src} FROM postgres INTO {stream} WITH (
  {conn_src}, table = '{table}', mode = 'bulk', run = 'once',
  'batch.rows' = {batch}, 'tasks.max' = {tasks});
CREATE SINK CONNECTOR {dst} TO postgres FROM {stream} WITH (
  {conn_dst}, table = 'orders', run = 'once', 'tasks.max' = {tasks});
"""
CDC_SQL = """
CREATE SOURCE CONNECTOR cdc_src FROM postgres INTO cdc_s WITH (
  {conn_src}, table = 'orders', 'batch.rows' = {batch}, 'tasks.max' = {tasks});
CREATE SINK CONNECTOR cdc_dst TO postgres FROM cdc_s WITH (
  {conn_dst}, table = 'orders', 'tasks.max' = {tasks});
"""


class Connectql:
    """One Worker in a temporary home, its SparkSession started before anything is timed."""

    def __init__(self, dbs: Databases, home: Path):
        from connectql.server.worker import Worker

        self.dbs = dbs
        self.worker = Worker(home)
        t0 = time.perf_counter()
        spark = self.worker.engine.spark
        self.session_s = time.perf_counter() - t0
        self.listener = progress_listener()
        spark.streams.addListener(self.listener)
        self.phases: dict[str, list[Phase]] = {}

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.worker.engine.spark.streams.removeListener(self.listener)
        self.worker.close()

    def run(self, script: str) -> None:
        for _stmt, _result in self.worker.run_script(script):
            pass

    def finished_at(self) -> dict[str, float]:
        _cols, rows = self.worker.catalog.query(
            "SELECT connector, max(time) FROM connector_events WHERE to_state = 'FINISHED'"
            " GROUP BY connector"
        )
        return {name: t.replace(tzinfo=timezone.utc).timestamp() for name, t in rows}

    def problems(self, names: list[str], *ok_states: str) -> str:
        """'name STATE: last_error' for each of `names` in none of ok_states."""
        bad = []
        for name in names:
            if not self.worker.catalog.has_connector(name):
                bad.append(f"{name}: not created")
                continue
            e = self.worker.catalog.get_connector(name)
            if e.state not in ok_states:
                bad.append(f"{name} {e.state}: {e.last_error or '-'}")
        return "; ".join(bad)

    # ---------------------------------------------------------------- (a) bulk, run once
    def bulk(self, label: str, table: str, rows: int, target_db: str, want) -> Run:
        info = self.dbs.create(target_db)
        src, dst = f"{label}_src", f"{label}_dst"
        script = BULK_SQL.format(
            src=src,
            dst=dst,
            stream=f"{label}_s",
            table=table,
            conn_src=self.dbs.options("srcdb"),
            conn_dst=self.dbs.options(target_db),
            batch=BATCH_ROWS,
            tasks=TASKS,
        )
        t0_wall, t0 = time.time(), time.perf_counter()
        try:
            self.run(script)
            self.worker.wait_for_once()
        except Exception as e:  # a failed statement is a FAIL of this run, not the bench's end
            seconds = time.perf_counter() - t0
            return Run(f"connectql bulk ({label})", rows, seconds, f"FAIL: {e}")
        seconds = time.perf_counter() - t0
        errors = self.problems([src, dst], "FINISHED")
        check = f"FAIL: {errors}" if errors else check_text(checksum(info), want)
        done = self.finished_at()
        self.listener.wait_rows(dst, rows)
        self.phases[label] = [
            Phase(n, t0_wall, self.listener.of(n), done.get(n)) for n in (src, dst)
        ]
        source_s = done.get(src, float("nan")) - t0_wall
        note = f"source FINISHED at {source_s:.1f} s, sink {seconds - source_s:.1f} s after"
        return Run(f"connectql bulk, run once ({label})", rows, seconds, check, note=note)

    # ---------------------------------------------------------------- (b) cdc snapshot
    def cdc(self, rows: int, want, timeout: float) -> Run:
        info = self.dbs.create("cdcdb")
        script = CDC_SQL.format(
            conn_src=self.dbs.options("srcdb"),
            conn_dst=self.dbs.options("cdcdb"),
            batch=BATCH_ROWS,
            tasks=TASKS,
        )
        method = "connectql cdc snapshot, continuous"
        t0_wall, t0 = time.time(), time.perf_counter()
        try:
            self.run(script)
        except Exception as e:
            return Run(method, rows, time.perf_counter() - t0, f"FAIL: {e}")
        full_at, count, last_check = None, 0, 0.0
        with psycopg.connect(info, autocommit=True) as conn:
            while time.perf_counter() - t0 < timeout:
                count = conn.execute("SELECT count(*) FROM orders").fetchone()[0]
                if count >= rows:
                    full_at = time.perf_counter()
                    break
                if time.perf_counter() - last_check > 2:  # a failed connector ends the wait
                    last_check = time.perf_counter()
                    errors = self.problems(["cdc_src", "cdc_dst"], *LIVE)
                    if errors:
                        return Run(method, rows, last_check - t0, f"FAIL: {errors}")
                time.sleep(POLL_COUNT_S)
        if full_at is None:
            errors = self.problems(["cdc_src", "cdc_dst"], *LIVE)
            return Run(
                method,
                rows,
                timeout,
                f"FAIL: {count:,} of {rows:,} rows after {timeout:.0f} s {errors}".strip(),
            )
        seconds = full_at - t0
        check = check_text(checksum(info), want)
        self.listener.wait_rows("cdc_dst", rows)
        src_batches = self.listener.of("cdc_src", until=t0_wall + seconds)
        dst_batches = self.listener.of("cdc_dst", until=t0_wall + seconds)
        self.phases["cdc"] = [
            Phase("cdc_src", t0_wall, src_batches, rows_done(src_batches, rows)),
            Phase("cdc_dst", t0_wall, dst_batches, rows_done(dst_batches, rows)),
        ]
        src_done = rows_done(src_batches, rows)
        note = (
            f"snapshot in the stream at {src_done - t0_wall:.1f} s"
            if src_done
            else "the source's progress was not reported in time"
        )
        return Run(method, rows, seconds, check, note=note)


def rows_done(batches: list[Batch], rows: int) -> float | None:
    """When (epoch s) the batches had carried `rows` rows in all."""
    total = 0
    for b in batches:
        total += b.rows
        if total >= rows:
            return b.end
    return None


# --------------------------------------------------------------------------------------------
# Where the time goes, outside Spark
# --------------------------------------------------------------------------------------------


def breakdown(dbs: Databases, rows: int) -> list[tuple[str, float, str]]:
    """(step, seconds, note) for connectql's steps run one by one over the whole table."""
    from pyspark.sql.types import (
        DecimalType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampNTZType,
    )

    from connectql.connectors import polling
    from connectql.connectors.postgres.cdc import with_snapshot_columns
    from connectql.connectors.postgres.client import connect
    from connectql.connectors.postgres.db import PgDb
    from connectql.connectors.postgres.types import csv_to_arrow

    # the stream's schema as the source's discovery gives it for srcdb.orders
    schema = StructType(
        [
            StructField("id", LongType()),
            StructField("customer", IntegerType()),
            StructField("amount", DecimalType(12, 2)),
            StructField("status", StringType()),
            StructField("created", TimestampNTZType()),
        ]
    )
    pg_types = {
        "id": "bigint",
        "customer": "integer",
        "amount": "numeric(12,2)",
        "status": "character varying(16)",
        "created": "timestamp without time zone",
    }
    conn_cfg = {"host": dbs.server.host, "port": dbs.server.port, "user": dbs.server.user}
    steps: list[tuple[str, float, str]] = []
    with connect({**conn_cfg, "database": "srcdb"}, autocommit=True) as conn:
        db = PgDb(conn, pg_types)
        src = polling.Source('"public"."orders"', schema)
        select = f'SELECT {db.select_list(schema)} FROM {src.relation} ORDER BY "id"'
        # 0. the server's side alone: psql writes the COPY to /dev/null
        for what, query in (
            ("SELECT * (text format, as the pipe)", "COPY (SELECT * FROM orders) TO STDOUT"),
            ("the source's SELECT, csv", f"COPY ({select}) TO STDOUT (FORMAT csv)"),
        ):
            t0 = time.perf_counter()
            subprocess.run(psql_command(dbs, "srcdb", query), stdout=subprocess.DEVNULL, check=True)
            steps.append((f"psql COPY {what} to /dev/null", time.perf_counter() - t0, ""))
        # 1. the COPY alone, row by row as PgDb.arrow reads it
        t0 = time.perf_counter()
        nbytes, chunk = 0, []
        with conn.cursor().copy(f"COPY ({select}) TO STDOUT (FORMAT csv)") as cp:
            for row in cp:
                chunk.append(row)
        data = b"".join(chunk)
        nbytes = len(data)
        copy_s = time.perf_counter() - t0
        steps.append(
            (
                "source: COPY (SELECT ...) TO STDOUT csv, psycopg row loop",
                copy_s,
                f"{nbytes / 1e6:,.0f} MB of CSV, one connection",
            )
        )
        t0 = time.perf_counter()
        table = csv_to_arrow(data, schema)
        steps.append(("source: CSV -> Arrow (csv_to_arrow)", time.perf_counter() - t0, ""))
        del data, chunk
        # 2. the whole read as a task runs it (read_range: COPY + CSV -> Arrow per 64k rows)
        t0 = time.perf_counter()
        batches = list(polling.read_range(db, src, ["id"], None, None))
        steps.append(
            (
                "source: read_range (the two above, as a task runs them)",
                time.perf_counter() - t0,
                f"{len(batches)} Arrow batches",
            )
        )
    got = sum(b.num_rows for b in batches)
    if got != rows or table.num_rows != rows:
        steps.append(("[red]read check[/red]", 0.0, f"read {got:,} / {table.num_rows:,} rows"))
    del table
    # 3. the sink's steps, into empty targets: the bulk stream's rows, then the same rows as
    # the cdc snapshot puts them in its stream (with __op, __ts_ms, __pos and __source)
    info = dbs.create("stepdb")
    execute(info, TABLE_DDL.format(name="orders_plain"))
    execute(info, TABLE_DDL.format(name="orders_cdc"))
    cfg = SimpleNamespace(connection={"database": "srcdb"}, schema="public", table="orders")
    cdc_schema = StructType(
        [
            *schema.fields,
            StructField("__op", StringType()),
            StructField("__ts_ms", LongType()),
            StructField("__pos", StringType()),
            StructField("__source", StringType()),
        ]
    )
    cdc_batches = [with_snapshot_columns(b, cfg, cdc_schema, 1 << 30) for b in batches]
    conn_cfg = {**conn_cfg, "database": "stepdb"}
    steps += sink_steps(conn_cfg, "", batches, schema, "orders", plain="orders_plain")
    del batches
    steps += sink_steps(conn_cfg, "cdc rows", cdc_batches, cdc_schema, "orders_cdc")
    del cdc_batches
    source = checksum(dbs.info("srcdb"))
    for table in ("orders", "orders_plain", "orders_cdc"):
        got = checksum(info, table)
        if got != source:
            steps.append((f"[red]check of {table}[/red]", 0.0, check_text(got, source)))
    execute(dbs.server.conninfo(), "DROP DATABASE stepdb WITH (FORCE)")
    return steps


def sink_steps(
    conn_cfg: dict, label: str, batches: list, schema, target: str, plain: str | None = None
) -> list[tuple[str, float, str]]:
    """The sink's steps for `batches` (Arrow, of `schema`) into the empty table `target`, as
    one task and one commit: Arrow -> CSV, COPY into a staging table, merge; with `plain`, a
    plain INSERT ... SELECT from the staging table into that empty table too."""
    import pyarrow as pa
    from psycopg import sql

    from connectql.connectors.dbsink import SEQ_COLUMN, SinkSettings
    from connectql.connectors.postgres.client import connect
    from connectql.connectors.postgres.sink import column_types, merge
    from connectql.connectors.postgres.types import arrow_to_csv

    tag = f"sink ({label}): " if label else "sink: "
    names = schema.fieldNames()
    types = column_types(schema, "bench")
    steps = []
    t0 = time.perf_counter()
    parts, seq = [], 0
    for rb in batches:
        col = pa.array(range(seq, seq + rb.num_rows), pa.int64())
        parts.append(arrow_to_csv(rb.append_column(SEQ_COLUMN, col)))
        seq += rb.num_rows
    size = sum(len(p) for p in parts)
    steps.append((tag + "Arrow -> CSV (arrow_to_csv)", time.perf_counter() - t0, ""))
    stage = f"cq_stage_bench_{target}"
    with connect(conn_cfg, autocommit=True) as conn:
        defs = ", ".join(f'"{n}" {types[n]}' for n in names) + f', "{SEQ_COLUMN}" bigint'
        conn.execute(f"CREATE UNLOGGED TABLE {stage} ({defs})")
        cols = ", ".join(f'"{c}"' for c in [*names, SEQ_COLUMN])
        t0 = time.perf_counter()
        with conn.cursor().copy(f"COPY {stage} ({cols}) FROM STDIN (FORMAT csv)") as cp:
            for part in parts:
                cp.write(part)
        steps.append(
            (
                tag + "COPY into an unlogged staging table",
                time.perf_counter() - t0,
                f"{size / 1e6:,.0f} MB of CSV, 1 task",
            )
        )
    del parts
    settings = SinkSettings(
        connection=conn_cfg,
        schema="public",
        table=target,
        mode="upsert",
        key=("id",),
        delete_enabled=True,
        auto_create=False,
    )
    with connect(conn_cfg) as conn:
        t0 = time.perf_counter()
        with conn.transaction():
            merge(conn, settings, names, sql.SQL("SELECT * FROM {}").format(sql.Identifier(stage)))
        steps.append(
            (
                tag + "merge (DISTINCT ON + INSERT ON CONFLICT)",
                time.perf_counter() - t0,
                "into an empty target, one transaction",
            )
        )
        if plain:
            t0 = time.perf_counter()
            with conn.transaction():
                conn.execute(
                    f"INSERT INTO {plain} SELECT id, customer, amount, status, created FROM {stage}"
                )
            steps.append(
                (
                    "  for comparison: plain INSERT ... SELECT from staging",
                    time.perf_counter() - t0,
                    "another empty target",
                )
            )
    return steps


def breakdown_table(steps: list[tuple[str, float, str]], rows: int, pipe_s: float) -> Table:
    table = Table(
        title=f"where the time goes, outside Spark ({rows:,} rows, one process, serial)",
        title_justify="left",
        caption="each step timed alone in this process with connectql's functions; in Spark"
        " the source's chunks run in up to tasks.max tasks, and Spark adds the stream's Parquet"
        " write and read, Arrow <-> JVM transfers and query planning",
        caption_justify="left",
    )
    table.add_column("step")
    table.add_column("s", justify="right")
    table.add_column("rows/s", justify="right")
    table.add_column("x pipe", justify="right")
    table.add_column("note")
    for step, seconds, note in steps:
        rate = f"{rows / seconds:,.0f}" if seconds > 0 else "-"
        ratio = f"{seconds / pipe_s:.2f}" if seconds > 0 and pipe_s > 0 else "-"
        table.add_row(step, f"{seconds:.2f}", rate, ratio, note)
    return table


# --------------------------------------------------------------------------------------------
# CDC latency
# --------------------------------------------------------------------------------------------


@dataclass
class Change:
    seq: int
    kind: str  # insert | update
    id: int
    marker: str
    committed: float | None = None  # epoch s when COMMIT returned
    visible: float | None = None  # epoch s of the first poll that saw it

    @property
    def latency(self) -> float | None:
        if self.committed is None or self.visible is None:
            return None
        return self.visible - self.committed


@dataclass
class Latency:
    changes: list[Change]
    duration_s: float  # the writer's time from its first to its last commit
    probe_s: float | None
    consistent: str = ""
    src_batches: list[Batch] = field(default_factory=list)
    dst_batches: list[Batch] = field(default_factory=list)

    def committed(self) -> list[Change]:
        return [c for c in self.changes if c.committed is not None]

    def latencies(self, kind: str | None = None) -> list[float]:
        return sorted(
            c.latency for c in self.changes if c.latency is not None and kind in (None, c.kind)
        )


def percentile(values: list[float], p: float) -> float:
    """Nearest rank of sorted values; nan when empty."""
    if not values:
        return float("nan")
    rank = max(1, min(len(values), int(-(-p * len(values) // 100))))
    return values[rank - 1]


def plan_changes(rows: int, count: int) -> list[Change]:
    """Alternating inserts of new ids and updates of distinct existing ids (id 1 is the
    probe's)."""
    rng = random.Random(7)
    updates = rng.sample(range(2, rows + 1), min(count // 2, max(0, rows - 1)))
    out, next_id = [], rows + 1
    for seq in range(count):
        if seq % 2 == 1 and updates:
            out.append(Change(seq, "update", updates.pop(), f"L{seq:07d}"))
        else:
            out.append(Change(seq, "insert", next_id, f"L{seq:07d}"))
            next_id += 1
    return out


def apply(conn, change: Change) -> None:
    if change.kind == "insert":
        conn.execute(
            "INSERT INTO orders VALUES (%s, %s, %s, %s, localtimestamp)",
            (change.id, change.seq % 100_000, f"{change.seq % 1000}.25", change.marker),
        )
    else:
        conn.execute(
            "UPDATE orders SET status = %s, amount = amount + 1 WHERE id = %s",
            (change.marker, change.id),
        )


class Poller(threading.Thread):
    """Polls the target for pending changes' markers every POLL_S."""

    def __init__(self, info: str):
        super().__init__(daemon=True, name="latency-poller")
        self.info = info
        self.pending: dict[int, Change] = {}  # by id: each id changes once
        self.lock = threading.Lock()
        self.stop_at: float | None = None  # epoch s; None: until told
        self.error: BaseException | None = None
        self.polls = 0

    def add(self, change: Change) -> None:
        with self.lock:
            self.pending[change.id] = change

    def left(self) -> int:
        with self.lock:
            return len(self.pending)

    def run(self) -> None:
        try:
            with psycopg.connect(self.info, autocommit=True) as conn:
                while self.stop_at is None or time.time() < self.stop_at:
                    tick = time.time()
                    with self.lock:
                        ids = list(self.pending)
                    if ids:
                        found = conn.execute(
                            "SELECT id, status FROM orders WHERE id = ANY(%s::bigint[])", (ids,)
                        ).fetchall()
                        self.polls += 1
                        with self.lock:
                            for id_, status in found:
                                change = self.pending.get(id_)
                                if change is not None and status == change.marker:
                                    change.visible = tick
                                    del self.pending[id_]
                    time.sleep(max(0.0, POLL_S - (time.time() - tick)))
        except BaseException as e:  # reported by the caller
            self.error = e


def measure_latency(dbs: Databases, cq: Connectql, rows: int, seconds: float) -> Latency:
    src_info, dst_info = dbs.info("srcdb"), dbs.info("cdcdb")
    changes = plan_changes(rows, int(RATE * seconds))
    poller = Poller(dst_info)
    poller.start()
    with psycopg.connect(src_info, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")  # logical decoding sees flushed WAL only
        # the probe: the first change after the snapshot, also a check that changes flow
        probe = Change(-1, "update", 1, "probe")
        apply(conn, probe)
        probe.committed = time.time()
        poller.add(probe)
        deadline = time.time() + 120
        while probe.visible is None and time.time() < deadline and poller.error is None:
            time.sleep(0.05)
        if probe.visible is None:
            poller.stop_at = time.time()
            errors = cq.problems(["cdc_src", "cdc_dst"], *LIVE)
            raise RuntimeError(
                f"the probe change did not reach the target within 120 s"
                f" ({poller.error or errors or 'connectors RUNNING'})"
            )
        time.sleep(2)  # let the pipeline go idle again
        console.print(
            f"  probe change visible after {probe.latency:.2f} s; now {RATE} changes/s for"
            f" {seconds:.0f} s"
        )
        t0 = time.time()
        for i, change in enumerate(changes):
            delay = t0 + i / RATE - time.time()
            if delay > 0:
                time.sleep(delay)
            apply(conn, change)
            change.committed = time.time()
            poller.add(change)
        t_last = time.time()
    poller.stop_at = t_last + DRAIN_S
    while poller.left() and time.time() < poller.stop_at and poller.is_alive():
        time.sleep(0.1)
    poller.stop_at = time.time()
    poller.join(10)
    if poller.error is not None:
        console.print(f"[red]  the poller failed: {poller.error}[/red]")
    result = Latency(
        changes,
        t_last - changes[0].committed if changes else 0.0,
        probe.latency,
        src_batches=cq.listener.of("cdc_src", since=t0, until=t_last + DRAIN_S),
        dst_batches=cq.listener.of("cdc_dst", since=t0, until=t_last + DRAIN_S),
    )
    result.consistent = wait_consistent(src_info, dst_info, CONSISTENT_S)
    return result


def wait_consistent(src_info: str, dst_info: str, timeout: float) -> str:
    t0 = time.perf_counter()
    want = got = None
    while time.perf_counter() - t0 < timeout:
        want, got = checksum(src_info), checksum(dst_info)
        if want == got:
            return f"OK (equal {time.perf_counter() - t0:.1f} s after the last change's wait)"
        time.sleep(1)
    return f"FAIL after {timeout:.0f} s: {check_text(got, want)}"


def latency_table(lat: Latency) -> Table:
    table = Table(
        title="CDC latency: commit in srcdb to visible in the target",
        title_justify="left",
        caption=f"commit: when COMMIT returned on the client; visible: the start of the first"
        f" poll (every {POLL_S * 1000:.0f} ms) that saw the change; s",
        caption_justify="left",
    )
    for col in ("changes", "committed", "observed", "p50", "p90", "p99", "max", "mean"):
        table.add_column(col, justify="right")
    for kind in (None, "insert", "update"):
        done = [c for c in lat.committed() if kind in (None, c.kind)]
        values = lat.latencies(kind)
        table.add_row(
            kind or "all",
            f"{len(done):,}",
            f"{len(values):,}",
            *(f"{percentile(values, p):.2f}" for p in (50, 90, 99, 100)),
            f"{statistics.fmean(values):.2f}" if values else "-",
        )
    return table


STEP_KEYS = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets")


def window_table(lat: Latency) -> Table:
    """The source's and the sink's micro-batches while the changes flowed."""
    window = max(lat.duration_s, 1.0)
    table = Table(
        title="micro-batches during the latency run (medians over batches with rows)",
        title_justify="left",
        caption="ms; gap: from the end of a batch to the start of the query's next one;"
        " overlap: share of its batches that ran at the same time as one of the other"
        " connector's",
        caption_justify="left",
    )
    for col in ("connector", "batches", "per s", "rows", "batch", *STEP_KEYS, "gap", "overlap"):
        table.add_column(col, justify="right")
    pairs = (
        ("cdc_src", lat.src_batches, lat.dst_batches),
        ("cdc_dst", lat.dst_batches, lat.src_batches),
    )
    for name, batches, other in pairs:
        work = [b for b in batches if b.rows > 0]
        if not work:
            table.add_row(name, "0", *["-"] * (len(STEP_KEYS) + 5))
            continue

        def med(key: str, bs=work) -> str:
            return f"{statistics.median(b.durations.get(key, 0) for b in bs):.0f}"

        gaps = [(b.start - a.end) * 1000 for a, b in zip(batches, batches[1:], strict=False)]
        busy = [(b.start, b.end) for b in other if b.rows > 0]
        overlapping = sum(any(s < b.end and b.start < e for s, e in busy) for b in work)
        table.add_row(
            name,
            f"{len(work)}",
            f"{len(work) / window:.2f}",
            f"{statistics.median(b.rows for b in work):.0f}",
            med("triggerExecution"),
            *(med(k) for k in STEP_KEYS),
            f"{statistics.median(gaps):.0f}" if gaps else "-",
            f"{overlapping / len(work):.0%}",
        )
    return table


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------


def runs_table(runs: list[Run], pipe_s: float, session_s: float | None) -> Table:
    caption = (
        f"ratio: seconds / the pipes' mean ({pipe_s:.2f} s); check: row count and the sum of"
        " a 64-bit hash of each row's text equal srcdb.orders'"
    )
    if session_s is not None:
        caption += f"; the Worker's SparkSession started in {session_s:.1f} s beforehand (not"
        caption += " counted)"
    table = Table(title="snapshot + sink", title_justify="left", caption=caption)
    table.caption_justify = "left"
    for col in ("method", "rows", "seconds", "rows/s", "ratio vs pipe"):
        table.add_column(col, justify="right" if col != "method" else "left")
    table.add_column("check")
    table.add_column("note", overflow="fold")
    for r in runs:
        ratio = f"{r.seconds / pipe_s:.2f}" if r.counted and pipe_s > 0 else "-"
        table.add_row(
            r.method + ("" if r.counted else " [dim](not counted)[/dim]"),
            f"{r.rows:,}",
            f"{r.seconds:.2f}",
            f"{r.rows / r.seconds:,.0f}" if r.seconds > 0 else "-",
            ratio,
            r.check if r.ok else f"[red]{r.check}[/red]",
            r.note,
        )
    return table


def summary_table(runs: list[Run], pipe_s: float, lat: Latency | None) -> Table:
    table = Table(title="summary", title_justify="left")
    for col in ("metric", "connectql", "yardstick", "ratio", "goal", "met"):
        table.add_column(col, justify="right" if col != "metric" else "left")

    def met(ok: bool) -> str:
        return "[green]yes[/green]" if ok else "[red]no[/red]"

    for r in runs:
        if not r.method.startswith("connectql") or not r.counted:
            continue
        ratio = r.seconds / pipe_s if pipe_s > 0 else float("nan")
        table.add_row(
            r.method,
            f"{r.seconds:.1f} s",
            f"pipe {pipe_s:.1f} s",
            f"{ratio:.2f}x",
            f"<= {RATIO_GOAL:.0f}x",
            met(ratio <= RATIO_GOAL and r.ok),
        )
    if lat is not None:
        values = lat.latencies()
        p50, p99 = percentile(values, 50), percentile(values, 99)
        table.add_row(
            "cdc latency p50", f"{p50:.2f} s", "", "", f"< {P50_GOAL_S} s", met(p50 < P50_GOAL_S)
        )
        table.add_row(
            "cdc latency p99", f"{p99:.2f} s", "", "", f"< {P99_GOAL_S} s", met(p99 < P99_GOAL_S)
        )
        committed = len(lat.committed())
        table.add_row(
            "changes observed / committed",
            f"{len(values):,} / {committed:,}",
            "",
            "",
            "all",
            met(len(values) == committed),
        )
        table.add_row(
            "target equals source after the changes",
            lat.consistent.split(" (")[0],
            "",
            "",
            "OK",
            met(lat.consistent.startswith("OK")),
        )
    return table


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def _interrupt(*_args) -> None:
    raise KeyboardInterrupt


def load() -> str:
    """The 1/5/15-minute load averages: other work on the machine moves every figure."""
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.postgres", description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="rows in srcdb.orders")
    p.add_argument("--skip-latency", action="store_true", help="skip the CDC latency section")
    p.add_argument("--skip-breakdown", action="store_true", help="skip the step timings")
    p.add_argument("--seconds", type=float, default=SECONDS, help="latency run (default 30)")
    p.add_argument("--keep", action="store_true", help="keep the temporary home")
    args = p.parse_args(argv)
    if args.rows < 1:
        p.error("--rows must be at least 1")
    if shutil.which("psql") is None:
        console.print("[red]psql is not on PATH: the yardstick needs it[/red]")
        return 2
    # SIGTERM ends the bench like Ctrl-C: the finally blocks stop Spark and the server
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.time()
    n, warm = args.rows, min(WARMUP_ROWS, args.rows)
    tmp = Path(tempfile.mkdtemp(prefix="bench-postgres-"))
    console.print(
        f"[bold]PostgreSQL bench[/bold]: {n:,} rows, {os.cpu_count()} cores,"
        f" 'batch.rows' = {BATCH_ROWS:,}, 'tasks.max' = {TASKS}; temporary home {tmp};"
        f" load average {load()}"
    )
    dbs = Databases()
    cq: Connectql | None = None
    runs: list[Run] = []
    lat: Latency | None = None
    failed = False
    try:
        dbs.start()
        want = fill_source(dbs, n, warm)
        want_warm = checksum(dbs.info("srcdb"), "orders_warm")

        console.print("[bold]1. Snapshot + sink[/bold]")
        runs.append(run_pipe(dbs, "pipedb", want, "pipe psql COPY | psql COPY (1st)"))
        console.print(f"  pipe (1st): {runs[-1].seconds:.2f} s, {runs[-1].check}")

        steps = None
        if not args.skip_breakdown:
            console.print("  timing connectql's steps outside Spark ...")
            steps = breakdown(dbs, n)

        cq = Connectql(dbs, tmp / "home")
        console.print(f"  the Worker's SparkSession started in {cq.session_s:.1f} s")
        warm_run = cq.bulk("warm", "orders_warm", warm, "warmdb", want_warm)
        warm_run.counted = False
        runs.append(warm_run)
        console.print(f"  warm-up: {warm_run.seconds:.2f} s, {warm_run.check}")
        runs.append(cq.bulk("bulk", "orders", n, "bulkdb", want))
        console.print(f"  (a) bulk: {runs[-1].seconds:.2f} s, {runs[-1].check}")
        runs.append(run_pipe(dbs, "pipedb", want, "pipe psql COPY | psql COPY (2nd)"))
        console.print(f"  pipe (2nd): {runs[-1].seconds:.2f} s, {runs[-1].check}")
        cdc_run = cq.cdc(n, want, timeout=max(600.0, n / 1000))
        runs.append(cdc_run)
        console.print(f"  (b) cdc snapshot: {cdc_run.seconds:.2f} s, {cdc_run.check}")

        pipes = [r.seconds for r in runs if r.method.startswith("pipe") and r.ok]
        pipe_s = statistics.fmean(pipes) if pipes else float("nan")
        console.print(runs_table(runs, pipe_s, cq.session_s))
        for label, title in (("bulk", "(a) bulk, run once"), ("cdc", "(b) cdc snapshot")):
            if label in cq.phases:
                console.print(phases_table(f"{title}: Spark's batches", cq.phases[label]))
        if steps is not None:
            console.print("[bold]2. Where the time goes[/bold]")
            console.print(breakdown_table(steps, n, pipe_s))

        if not args.skip_latency:
            console.print("[bold]3. CDC latency[/bold] (the cdc source and sink still running)")
            if cdc_run.ok:
                lat = measure_latency(dbs, cq, n, args.seconds)
                console.print(latency_table(lat))
                window = max(lat.duration_s, 1.0)
                console.print(
                    f"  writer: {len(lat.committed()):,} changes committed in"
                    f" {lat.duration_s:.1f} s ({len(lat.committed()) / window:.0f}/s)"
                )
                console.print(window_table(lat))
                console.print(f"  target equals source afterwards: {lat.consistent}")
            else:
                console.print("[red]  skipped: the cdc snapshot failed[/red]")
        console.print(summary_table(runs, pipe_s, lat))
        failed = not all(r.ok for r in runs) or (
            lat is not None
            and (
                not lat.consistent.startswith("OK") or len(lat.latencies()) != len(lat.committed())
            )
        )
    except KeyboardInterrupt:
        console.print("[red]interrupted: stopping the worker and the server[/red]")
        failed = True
    finally:
        if cq is not None:
            try:
                cq.close()
            except Exception as e:
                console.print(f"[red]closing the worker failed: {e}[/red]")
        dbs.stop()
        if args.keep:
            console.print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    console.print(f"bench took {time.time() - started:.0f} s; load average {load()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
