"""MySQL bench: connectql's mysql source (MariaDB) into its postgres sink against
`mariadb --batch | psql \\copy`.

    .venv/bin/python -m bench.mysql [--rows 1000000] [--skip-latency] [--skip-breakdown]
                                    [--seconds 30] [--keep]

Two private servers are started for the bench and removed at the end: a MariaDB
(tests.mariadbserver.PrivateMariaDB: ROW binary log, binlog_row_metadata at the server's default,
innodb_flush_log_at_trx_commit = 2, sync_binlog = 0, no doublewrite, a buffer pool that holds the
table) and a PostgreSQL (tests.pgserver.PrivatePostgres: fsync off, synchronous_commit off). The
source table is

    srcdb.orders (id bigint primary key, customer int, amount decimal(12,2), status varchar(16),
                  note varchar(64), created datetime(6))

filled with --rows rows from MariaDB's sequence engine (seq_1_to_N): about 1% NULL statuses and
NULL notes, microsecond timestamps, and every 1000th row a note with a tab, a newline, a carriage
return and a backslash, the string 'NULL', an empty string or non-ASCII text, so that a copy
that mangles them fails its check. Every target is an empty PostgreSQL table of the same columns
(numeric(12,2), timestamp(6)), created before its run.

1. Snapshot + sink throughput (rows/s, and the time ratio against the pipe; goal: within 3x):
   - pipe: `mariadb --quick --batch --raw --skip-column-names -e "SELECT ..."` | `psql -c
     "\\copy orders FROM STDIN"`, wall clock, run twice (before and after connectql's bulk
     runs); the yardstick is their mean. `--batch` prints NULL as the word NULL and `--raw`
     writes tabs, newlines and backslashes as they are, so the SELECT itself writes COPY's text
     format: `\\N` for NULL, and string columns with `\\`, tab, newline and carriage return
     escaped (shared/NOTES.md, "Yardstick gotchas").
   - (a) connectql bulk: `mode = 'bulk', run = 'once'` source into a stream, `run = 'once'`
     postgres sink; from before the first CREATE until both are FINISHED, with 'tasks.max' = 2
     on both (the source reads two key ranges at once), and again with 'tasks.max' = 1. The
     Worker's SparkSession is started first and its start time is shown apart; a warm-up of
     WARMUP_ROWS rows runs the same path first (a session's first jobs are slower, NOTES.md)
     and is shown but not counted.
   - (b) connectql cdc: the default mode (snapshot in 'batch.rows' key chunks from a recorded
     binlog position, then the binary log) with a continuous sink; from before the first
     CREATE until the target holds all rows (count polled every POLL_COUNT_S).
   Each target is checked by value: its row count and the sum of a 60-bit part of the MD5 of
   each row's canonical text (the same text computed by MariaDB and by PostgreSQL: columns
   joined by '|', NULL as \\N, timestamps with 6 fractional digits) equal the source's. Spark's
   per-batch timings (a StreamingQueryListener of the bench) split connectql's time into query
   start-up, source and sink batches, and inside them `latestOffset` (planning a chunk) and
   `addBatch` (reading and writing it).
2. Where the source's time goes, outside Spark (unless --skip-breakdown), for the whole table in
   this process: the `mariadb` client to /dev/null (SELECT *, and the pipe's SELECT), then the
   source's range read (polling.read_range through connectql.connectors.mysql.db.MyDb.arrow:
   one SELECT of the key range, pymysql's unbuffered cursor fetching text rows, rows_to_arrow
   per 64k rows), and the same read split into its two parts: pymysql's fetch alone and the
   text -> Arrow conversion alone.
3. CDC latency (unless --skip-latency): with (b)'s source and sink still running (default
   trigger and poll interval), one probe change first (the pipeline's first change after the
   snapshot, shown apart), then RATE changes/s for SECONDS s, each its own autocommit
   transaction in MariaDB: half inserts of new ids, half updates of distinct existing ids, each
   change one row whose `status` holds its marker. Its commit time is taken on the client when
   the statement returns; another thread polls the PostgreSQL target every POLL_S for the
   pending ids and takes a change as visible at the start of the first poll that sees its
   marker. Reports p50 / p90 / p99 / max and changes observed against committed (goal:
   p50 < 1.5 s, p99 < 3 s), then whether the target equals the source.
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

MARIADB_SETTINGS = {
    "innodb-buffer-pool-size": "512M",  # the 1M-row table and its index stay in memory
    "innodb-log-file-size": "512M",  # fewer checkpoints while loading
    "innodb-doublewrite": "0",
}
PG_SETTINGS = {"max_wal_size": "4GB"}  # fewer checkpoints while loading 1M-row tables

MY_TABLE_DDL = (
    "CREATE TABLE {name} (id bigint PRIMARY KEY, customer int, amount decimal(12,2),"
    " status varchar(16), note varchar(64), created datetime(6))"
)
PG_TABLE_DDL = (
    "CREATE TABLE {name} (id bigint PRIMARY KEY, customer int, amount numeric(12,2),"
    " status varchar(16), note varchar(64), created timestamp(6))"
)
# the notes a copy may mangle: tab, newline, carriage return, backslash, the word NULL, '', UTF-8
FILL_SQL = r"""
INSERT INTO orders
SELECT seq,
       1 + FLOOR(RAND(42) * 99999),
       ROUND(RAND() * 5000, 2),
       CASE WHEN seq % 97 = 0 THEN NULL
            ELSE ELT(1 + seq % 5, 'new', 'paid', 'shipped', 'delivered', 'cancelled') END,
       CASE seq % 1000
            WHEN 1 THEN CONCAT('tab\there, new\nline, cr\r, backslash \\ and \\N ', seq)
            WHEN 2 THEN 'NULL'
            WHEN 3 THEN ''
            WHEN 4 THEN CONCAT('naïve café ☕ ', seq)
            ELSE IF(seq % 89 = 0, NULL, CONCAT('note ', MD5(seq))) END,
       TIMESTAMP '2024-01-01 00:00:00' + INTERVAL FLOOR(RAND() * 31536000000000) MICROSECOND
FROM seq_1_to_{n}
"""


def _escaped(column: str) -> str:
    """A string column in COPY's text format, selected by MariaDB: backslash, tab, newline and
    carriage return escaped, NULL as \\N."""
    return (
        rf"IFNULL(REPLACE(REPLACE(REPLACE(REPLACE({column}, '\\', '\\\\'), '\t', '\\t'),"
        rf" '\n', '\\n'), '\r', '\\r'), '\\N')"
    )


PIPE_SELECT = (
    f"SELECT id, customer, amount, {_escaped('status')}, {_escaped('note')}, created FROM orders"
)
# the same canonical text of a row on both servers; the sum of 60 bits of its MD5
MY_CHECKSUM_SQL = r"""
SELECT COUNT(*), COALESCE(SUM(CAST(CONV(LEFT(MD5(CONCAT_WS('|', id, customer, amount,
       IFNULL(status, '\\N'), IFNULL(note, '\\N'),
       IFNULL(DATE_FORMAT(created, '%Y-%m-%d %H:%i:%s.%f'), '\\N'))), 15), 16, 10)
       AS UNSIGNED)), 0)
FROM {name}
"""
PG_CHECKSUM_SQL = r"""
SELECT count(*), coalesce(sum(('x' || left(md5(concat_ws('|', id, customer, amount,
       coalesce(status, '\N'), coalesce(note, '\N'),
       coalesce(to_char(created, 'YYYY-MM-DD HH24:MI:SS.US'), '\N'))), 15))::bit(60)::bigint), 0)
FROM {name}
"""
CHECK_DOC = (
    "row count and the sum of 60 bits of the MD5 of each row's canonical text equal"
    " MariaDB's srcdb.orders'"
)
PHASES = {
    "bulk": "(a) bulk, run once, 'tasks.max' = 2",
    "bulk1": "(a) bulk, run once, 'tasks.max' = 1",
    "cdc": "(b) cdc snapshot",
}


# --------------------------------------------------------------------------------------------
# The servers and their databases
# --------------------------------------------------------------------------------------------


class Servers:
    """The private MariaDB (the source, database srcdb) and PostgreSQL (the targets)."""

    def __init__(self):
        from tests.mariadbserver import PrivateMariaDB
        from tests.pgserver import PrivatePostgres

        self.my = PrivateMariaDB(extra_settings=MARIADB_SETTINGS)
        self.pg = PrivatePostgres(extra_settings=PG_SETTINGS)

    def start(self) -> None:
        for name, server, hint in (
            ("MariaDB", self.my, "mariadb-install-db/mariadbd; CONNECTQL_MARIADBD"),
            ("PostgreSQL", self.pg, "initdb/pg_ctl; CONNECTQL_PG_BIN"),
        ):
            t0 = time.perf_counter()
            try:
                server.start()
            except (RuntimeError, OSError) as e:
                raise SystemExit(f"cannot start a private {name} ({hint}): {e}") from None
            console.print(
                f"  private {name} on {server.host}:{server.port}"
                f" ({time.perf_counter() - t0:.1f} s)"
            )

    def stop(self) -> None:
        for server in (self.my, self.pg):
            with contextlib.suppress(Exception):
                server.stop()

    # ---------------------------------------------------------------- MariaDB
    def my_rows(self, sql: str, params=None) -> list[tuple]:
        conn = self.my.connect("srcdb")
        try:
            with conn.cursor() as cur:
                cur.execute(sql, params)
                return list(cur.fetchall())
        finally:
            conn.close()

    def my_checksum(self, table: str = "orders") -> tuple[int, int]:
        count, total = self.my_rows(MY_CHECKSUM_SQL.format(name=table))[0]
        return int(count), int(total)

    def my_options(self) -> str:
        s = self.my
        return f"host = '{s.host}', port = {s.port}, user = '{s.user}', database = 'srcdb'"

    def mariadb_command(self, sql: str) -> list[str]:
        s = self.my
        return [
            "mariadb", "--no-defaults", "-h", s.host, "-P", str(s.port), "-u", s.user,
            "--default-character-set=utf8mb4", "--quick", "--batch", "--raw",
            "--skip-column-names", "-D", "srcdb", "-e", sql,
        ]  # fmt: skip

    # ---------------------------------------------------------------- PostgreSQL
    def pg_info(self, db: str) -> str:
        return self.pg.conninfo(db)

    def pg_create(self, db: str) -> str:
        """An empty database `db` with an empty orders table; its conninfo."""
        from tests.pgserver import create_database

        info = create_database(self.pg.conninfo(), db)
        execute(info, PG_TABLE_DDL.format(name="orders"))
        return info

    def pg_checksum(self, info: str) -> tuple[int, int]:
        count, total = execute(info, PG_CHECKSUM_SQL.format(name="orders"))[0]
        return int(count), int(total)

    def pg_options(self, db: str) -> str:
        s = self.pg
        return f"host = '{s.host}', port = {s.port}, user = '{s.user}', database = '{db}'"

    def psql_command(self, db: str, command: str) -> list[str]:
        return common.psql_command(self.pg, db, command)


def fill_source(srv: Servers, n: int, warm: int) -> tuple[int, int]:
    """srcdb.orders with n rows and srcdb.orders_warm with the first `warm` of them; returns the
    checksum of orders."""
    from tests.mariadbserver import create_database

    create_database(srv.my, "srcdb")
    t0 = time.perf_counter()
    conn = srv.my.connect("srcdb")
    try:
        with conn.cursor() as cur:
            cur.execute(MY_TABLE_DDL.format(name="orders"))
            cur.execute(FILL_SQL.format(n=int(n)))
            cur.execute(MY_TABLE_DDL.format(name="orders_warm"))
            cur.execute("INSERT INTO orders_warm SELECT * FROM orders WHERE id <= %s", (warm,))
            cur.execute("ANALYZE TABLE orders, orders_warm")
            cur.fetchall()
            cur.execute(
                "SELECT data_length + index_length FROM information_schema.TABLES"
                " WHERE table_schema = 'srcdb' AND table_name = 'orders'"
            )
            size = int(cur.fetchone()[0])
    finally:
        conn.close()
    want = srv.my_checksum()
    console.print(
        f"  srcdb.orders: {n:,} rows, {size / 2**20:,.0f} MB with its index, filled in"
        f" {time.perf_counter() - t0:.1f} s"
    )
    return want


# --------------------------------------------------------------------------------------------
# The yardstick and connectql's runs
# --------------------------------------------------------------------------------------------


def run_pipe(srv: Servers, target_db: str, want: tuple[int, int], label: str) -> Run:
    info = srv.pg_create(target_db)
    return common.run_pipe(
        srv.mariadb_command(PIPE_SELECT),
        srv.psql_command(target_db, r"\copy orders FROM STDIN"),
        label,
        want[0],
        lambda: check_text(srv.pg_checksum(info), want),
        "mariadb 10.11 --batch --raw, psql 15 \\copy text format",
    )


def bulk(
    cq: Connectql,
    srv: Servers,
    label: str,
    table: str,
    rows: int,
    target_db: str,
    want,
    tasks: int = TASKS,
) -> Run:
    info = srv.pg_create(target_db)
    return cq.bulk(
        label,
        table,
        rows,
        srv.my_options(),
        srv.pg_options(target_db),
        lambda: check_text(srv.pg_checksum(info), want),
        tasks=tasks,
        method=f"connectql bulk, run once, 'tasks.max' = {tasks} ({label})",
    )


# --------------------------------------------------------------------------------------------
# Where the source's time goes, outside Spark
# --------------------------------------------------------------------------------------------


def breakdown(srv: Servers, rows: int) -> list[tuple[str, float, str]]:
    """(step, seconds, note) for the source's read of the whole table, one step at a time."""
    import pymysql
    from pyspark.sql.types import (
        DecimalType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampNTZType,
    )

    from connectql.connectors.mysql.client import connect, qualified
    from connectql.connectors.mysql.db import RAW, ROWS_PER_ARROW_BATCH, MyDb
    from connectql.connectors.mysql.types import rows_to_arrow
    from connectql.connectors.relational import polling

    steps: list[tuple[str, float, str]] = []
    # 0. the server's side and the client's text output alone
    for what, sql in (
        ("SELECT *", "SELECT * FROM orders"),
        ("the pipe's SELECT (escapes, \\N)", PIPE_SELECT),
    ):
        t0 = time.perf_counter()
        subprocess.run(srv.mariadb_command(sql), stdout=subprocess.DEVNULL, check=True)
        steps.append((f"mariadb {what} to /dev/null", time.perf_counter() - t0, ""))
    # the stream's schema as the source's discovery gives it for srcdb.orders
    schema = StructType(
        [
            StructField("id", LongType()),
            StructField("customer", IntegerType()),
            StructField("amount", DecimalType(12, 2)),
            StructField("status", StringType()),
            StructField("note", StringType()),
            StructField("created", TimestampNTZType()),
        ]
    )
    types = {
        "id": "bigint(20)",
        "customer": "int(11)",
        "amount": "decimal(12,2)",
        "status": "varchar(16)",
        "note": "varchar(64)",
        "created": "datetime(6)",
    }
    cfg = {"host": srv.my.host, "port": srv.my.port, "user": srv.my.user, "database": "srcdb"}
    src = polling.Source(qualified("srcdb", "orders"), schema)
    # 1. the whole read as a task runs it (no bounds: the whole table)
    conn = connect(cfg, conv=RAW)
    try:
        db = MyDb(conn, types)
        select = f"SELECT {db.select_list(schema)} FROM {src.relation}"
        # warm-up: the first read in a process pays one-off costs (seen: seconds for 5k rows)
        for _batch in polling.read_range(db, src, ["id"], None, ["1000"]):
            pass
        t0 = time.perf_counter()
        got = sum(b.num_rows for b in polling.read_range(db, src, ["id"], None, None))
        steps.append(
            (
                "source: read_range (MyDb.arrow: pymysql SSCursor + rows_to_arrow)",
                time.perf_counter() - t0,
                f"{got:,} rows, one connection",
            )
        )
        # 2. the same read again, its two parts timed apart: pymysql's fetch, text -> Arrow
        fetch_s = convert_s = 0.0
        with conn.cursor(pymysql.cursors.SSCursor) as cur:
            t0 = time.perf_counter()
            cur.execute(select)
            while True:
                t1 = time.perf_counter()
                chunk = cur.fetchmany(ROWS_PER_ARROW_BATCH)
                t2 = time.perf_counter()
                fetch_s += t2 - t1
                if not chunk:
                    break
                rows_to_arrow(chunk, schema)
                convert_s += time.perf_counter() - t2
        steps.append(
            ("  again, pymysql fetchmany alone (text rows)", fetch_s, "pure-Python protocol")
        )
        steps.append(
            ("  again, rows_to_arrow alone (text -> Arrow)", convert_s, "same pass as above")
        )
    finally:
        conn.close()
    if got != rows:
        steps.append(("[red]read check[/red]", 0.0, f"read {got:,} rows, expected {rows:,}"))
    return steps


# --------------------------------------------------------------------------------------------
# CDC latency
# --------------------------------------------------------------------------------------------


def apply(conn, change: Change) -> None:
    """One change as its own (autocommit) transaction."""
    with conn.cursor() as cur:
        if change.kind == "insert":
            cur.execute(
                "INSERT INTO orders VALUES (%s, %s, %s, %s, %s, NOW(6))",
                (change.id, change.seq % 100_000, f"{change.seq % 1000}.25", change.marker, "l"),
            )
        else:
            cur.execute(
                "UPDATE orders SET status = %s, amount = amount + 1 WHERE id = %s",
                (change.marker, change.id),
            )


def measure_latency(srv: Servers, cq: Connectql, rows: int, seconds: float) -> Latency:
    dst_info = srv.pg_info("cdcdb")

    @contextlib.contextmanager
    def source_connection():
        conn = srv.my.connect("srcdb", autocommit=True)
        try:
            yield conn
        finally:
            conn.close()

    return common.measure_latency(
        cq,
        source_connection,
        apply,
        dst_info,
        rows,
        seconds,
        lambda: (srv.my_checksum(), srv.pg_checksum(dst_info)),
    )


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = arguments("python -m bench.mysql", __doc__.split("\n")[0], argv)
    missing = [c for c in ("mariadb", "psql") if shutil.which(c) is None]
    if missing:
        console.print(f"[red]{' and '.join(missing)} not on PATH: the yardstick needs them[/red]")
        return 2
    signal.signal(signal.SIGTERM, interrupt)
    started = time.time()
    n, warm = args.rows, min(WARMUP_ROWS, args.rows)
    tmp = Path(tempfile.mkdtemp(prefix="bench-mysql-"))
    console.print(
        f"[bold]MySQL bench[/bold] (MariaDB -> PostgreSQL): {n:,} rows, {os.cpu_count()} cores,"
        f" 'batch.rows' = {BATCH_ROWS:,}, 'tasks.max' = {TASKS}; temporary home {tmp};"
        f" load average {load()}"
    )
    srv = Servers()
    cq: Connectql | None = None
    runs: list[Run] = []
    lat: Latency | None = None
    bad = False
    try:
        srv.start()
        want = fill_source(srv, n, warm)
        want_warm = srv.my_checksum("orders_warm")

        console.print("[bold]1. Snapshot + sink[/bold]")
        runs.append(run_pipe(srv, "pipedb", want, "pipe mariadb | psql \\copy (1st)"))
        console.print(f"  pipe (1st): {runs[-1].seconds:.2f} s, {runs[-1].check}")

        steps = None
        if not args.skip_breakdown:
            console.print("  timing the source's read outside Spark ...")
            steps = breakdown(srv, n)

        cq = Connectql(tmp / "home", "mysql")
        console.print(f"  the Worker's SparkSession started in {cq.session_s:.1f} s")
        warm_run = bulk(cq, srv, "warm", "orders_warm", warm, "warmdb", want_warm)
        warm_run.counted = False
        runs.append(warm_run)
        console.print(f"  warm-up: {warm_run.seconds:.2f} s, {warm_run.check}")
        runs.append(bulk(cq, srv, "bulk", "orders", n, "bulkdb", want))
        console.print(f"  (a) bulk, tasks.max {TASKS}: {runs[-1].seconds:.2f} s, {runs[-1].check}")
        runs.append(bulk(cq, srv, "bulk1", "orders", n, "bulk1db", want, tasks=1))
        console.print(f"  (a) bulk, tasks.max 1: {runs[-1].seconds:.2f} s, {runs[-1].check}")
        runs.append(run_pipe(srv, "pipedb", want, "pipe mariadb | psql \\copy (2nd)"))
        console.print(f"  pipe (2nd): {runs[-1].seconds:.2f} s, {runs[-1].check}")
        info = srv.pg_create("cdcdb")
        cdc_run = cq.cdc(
            n,
            srv.my_options(),
            srv.pg_options("cdcdb"),
            info,
            lambda: check_text(srv.pg_checksum(info), want),
            timeout=max(600.0, n / 1000),
        )
        runs.append(cdc_run)
        console.print(f"  (b) cdc snapshot: {cdc_run.seconds:.2f} s, {cdc_run.check}")

        pipe_s = pipe_mean(runs)
        print_snapshot(runs, pipe_s, cq, CHECK_DOC, PHASES)
        if steps is not None:
            console.print("[bold]2. Where the source's time goes[/bold]")
            console.print(breakdown_table(steps, n, pipe_s))

        lat = latency_section(
            args.skip_latency, cdc_run, lambda: measure_latency(srv, cq, n, args.seconds)
        )
        console.print(summary_table(runs, pipe_s, lat))
        bad = failed(runs, lat)
    except KeyboardInterrupt:
        console.print("[red]interrupted: stopping the worker and the servers[/red]")
        bad = True
    finally:
        close(cq, srv.stop, tmp, args.keep)
    console.print(f"bench took {time.time() - started:.0f} s; load average {load()}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
