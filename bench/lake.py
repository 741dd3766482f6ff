"""Issue 52's lake bench: a PostgreSQL table into a Delta and an Iceberg table by connectql against
the libraries written to directly, and the commit rate a cdc stream sustains into each format.

    .venv/bin/python -m bench.lake [--rows 1000000] [--cdc-rows 100000] [--rate 200]
                                   [--seconds 30] [--keep]

A private PostgreSQL (bench.postgres.Databases: wal_level logical, fsync off) holds

    srcdb.items (id bigint primary key, name text, qty int, price numeric(12,2), updated timestamp)

with --rows rows (names with non-ASCII text). One warm Worker (its SparkSession started and a
WARMUP_ROWS copy into each format run first, not counted) runs everything of connectql's.

1. Copies, each into a new table, mode append, each timed from the first CREATE (or the first
   read) until the table is committed:
   - connectql: a bulk `run = 'once'` postgres source ('tasks.max' 2) and a `run = 'once'` delta
     sink (a local path) / iceberg sink (a SQL catalog on SQLite, a local warehouse);
   - the yardstick: connectorx reading the table straight into Arrow (2 partitions on id, price
     read as text and cast, as connectql's reader does), then `deltalake.write_deltalake` /
     pyiceberg's `table.append` of that Arrow table, in this process.
   Every table is read back (deltalake, pyiceberg) and checked by value against the source:
   count, sum of id, sum of price and the MD5 of the names in id order.
2. A cdc stream's commits: a cdc source on srcdb.live (--cdc-rows rows) and two upsert sinks
   from its stream, a Delta and an Iceberg table, at their default trigger (a commit as fast
   as records arrive). Once both hold the snapshot, a writer applies --rate changes/s for
   --seconds s (each its own transaction: half updates of existing ids, a quarter inserts, a
   quarter deletes). Per format: commits per minute over the writer's window (from the table's
   own log: Delta's history, Iceberg's snapshots' batch ids), changes/s the writer applied,
   and the lag at the end: seconds from the writer's last commit until the table equals the
   source by value (as in 1).

Timings are reported, never judged; the exit status is 1 when a check fails. The machine's load
moves every figure: compare connectql with its yardstick within one run."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import signal
import statistics
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from rich.table import Table

from bench.common import Connectql, console, execute, interrupt, load, remove_tmp

WARMUP_ROWS = 20_000
TASKS = 2
BATCH_ROWS = 200_000
CDC_TIMEOUT_S = 600.0
LAG_TIMEOUT_S = 300.0
COLUMNS = ("id", "name", "price")  # what the check reads back

TABLE_DDL = (
    "CREATE TABLE {name} (id bigint PRIMARY KEY, name text, qty int, price numeric(12,2),"
    " updated timestamp)"
)
FILL_SQL = """
INSERT INTO {name}
SELECT g,
       (ARRAY['widget', 'gadget', 'Gerät', 'café crème', '部品'])[1 + g % 5] || ' ' || g,
       g % 1000,
       round(((g * 7919) % 1000000) / 100.0, 2),
       timestamp '2025-01-01' + g * interval '1 second'
FROM generate_series(1::bigint, {n}) g
"""
SUMS_SQL = (
    "SELECT count(*), coalesce(sum(id), 0), coalesce(sum(price), 0),"
    " md5(coalesce(string_agg(name, E'\\n' ORDER BY id), '')) FROM {name}"
)


@dataclass
class Copy:
    method: str
    seconds: float
    rows: int
    check: str
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.check.startswith("OK")


@dataclass
class Stream:
    target: str
    commits: int
    window_s: float
    applied: int
    lag_s: float | None
    check: str
    batches: str = "-"  # the sink's batches (rides) in the window: count, median ms

    @property
    def ok(self) -> bool:
        return self.check.startswith("OK")


# --------------------------------------------------------------------------------------------
# Checks: the same sums on the source and on a table read back
# --------------------------------------------------------------------------------------------


def source_sums(info: str, table: str) -> tuple:
    count, ids, price, names = execute(info, SUMS_SQL.format(name=table))[0]
    return int(count), int(ids), Decimal(price), names


def arrow_sums(rows: pa.Table | None) -> tuple | None:
    """SUMS_SQL's figures of rows read back from a lake table."""
    if rows is None:
        return None
    rows = rows.sort_by("id")
    names = "\n".join(n for n in rows.column("name").to_pylist() if n is not None)
    return (
        rows.num_rows,
        int(pc.sum(rows.column("id")).as_py() or 0),
        Decimal(pc.sum(rows.column("price")).as_py() or 0),
        hashlib.md5(names.encode()).hexdigest(),
    )


def judge(got: tuple | None, want: tuple) -> str:
    if got == want:
        return f"OK ({got[0]:,} rows; sums and names' MD5 equal)"
    if got is None:
        return "FAIL: no table"
    labels = ("count", "sum(id)", "sum(price)", "md5(names)")
    return "FAIL: " + ", ".join(
        f"{k} {g} != {w}" for k, g, w in zip(labels, got, want, strict=True) if g != w
    )


def delta_rows(path: Path) -> pa.Table | None:
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(str(path)).to_pyarrow_table(columns=list(COLUMNS))
    except TableNotFoundError:
        return None


class Lake:
    """The bench's SQL catalog (SQLite) and warehouse, as connectql's options and as pyiceberg's
    catalog."""

    def __init__(self, root: Path):
        (root / "wh").mkdir(parents=True, exist_ok=True)
        self.uri, self.warehouse = f"sqlite:///{root}/catalog.db", str(root / "wh")
        self.delta_root = root / "delta"

    def options(self, table: str) -> str:
        return f"'catalog.uri' = '{self.uri}', warehouse = '{self.warehouse}', table = '{table}'"

    def catalog(self):
        from pyiceberg.catalog.sql import SqlCatalog

        return SqlCatalog("connectql", uri=self.uri, warehouse=f"file://{self.warehouse}")

    def rows(self, table: str) -> pa.Table | None:
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        from connectql.connectors.iceberg.catalog import pooled

        try:
            with pooled():  # no pyiceberg thread left behind
                return self.catalog().load_table(table).scan(selected_fields=COLUMNS).to_arrow()
        except (NoSuchTableError, NoSuchNamespaceError):
            return None

    def batches_since(self, table: str, since: float, until: float) -> int:
        """Commits of connectql's sink in [since, until) (epoch s): its batch ids among the
        snapshots (an upsert's delete and append are two snapshots of one commit)."""
        from connectql.connectors.iceberg.catalog import pooled
        from connectql.connectors.iceberg.sink import BATCH

        with pooled():
            snapshots = self.catalog().load_table(table).snapshots()
        return len(
            {
                s.summary.additional_properties.get(BATCH)
                for s in snapshots
                if s.summary is not None and since <= s.timestamp_ms / 1000 < until
            }
        )


def delta_commits_since(path: Path, since: float, until: float) -> int:
    from deltalake import DeltaTable

    history = DeltaTable(str(path)).history()
    return sum(1 for h in history if since <= h["timestamp"] / 1000 < until)


# --------------------------------------------------------------------------------------------
# 1. Copies
# --------------------------------------------------------------------------------------------


def fill(info: str, table: str, n: int) -> None:
    t0 = time.perf_counter()
    execute(info, TABLE_DDL.format(name=table))
    execute(info, FILL_SQL.format(name=table, n=int(n)))
    execute(info, f"VACUUM (FREEZE, ANALYZE) {table}")
    console.print(f"  srcdb.{table}: {n:,} rows in {time.perf_counter() - t0:.1f} s")


COPY_SQL = """
CREATE SOURCE CONNECTOR {label}_src FROM postgres INTO {label}_s WITH (
  {conn}, table = '{table}', mode = 'bulk', run = 'once',
  'batch.rows' = {batch}, 'tasks.max' = {tasks});
CREATE SINK CONNECTOR {label}_dst TO {sink} FROM {label}_s WITH (
  {target}, mode = 'append', run = 'once', 'tasks.max' = {tasks});
"""


def connectql_copy(cq: Connectql, conn: str, table: str, label: str, sink: str, target: str):
    """Seconds of a bulk source and a lake sink, both run once; problems ('' when none)."""
    script = COPY_SQL.format(label=label, conn=conn, table=table, batch=BATCH_ROWS, tasks=TASKS,
                             sink=sink, target=target)  # fmt: skip
    t0, wall = time.perf_counter(), time.time()
    cq.run(script)
    cq.worker.wait_for_once()
    seconds = time.perf_counter() - t0
    source_s = cq.finished_at().get(f"{label}_src", float("nan")) - wall
    note = f"source FINISHED at {source_s:.1f} s, the sink {seconds - source_s:.1f} s after"
    return seconds, cq.problems([f"{label}_src", f"{label}_dst"], "FINISHED"), note


def copies(cq: Connectql, dbs, lake: Lake, table: str, label: str, n: int, want) -> list[Copy]:
    """`table` into a Delta and an Iceberg table by connectql, each checked."""
    conn = dbs.options("srcdb")
    out = []
    path = lake.delta_root / label
    seconds, bad, note = connectql_copy(cq, conn, table, f"{label}_delta", "delta",
                                        f"path = '{path}'")  # fmt: skip
    check = f"FAIL: {bad}" if bad else judge(arrow_sums(delta_rows(path)), want)
    out.append(Copy(f"connectql postgres -> delta ({label})", seconds, n, check, note))
    name = f"bench.{label}"
    seconds, bad, note = connectql_copy(cq, conn, table, f"{label}_ice", "iceberg",
                                        lake.options(name))  # fmt: skip
    check = f"FAIL: {bad}" if bad else judge(arrow_sums(lake.rows(name)), want)
    out.append(Copy(f"connectql postgres -> iceberg ({label})", seconds, n, check, note))
    return out


def read_arrow(dbs, table: str) -> pa.Table:
    """The yardstick's read: connectorx straight into Arrow, price as text cast to its decimal
    (connectorx keeps 10 digits of scale; connectql reads it the same way)."""
    import connectorx

    s = dbs.server
    address = f"postgresql://{s.user}:@{s.host}:{s.port}/srcdb"
    sql = f"SELECT id, name, qty, price::text AS price, updated FROM {table}"
    got = connectorx.read_sql(address, sql, return_type="arrow", partition_on="id",
                              partition_num=TASKS)  # fmt: skip
    return pa.table(
        {
            "id": got.column("id"),
            "name": got.column("name"),
            "qty": got.column("qty").cast(pa.int32()),
            "price": got.column("price").cast(pa.decimal128(12, 2)),
            "updated": got.column("updated").cast(pa.timestamp("us")),
        }
    )


def yardsticks(dbs, lake: Lake, table: str, n: int, want) -> list[Copy]:
    """The same copies by the libraries themselves: a read into Arrow, then each write."""
    from deltalake import write_deltalake

    from connectql.connectors.iceberg.catalog import pooled

    out = []
    t0 = time.perf_counter()
    rows = read_arrow(dbs, table)
    read_s = time.perf_counter() - t0
    note = f"connectorx read {read_s:.2f} s"
    path = lake.delta_root / "yard"
    t1 = time.perf_counter()
    write_deltalake(str(path), rows, mode="append")
    seconds = read_s + time.perf_counter() - t1
    check = judge(arrow_sums(delta_rows(path)), want)
    out.append(Copy("connectorx + deltalake.write_deltalake", seconds, n, check, note))
    t1 = time.perf_counter()
    with pooled():
        catalog = lake.catalog()
        catalog.create_namespace_if_not_exists("yard")
        catalog.create_table("yard.items", schema=rows.schema).append(rows)
    seconds = read_s + time.perf_counter() - t1
    check = judge(arrow_sums(lake.rows("yard.items")), want)
    out.append(Copy("connectorx + pyiceberg table.append", seconds, n, check, note))
    return out


# --------------------------------------------------------------------------------------------
# 2. A cdc stream's commits
# --------------------------------------------------------------------------------------------

CDC_SQL = """
CREATE SOURCE CONNECTOR live_src FROM postgres INTO live_s WITH (
  {conn}, table = 'live', mode = 'cdc');
CREATE SINK CONNECTOR live_delta TO delta FROM live_s WITH (path = '{path}', mode = 'upsert');
CREATE SINK CONNECTOR live_ice TO iceberg FROM live_s WITH ({target}, mode = 'upsert');
"""
LIVE = ("STARTING", "RUNNING", "RESTARTING", "STALLED")


def readers(lake: Lake):
    """{target: a function reading its table's checked columns}."""
    path = lake.delta_root / "live"
    return {"delta": lambda: delta_rows(path), "iceberg": lambda: lake.rows("bench.live")}


def change(conn, seq: int, rows: int) -> None:
    """Change `seq` of the writer, its own transaction: updates and deletes of distinct ids,
    inserts of new ids."""
    kind = seq % 4
    if kind in (0, 1):
        conn.execute("UPDATE live SET qty = qty + 1, price = price + 0.01, name = %s"
                     " WHERE id = %s", (f"changed {seq}", 1 + (seq * 7919) % rows))  # fmt: skip
    elif kind == 2:
        conn.execute("INSERT INTO live VALUES (%s, %s, %s, 9.99, localtimestamp)",
                     (rows + 1 + seq, f"new {seq}", seq))  # fmt: skip
    else:
        conn.execute("DELETE FROM live WHERE id = %s", (1 + (seq * 104729) % rows,))


def writer(info: str, rows: int, rate: float, seconds: float) -> tuple[int, float, float]:
    """`rate` changes/s for `seconds`; (changes, first commit, last commit) in epoch s."""
    with psycopg.connect(info, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = on")  # logical decoding sees flushed WAL only
        t0 = time.time()
        total = int(rate * seconds)
        for seq in range(total):
            delay = t0 + seq / rate - time.time()
            if delay > 0:
                time.sleep(delay)
            change(conn, seq, rows)
        return total, t0, time.time()


def cdc_stream(cq: Connectql, dbs, lake: Lake, rows: int, rate: float, seconds: float):
    """The cdc source and its two upsert sinks under the writer; a Stream per format."""
    info = dbs.info("srcdb")
    cq.run(CDC_SQL.format(conn=dbs.options("srcdb"), path=lake.delta_root / "live",
                          target=lake.options("bench.live")))  # fmt: skip
    t0 = time.perf_counter()
    done, checks = wait_equal(cq, readers(lake), source_sums(info, "live"), CDC_TIMEOUT_S)
    for target, check in checks.items():
        took = f" ({done[target] - t0:.1f} s)" if target in done else ""
        console.print(f"  snapshot in {target}: {check}{took}")
    if len(done) < len(checks):
        return [Stream(t, 0, 0.0, 0, None, f"snapshot: {c}") for t, c in checks.items()]
    console.print(f"  writer: {rate:.0f} changes/s for {seconds:.0f} s; load {load()}")
    applied, first, last = writer(info, rows, rate, seconds)
    console.print(f"  the cdc source's batches then: {batches(cq, SINKS['source'], first, last)}")
    last_perf = time.perf_counter()
    done, checks = wait_equal(cq, readers(lake), source_sums(info, "live"), LAG_TIMEOUT_S)
    return [
        Stream(target, commits(lake, target, first, last), last - first, applied,
               done[target] - last_perf if target in done else None, checks[target],
               batches(cq, SINKS[target], first, last))
        for target in checks
    ]  # fmt: skip


SINKS = {"delta": "live_delta", "iceberg": "live_ice", "source": "live_src"}


def batches(cq: Connectql, name: str, since: float, until: float) -> str:
    """'count, median ms' of a connector's batches with rows started in [since, until) (epoch
    s), from the catalog's connector_metrics (a ride of a chained sink is a row too)."""
    sql = (
        "SELECT duration_ms FROM connector_metrics WHERE connector = ? AND input_rows > 0"
        " AND started_at >= to_timestamp(?)::TIMESTAMP AND started_at < to_timestamp(?)::TIMESTAMP"
    )
    ms = [r[0] for r in cq.worker.catalog.read(sql, [name, since, until], figures=True)[1]]
    return f"{len(ms)}, {statistics.median(ms):.0f} ms" if ms else "-"


def wait_equal(cq: Connectql, reads: dict, want, timeout: float) -> tuple[dict, dict]:
    """Polls every table until it equals `want`: ({target: perf_counter when equal}, {target:
    its check}); a connector out of LIVE ends the wait."""
    t0 = time.perf_counter()
    done: dict[str, float] = {}
    checks = {target: "FAIL: not read" for target in reads}
    while len(done) < len(reads) and time.perf_counter() - t0 < timeout:
        for target, read in reads.items():
            if target not in done:
                checks[target] = judge(arrow_sums(read()), want)
                if checks[target].startswith("OK"):
                    done[target] = time.perf_counter()
        bad = cq.problems(["live_src", "live_delta", "live_ice"], *LIVE)
        if bad:
            return done, {t: c if t in done else f"FAIL: {bad}" for t, c in checks.items()}
        time.sleep(0.25)
    return done, checks


def commits(lake: Lake, target: str, since: float, until: float) -> int:
    if target == "delta":
        return delta_commits_since(lake.delta_root / "live", since, until)
    return lake.batches_since("bench.live", since, until)


# --------------------------------------------------------------------------------------------
# Tables and main
# --------------------------------------------------------------------------------------------


def copies_table(title: str, results: list[Copy], yard: dict[str, float]) -> Table:
    t = Table(title=title, title_justify="left",
              caption="x yardstick: seconds / the same format's connectorx + library write",
              caption_justify="left")  # fmt: skip
    for col in ("method", "seconds", "rows/s", "x yardstick", "check", "note"):
        t.add_column(
            col, justify="right" if col in ("seconds", "rows/s", "x yardstick") else "left"
        )
    for r in results:
        fmt = "delta" if "delta" in r.method else "iceberg"
        ratio = f"{r.seconds / yard[fmt]:.2f}" if yard.get(fmt) else "-"
        t.add_row(r.method, f"{r.seconds:.2f}", f"{r.rows / r.seconds:,.0f}", ratio,
                  r.check if r.ok else f"[red]{r.check}[/red]", r.note)  # fmt: skip
    return t


def streams_table(title: str, results: list[Stream]) -> Table:
    t = Table(title=title, title_justify="left",
              caption="commits: table commits during the writer's window (Delta's history,"
              " Iceberg's batch ids); lag: from the writer's last commit until the table equals"
              " the source by value (each poll reads the whole table: +/- a poll's time);"
              " batches: the sink's (both ride the source's batches) with rows in the window,"
              " count and median time", caption_justify="left")  # fmt: skip
    cols = ("target", "commits", "commits/min", "changes", "changes/s", "lag s", "batches", "check")
    for col in cols:
        t.add_column(col, justify="left" if col in ("target", "check") else "right")
    for s in results:
        per_min = s.commits / s.window_s * 60 if s.window_s else 0.0
        per_s = s.applied / s.window_s if s.window_s else 0.0
        t.add_row(s.target, f"{s.commits}", f"{per_min:.1f}", f"{s.applied:,}", f"{per_s:.0f}",
                  "-" if s.lag_s is None else f"{s.lag_s:.1f}", s.batches,
                  s.check if s.ok else f"[red]{s.check}[/red]")  # fmt: skip
    return t


def arguments(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench.lake", description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000, help="rows copied in section 1")
    p.add_argument("--cdc-rows", type=int, default=100_000, help="rows of the cdc table")
    p.add_argument("--rate", type=float, default=200.0, help="the writer's changes/s")
    p.add_argument("--seconds", type=float, default=30.0, help="the writer's time")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    return p.parse_args(argv)


def run(args, dbs, cq_box: list, tmp: Path) -> bool:
    """Both sections; whether every check passed."""
    info = dbs.create("srcdb", table=None)
    for table, n in (("items", args.rows), ("warm", WARMUP_ROWS), ("live", args.cdc_rows)):
        fill(info, table, n)
    lake = Lake(tmp / "lake")
    cq = Connectql(tmp / "home", "postgres")
    cq_box.append(cq)
    console.print(f"  the worker's SparkSession started in {cq.session_s:.1f} s")
    warm = copies(cq, dbs, lake, "warm", "warm", WARMUP_ROWS, source_sums(info, "warm"))
    console.print(f"  warm-up (not counted): {', '.join(f'{w.seconds:.1f} s' for w in warm)}")
    want = source_sums(info, "items")
    console.print(f"[bold]1. {args.rows:,} rows into each format[/bold]; load {load()}")
    yard = yardsticks(dbs, lake, "items", args.rows, want)
    ours = copies(cq, dbs, lake, "items", "items", args.rows, want)
    by_fmt = {"delta": yard[0].seconds, "iceberg": yard[1].seconds}
    console.print(
        copies_table(f"postgres -> lake, {args.rows:,} rows, append", yard + ours, by_fmt)
    )
    console.print(f"[bold]2. cdc into each format[/bold] ({args.cdc_rows:,} rows); load {load()}")
    streams = cdc_stream(cq, dbs, lake, args.cdc_rows, args.rate, args.seconds)
    console.print(streams_table("cdc -> upsert sinks under a steady writer", streams))
    return all(r.ok for r in warm + yard + ours + streams)


def main(argv: list[str] | None = None) -> int:
    from bench.postgres import Databases

    args = arguments(argv)
    # pyiceberg warns of each upsert batch that only inserts (its delete matched nothing)
    warnings.filterwarnings("ignore", message="Delete operation did not match any records")
    signal.signal(signal.SIGTERM, interrupt)
    started = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="bench-lake-"))
    console.print(f"[bold]lake bench[/bold]: temporary directory {tmp}; load {load()}")
    dbs = Databases()
    cq_box: list[Connectql] = []
    ok = False
    try:
        dbs.start()
        ok = run(args, dbs, cq_box, tmp)
    except KeyboardInterrupt:
        console.print("[red]interrupted: stopping the worker and the server[/red]")
    finally:
        for cq in cq_box:
            with contextlib.suppress(Exception):
                cq.close()
        dbs.stop()
        remove_tmp(tmp, args.keep)
    threads = [
        t.name for t in threading.enumerate() if not t.daemon and t is not threading.main_thread()
    ]
    console.print(f"bench took {time.time() - started:.0f} s; load {load()}"
                  + (f"; threads left: {threads}" if threads else ""))  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
