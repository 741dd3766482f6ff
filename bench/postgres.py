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

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import psycopg

from bench import common
from bench.common import (
    BATCH_ROWS,
    TASKS,
    WARMUP_ROWS,
    Change,
    Connectql,
    Latency,
    Run,
    arguments,
    breakdown_table,
    check_text,
    close,
    console,
    execute,
    failed,
    interrupt,
    latency_section,
    load,
    pipe_mean,
    print_snapshot,
    summary_table,
)

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
CHECK_DOC = "row count and the sum of a 64-bit hash of each row's text equal srcdb.orders'"


# --------------------------------------------------------------------------------------------
# The server and its databases
# --------------------------------------------------------------------------------------------


def checksum(info: str, table: str = "orders") -> tuple[int, int]:
    count, total = execute(info, CHECKSUM_SQL.format(name=table))[0]
    return int(count), int(total)


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
# The yardstick: psql COPY | psql COPY
# --------------------------------------------------------------------------------------------


def psql_command(dbs: Databases, db: str, command: str) -> list[str]:
    return common.psql_command(dbs.server, db, command)


def run_pipe(dbs: Databases, target_db: str, want: tuple[int, int], label: str) -> Run:
    info = dbs.create(target_db)
    out_cmd = psql_command(dbs, "srcdb", "COPY (SELECT * FROM orders) TO STDOUT")
    in_cmd = psql_command(dbs, target_db, "COPY orders FROM STDIN")
    return common.run_pipe(
        out_cmd,
        in_cmd,
        label,
        want[0],
        lambda: check_text(checksum(info), want),
        "psql 15, text format",
    )


def bulk(cq: Connectql, dbs: Databases, label: str, table: str, rows: int, target_db: str, want):
    info = dbs.create(target_db)
    return cq.bulk(
        label,
        table,
        rows,
        dbs.options("srcdb"),
        dbs.options(target_db),
        lambda: check_text(checksum(info), want),
    )


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

    from connectql.connectors.postgres.cdc import with_snapshot_columns
    from connectql.connectors.postgres.client import connect
    from connectql.connectors.postgres.db import PgDb
    from connectql.connectors.postgres.types import csv_to_arrow
    from connectql.connectors.relational import polling

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
    for table in ("orders", "orders_plain", "orders_cdc", "orders_direct", "orders_cdc_direct"):
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

    from connectql.connectors.postgres.client import connect
    from connectql.connectors.postgres.sink import PgTarget, column_types
    from connectql.connectors.postgres.types import arrow_to_csv
    from connectql.connectors.relational.sink import SEQ_COLUMN, SinkSettings

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
            PgTarget(settings, schema).merge(conn, f"SELECT * FROM {stage}")
        steps.append(
            (
                tag + "merge (ROW_NUMBER + INSERT ON CONFLICT)",
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
    return steps + binary_steps(conn_cfg, tag, batches, settings, schema, defs, cols)


def binary_steps(conn_cfg, tag: str, batches, settings, schema, defs: str, cols: str):
    """The sink's binary COPY (pgpq): into an unlogged staging table (a batch that updates or
    deletes), and straight into an empty target `<table>_direct` (a batch that only inserts:
    PgTarget.insert_direct, as a task runs it)."""
    from dataclasses import replace

    from connectql.connectors.postgres.client import connect
    from connectql.connectors.postgres.sink import PgTarget, copy_rows

    steps = []
    names = schema.fieldNames()
    stage = f"cq_stage_bench_{settings.table}_bin"
    with connect(conn_cfg, autocommit=True) as conn:
        conn.execute(f"CREATE UNLOGGED TABLE {stage} ({defs})")
        conn.execute(TABLE_DDL.format(name=f"{settings.table}_direct"))
        t0 = time.perf_counter()
        copy_rows(conn, stage, cols, (rb.select(names) for rb in batches), 0)
        steps.append(
            (
                tag + "binary COPY (pgpq) into an unlogged staging table",
                time.perf_counter() - t0,
                "1 task",
            )
        )
    target = PgTarget(replace(settings, table=f"{settings.table}_direct"), schema)
    t0 = time.perf_counter()
    done = target.insert_direct(batches, 0)
    steps.append(
        (
            tag + "binary COPY (pgpq) straight into the target",
            time.perf_counter() - t0,
            "an insert-only batch; no merge" if done else "[red]refused[/red]",
        )
    )
    return steps


# --------------------------------------------------------------------------------------------
# CDC latency
# --------------------------------------------------------------------------------------------


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


@contextlib.contextmanager
def source_connection(info: str):
    with psycopg.connect(info, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")  # logical decoding sees flushed WAL only
        yield conn


def measure_latency(dbs: Databases, cq: Connectql, rows: int, seconds: float) -> Latency:
    src_info, dst_info = dbs.info("srcdb"), dbs.info("cdcdb")
    return common.measure_latency(
        cq,
        lambda: source_connection(src_info),
        apply,
        dst_info,
        rows,
        seconds,
        lambda: (checksum(src_info), checksum(dst_info)),
    )


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = arguments("python -m bench.postgres", __doc__.split("\n")[0], argv)
    if shutil.which("psql") is None:
        console.print("[red]psql is not on PATH: the yardstick needs it[/red]")
        return 2
    # SIGTERM ends the bench like Ctrl-C: the finally blocks stop Spark and the server
    signal.signal(signal.SIGTERM, interrupt)
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
    bad = False
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

        cq = Connectql(tmp / "home", "postgres")
        console.print(f"  the Worker's SparkSession started in {cq.session_s:.1f} s")
        warm_run = bulk(cq, dbs, "warm", "orders_warm", warm, "warmdb", want_warm)
        warm_run.counted = False
        runs.append(warm_run)
        console.print(f"  warm-up: {warm_run.seconds:.2f} s, {warm_run.check}")
        runs.append(bulk(cq, dbs, "bulk", "orders", n, "bulkdb", want))
        console.print(f"  (a) bulk: {runs[-1].seconds:.2f} s, {runs[-1].check}")
        runs.append(run_pipe(dbs, "pipedb", want, "pipe psql COPY | psql COPY (2nd)"))
        console.print(f"  pipe (2nd): {runs[-1].seconds:.2f} s, {runs[-1].check}")
        info = dbs.create("cdcdb")
        cdc_run = cq.cdc(
            n,
            dbs.options("srcdb"),
            dbs.options("cdcdb"),
            info,
            lambda: check_text(checksum(info), want),
            timeout=max(600.0, n / 1000),
        )
        runs.append(cdc_run)
        console.print(f"  (b) cdc snapshot: {cdc_run.seconds:.2f} s, {cdc_run.check}")

        pipe_s = pipe_mean(runs)
        print_snapshot(runs, pipe_s, cq, CHECK_DOC)
        if steps is not None:
            console.print("[bold]2. Where the time goes[/bold]")
            console.print(breakdown_table(steps, n, pipe_s))

        lat = latency_section(
            args.skip_latency, cdc_run, lambda: measure_latency(dbs, cq, n, args.seconds)
        )
        console.print(summary_table(runs, pipe_s, lat))
        bad = failed(runs, lat)
    except KeyboardInterrupt:
        console.print("[red]interrupted: stopping the worker and the server[/red]")
        bad = True
    finally:
        close(cq, dbs.stop, tmp, args.keep)
    console.print(f"bench took {time.time() - started:.0f} s; load average {load()}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
