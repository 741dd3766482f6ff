"""Datagen bench: connectql against hand-written PySpark, side by side in one run.

    .venv/bin/python -m bench.datagen [--rows 5000000] [--repeat 2]

1. Throughput. N datagen rows go into a stream (Parquet) and from the stream into a Parquet
   file sink, both hops `run = 'once'` (available-now):
   - connectql: a Worker in a fresh temporary home runs a CREATE SOURCE and a CREATE SINK
     statement, then `wait_for_once()`; timed from before the first statement to after the wait.
   - baseline: the same source (DatagenSource through the toolkit's `connectql_toolkit` data
     source) and the same two hops written directly with
     readStream / writeStream, trigger(availableNow=True) and awaitTermination.
   Both run in the same SparkSession (connectql.runtime.session.get_session), after a warm-up of
   WARMUP_ROWS through both paths (a session's first job runs 1.6-2.3x slower, NOTES.md); the
   order alternates per repetition. Each result is checked by value with DuckDB over the files
   committed in the sink's `_spark_metadata` log: exactly N rows, N distinct ids, 0..N-1.
   Between repetitions a Worker is released without stopping the SparkSession (see release());
   the session is stopped at the end of the section.
2. Start latency. `connectql --home H run script.sql` with a continuous datagen source
   (1000 rows/s) runs as a subprocess; the time from launch to the stream's first committed
   batch (`H/streams/s/_spark_metadata/0`, polled every 20 ms) is compared with the time a fresh
   interpreter needs to get a SparkSession from get_session(): the difference is the cost of a
   start beyond the session (worker, catalog, planning, query start, first batch). Two
   yardsticks put it in context: the same difference measured within the process (from the
   connector's STARTING event, logged right after the session is up), and the same continuous
   query written directly in PySpark (its first row, and its first row after its own session).
3. A summary table: each metric, connectql, the yardstick, the ratio or difference, the goal.
Figures are medians over --repeat repetitions; the machine's load moves them a lot.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import timezone
from pathlib import Path
from urllib.parse import unquote, urlparse

import duckdb
from rich.console import Console
from rich.table import Table

from connectql.connectors.datagen import DatagenSource
from connectql.toolkit.spark import FORMAT, spark_options

THROUGHPUT_GOAL = 1.15  # connectql time / baseline time
LATENCY_GOAL_S = 2.0  # first row after launch, beyond SparkSession start
WARMUP_ROWS = 100_000
POLL_S = 0.02
LATENCY_TIMEOUT_S = 180
BIN = Path(sys.executable).parent  # .venv/bin when run as .venv/bin/python

console = Console(width=132)

CONNECTQL_SQL = """
CREATE SOURCE CONNECTOR gen FROM datagen INTO s WITH ('rows.total' = {n}, 'tasks.max' = 2, run = 'once');
CREATE SINK CONNECTOR out TO file FROM s WITH (path = '{out}', format = 'parquet', run = 'once');
"""
CONTINUOUS_SQL = (
    "CREATE SOURCE CONNECTOR gen FROM datagen INTO s WITH ('rows.per.second' = 1000);\n"
)
BARE_CODE = """
import sys, time
from connectql.runtime.session import get_session
spark = get_session()
print("SESSION_READY", time.time(), flush=True)
from connectql.connectors.datagen import DatagenSource
from connectql.toolkit.spark import FORMAT, spark_options
given = spark_options(DatagenSource, {"rows.per.second": 1000}, set())
source = spark.readStream.format(FORMAT).options(**given).load()
query = (
    source.writeStream.format("parquet").option("path", sys.argv[1])
    .option("checkpointLocation", sys.argv[2]).start()
)
try:
    query.awaitTermination()
except KeyboardInterrupt:  # stop like connectql does, so nothing writes after exit
    query.stop()
    spark.stop()
"""
SESSION_CODE = (
    "import time\n"
    "from connectql.runtime.session import get_session\n"
    "spark = get_session()\n"
    "print(time.time(), flush=True)\n"
    "spark.stop()\n"
)


@dataclass
class Run:
    """One pass of N rows through source hop and sink hop."""

    path: str  # connectql | baseline
    label: str  # warm-up | rep 1 ...
    rows: int
    total_s: float
    source_s: float
    sink_s: float
    check: str  # OK ... | FAIL ...

    @property
    def ok(self) -> bool:
        return self.check.startswith("OK")


# --------------------------------------------------------------------------------------------
# Checking a sink by value
# --------------------------------------------------------------------------------------------


def committed_files(directory: Path) -> list[str]:
    """Data files in a Spark file sink's `_spark_metadata` log (latest compaction onwards).
    Written here, not imported from connectql, so the yardstick does not share its code."""
    meta = directory / "_spark_metadata"
    logs = sorted(
        (int(f.name.removesuffix(".compact")), f.name.endswith(".compact"), f)
        for f in meta.iterdir()
        if f.name.removesuffix(".compact").isdigit()
    )
    start = max((b for b, compact, _ in logs if compact), default=-1)
    files: dict[str, None] = {}
    for batch, _compact, f in logs:
        if batch < start:
            continue
        for line in f.read_text().splitlines()[1:]:
            entry = json.loads(line)
            path = unquote(urlparse(entry["path"]).path)
            if entry.get("action") == "delete":
                files.pop(path, None)
            else:
                files[path] = None
    return list(files)


def check_ids(directory: Path, n: int) -> str:
    """OK when the committed files hold exactly n rows with the distinct ids 0..n-1."""
    if not (directory / "_spark_metadata").is_dir():
        return "FAIL: no _spark_metadata"
    files = committed_files(directory)
    if not files:
        return "FAIL: no committed file"
    con = duckdb.connect()
    try:
        row = con.execute(
            "SELECT count(*), count(DISTINCT id), min(id), max(id) FROM read_parquet(?)", [files]
        ).fetchone()
    finally:
        con.close()
    if tuple(row) == (n, n, 0, n - 1):
        return "OK"
    return f"FAIL: rows, distinct, min, max = {tuple(row)}"


# --------------------------------------------------------------------------------------------
# The two paths
# --------------------------------------------------------------------------------------------


def run_connectql(n: int, tmp: Path, label: str):
    """N rows through a Worker; returns the Run and the Worker (released, catalog closed)."""
    from connectql.worker.worker import Worker

    out = tmp / "out"
    worker = Worker(home=tmp / "home")
    t0_wall, t0 = time.time(), time.perf_counter()
    for _stmt, _result in worker.run_script(CONNECTQL_SQL.format(n=n, out=out)):
        pass
    worker.wait_for_once()
    total = time.perf_counter() - t0
    finished, errors = connectql_outcome(worker)
    release(worker)
    source_s = finished.get("gen", float("nan")) - t0_wall
    check = check_ids(out, n) if not errors else f"FAIL: {errors}"
    return Run("connectql", label, n, total, source_s, total - source_s, check), worker


def connectql_outcome(worker) -> tuple[dict[str, float], str]:
    """When each connector reached FINISHED (epoch s, from the catalog's events) and the errors
    of any connector that did not."""
    _cols, rows = worker.catalog.query(
        "SELECT connector, max(time) FROM connector_events WHERE to_state = 'FINISHED'"
        " GROUP BY connector"
    )
    finished = {name: t.replace(tzinfo=timezone.utc).timestamp() for name, t in rows}
    _cols, bad = worker.catalog.query(
        "SELECT name, state, last_error FROM connectors WHERE state <> 'FINISHED'"
    )
    return finished, "; ".join(f"{name} {state}: {err}" for name, state, err in bad)


def release(worker) -> None:
    """Stop a Worker's queries and close its catalog, keeping the SparkSession for the next run.
    Worker.close(stop_spark=False) also stops the supervisor thread and removes the engine's
    listener; an older Worker without it: engine.stop_all() and catalog.close(), and its stale
    listener ignores later queries once its plans are cleared."""
    try:
        worker.close(stop_spark=False)
    except TypeError:
        worker.engine.stop_all()
        worker.catalog.close()
        worker.engine.plans.clear()
    root = logging.getLogger("connectql")
    for handler in list(root.handlers):
        if getattr(handler, "baseFilename", "").startswith(str(worker.home)):
            root.removeHandler(handler)
            handler.close()


def run_baseline(spark, n: int, tmp: Path, label: str) -> Run:
    """The same two hops written directly in PySpark."""
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)
    stream, out = tmp / "stream", tmp / "out"
    t0 = time.perf_counter()
    given = spark_options(DatagenSource, {"rows.total": n, "tasks.max": 2}, set())
    src = spark.readStream.format(FORMAT).options(**given).load()
    error = run_once(src, stream, tmp / "cp_source")
    source_s = time.perf_counter() - t0
    sink = spark.readStream.schema(src.schema).parquet(str(stream))
    error = error or run_once(sink, out, tmp / "cp_sink")
    total = time.perf_counter() - t0
    check = f"FAIL: {error}" if error else check_ids(out, n)
    return Run("baseline", label, n, total, source_s, total - source_s, check)


def run_once(df, path: Path, checkpoint: Path) -> str | None:
    """Run df into Parquet files at path until all available data is written; the first line
    of the error if the query fails."""
    query = (
        df.writeStream.format("parquet")
        .option("path", str(path))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    except Exception as e:  # a failed query is a FAIL of its run, not the end of the bench
        return str(e).splitlines()[0]
    return None


# --------------------------------------------------------------------------------------------
# Throughput section
# --------------------------------------------------------------------------------------------


def one_pass(path: str, n: int, label: str, workers: list) -> Run:
    from connectql.runtime.session import get_session

    with tempfile.TemporaryDirectory(prefix=f"bench-{path}-") as tmp:
        if path == "baseline":
            return run_baseline(get_session(), n, Path(tmp), label)
        run, worker = run_connectql(n, Path(tmp), label)
        workers.append(worker)
        return run


def start_session() -> None:
    """Start the shared SparkSession before anything is timed."""
    from connectql.runtime.session import get_session

    t0 = time.perf_counter()
    get_session()
    console.print(f"  SparkSession started in {time.perf_counter() - t0:.1f} s (not counted)")


def throughput(n: int, repeat: int) -> list[Run]:
    workers: list = []
    console.print(
        f"[bold]1. Throughput[/bold]: {n:,} datagen rows → stream → Parquet sink, run = 'once'."
        f" Warm-up first: {WARMUP_ROWS:,} rows through both paths (a session's first job runs"
        " 1.6-2.3x slower, NOTES.md); warm-up figures are shown but not counted."
    )
    start_session()
    runs = [one_pass(p, WARMUP_ROWS, "warm-up", workers) for p in ("connectql", "baseline")]
    for rep in range(repeat):
        order = ("connectql", "baseline") if rep % 2 == 0 else ("baseline", "connectql")
        runs += [one_pass(p, n, f"rep {rep + 1}", workers) for p in order]
        console.print(f"  rep {rep + 1}/{repeat} done ({' then '.join(order)})")
    from connectql.runtime.session import stop_session

    stop_session()  # every Worker was released (catalog closed); the session goes last
    return runs


def runs_table(runs: list[Run]) -> Table:
    table = Table(
        title="throughput runs",
        title_justify="left",
        caption="check: the sink's committed files (its _spark_metadata log) hold N rows,"
        " N distinct ids, min 0, max N-1 (DuckDB). connectql's hops are split at gen's FINISHED"
        " event, which the query listener records",
        caption_justify="left",
    )
    for col in ("run", "path", "rows", "total s", "source hop s", "sink hop s", "rows/s"):
        table.add_column(col, justify="right")
    table.add_column("check")
    for r in runs:
        table.add_row(
            r.label,
            r.path,
            f"{r.rows:,}",
            f"{r.total_s:.2f}",
            f"{r.source_s:.2f}",
            f"{r.sink_s:.2f}",
            f"{r.rows / r.total_s:,.0f}",
            r.check,
        )
    return table


def median_of(runs: list[Run], path: str, attr: str = "total_s") -> float:
    return statistics.median(getattr(r, attr) for r in runs if r.path == path)


# --------------------------------------------------------------------------------------------
# Start latency section
# --------------------------------------------------------------------------------------------


def first_row(tmp: Path) -> dict[str, float]:
    """Seconds from launching `connectql run` to its steps (see steps()), to the first
    committed batch in the stream ("first"), and from SIGINT to exit ("stop")."""
    home, script = tmp / "home", tmp / "continuous.sql"
    script.write_text(CONTINUOUS_SQL)
    cmd = [str(BIN / "connectql"), "--home", str(home), "run", str(script)]
    t0, first, stop_s = time_first_batch(cmd, home / "streams" / "s", tmp / "run.log")
    at = steps(home, t0)
    return {**at, "first": first, "own_extra": first - at["starting"], "stop": stop_s}


def bare_first_row(tmp: Path) -> dict[str, float]:
    """The same continuous query written directly in PySpark: seconds to its first batch, and
    beyond its own session start."""
    stream, log = tmp / "bare" / "s", tmp / "bare.log"
    cmd = [sys.executable, "-c", BARE_CODE, str(stream), str(tmp / "bare" / "cp")]
    t0, first, _stop = time_first_batch(cmd, stream, log)
    lines = [x for x in log.read_text(errors="replace").splitlines() if x.startswith("SESSION_")]
    ready = float(lines[0].split()[1]) - t0 if lines else float("nan")
    return {"bare": first, "bare_own_extra": first - ready}


def time_first_batch(cmd: list[str], stream: Path, log_path: Path) -> tuple[float, float, float]:
    """Launch cmd, wait for the stream's first committed batch, SIGINT it: returns (launch
    time, seconds to the first batch, seconds from SIGINT to exit)."""
    marker = stream / "_spark_metadata" / "0"
    with open(log_path, "wb") as log:
        t0 = time.time()
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=log_path.parent,
        )
        try:
            landed = poll_for(marker, proc, log_path)
        finally:
            stop_s = stop(proc)
    return t0, landed - t0, stop_s


def steps(home: Path, t0: float) -> dict[str, float]:
    """When (s after launch) connector gen entered STARTING (session up, statement planned) and
    RUNNING (query started), from the catalog; and when batch 0 was planned (its offset file)."""
    con = duckdb.connect(str(home / "catalog.duckdb"), read_only=True)
    try:
        rows = con.execute(
            "SELECT to_state, min(time) FROM connector_events WHERE connector = 'gen'"
            " GROUP BY to_state"
        ).fetchall()
    finally:
        con.close()
    at = {state: t.replace(tzinfo=timezone.utc).timestamp() - t0 for state, t in rows}
    offset0 = home / "checkpoints" / "gen" / "offsets" / "0"
    planned = offset0.stat().st_mtime - t0 if offset0.exists() else float("nan")
    nan = float("nan")
    return {
        "starting": at.get("STARTING", nan),
        "running": at.get("RUNNING", nan),
        "planned": planned,
    }


def poll_for(marker: Path, proc: subprocess.Popen, log: Path) -> float:
    deadline = time.time() + LATENCY_TIMEOUT_S
    while time.time() < deadline and proc.poll() is None:
        if marker.is_file() and marker.stat().st_size > 0:
            return time.time()
        time.sleep(POLL_S)
    tail = log.read_text(errors="replace")[-2000:]
    raise RuntimeError(f"no first batch in {marker} (exit code {proc.poll()}):\n{tail}")


def stop(proc: subprocess.Popen) -> float:
    """SIGINT (Ctrl-C) and wait for exit; SIGKILL after 60 s. Returns the seconds it took."""
    t0 = time.time()
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    return time.time() - t0


def session_start(tmp: Path) -> float:
    """Seconds from launching a fresh interpreter to get_session() returning."""
    t0 = time.time()
    done = subprocess.run(
        [sys.executable, "-c", SESSION_CODE],
        capture_output=True,
        text=True,
        cwd=tmp,
        timeout=LATENCY_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise RuntimeError(f"session start failed:\n{done.stderr[-2000:]}")
    return float(done.stdout.split()[0]) - t0


def latency(repeat: int) -> list[dict[str, float]]:
    console.print(
        "[bold]2. Start latency[/bold]: `connectql run` of a continuous datagen source"
        " (1000 rows/s) until its first batch is committed in the stream, against a bare"
        " get_session() in a fresh interpreter; both as subprocesses, order alternating."
    )
    rows = []
    for rep in range(repeat):
        with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
            row = latency_rep(Path(tmp), rep)
        rows.append(row)
        console.print(f"  rep {rep + 1}/{repeat} done")
    return rows


def latency_rep(tmp: Path, rep: int) -> dict[str, float]:
    """connectql run, bare session, bare query; the order rotates per repetition."""
    jobs = [
        ("run", lambda: first_row(tmp)),
        ("session", lambda: session_start(tmp)),
        ("bare", lambda: bare_first_row(tmp)),
    ]
    jobs = jobs[rep % 3 :] + jobs[: rep % 3]
    got = {name: job() for name, job in jobs}
    return {
        **got["run"],
        **got["bare"],
        "session": got["session"],
        "extra": got["run"]["first"] - got["session"],
        "bare_extra": got["bare"]["bare"] - got["session"],
    }


LATENCY_COLUMNS = {
    "session": "session",
    "starting": "STARTING",
    "running": "RUNNING",
    "planned": "planned",
    "first": "1st row",
    "extra": "1st - session",
    "own_extra": "1st - STARTING",
    "bare": "bare 1st",
    "bare_extra": "bare - session",
    "bare_own_extra": "bare - own",
    "stop": "stop",
}


def latency_table(rows: list[dict[str, float]]) -> Table:
    table = Table(
        title="start latency (seconds after launch)",
        title_justify="left",
        caption="session: bare get_session() in a fresh interpreter; STARTING / RUNNING: connector"
        " gen's states in the catalog (statement planned, session up / query started); planned:"
        " batch 0's offset file written; 1st row: _spark_metadata/0 seen; bare: the same"
        " continuous query written directly in PySpark, own: its own session-ready time;"
        " stop: SIGINT to exit",
        caption_justify="left",
    )
    table.add_column("rep", justify="right")
    for title in LATENCY_COLUMNS.values():
        table.add_column(title, justify="right")
    for i, r in enumerate(rows, 1):
        table.add_row(str(i), *(f"{r[k]:.2f}" for k in LATENCY_COLUMNS))
    table.add_row(
        "median", *(f"{statistics.median(r[k] for r in rows):.2f}" for k in LATENCY_COLUMNS)
    )
    return table


# --------------------------------------------------------------------------------------------
# Summary
# --------------------------------------------------------------------------------------------


def met(ok: bool) -> str:
    return "[green]yes[/green]" if ok else "[red]no[/red]"


def summary(n: int, runs: list[Run], lat: list[dict[str, float]]) -> Table:
    timed = [r for r in runs if r.label != "warm-up"]
    cq, base = median_of(timed, "connectql"), median_of(timed, "baseline")
    ratio = cq / base
    table = Table(title=f"summary (medians, {n:,} rows)", title_justify="left")
    for col in ("metric", "connectql", "baseline / yardstick", "ratio / difference", "goal"):
        table.add_column(col)
    table.add_column("met")
    table.add_row(
        "throughput wall time",
        f"{cq:.2f} s",
        f"{base:.2f} s",
        f"{ratio:.3f}",
        "<= 1.15",
        met(ratio <= THROUGHPUT_GOAL),
    )
    table.add_row(
        "throughput", f"{n / cq:,.0f} rows/s", f"{n / base:,.0f} rows/s", f"{base / cq:.3f}", "", ""
    )
    add_hops(table, timed)
    add_checks(table, runs)
    add_latency(table, lat)
    return table


def add_hops(table: Table, timed: list[Run]) -> None:
    for hop, attr in (("source hop", "source_s"), ("sink hop", "sink_s")):
        cq, base = median_of(timed, "connectql", attr), median_of(timed, "baseline", attr)
        table.add_row(f"  {hop}", f"{cq:.2f} s", f"{base:.2f} s", f"{cq / base:.3f}", "", "")


def add_checks(table: Table, runs: list[Run]) -> None:
    def status(path: str) -> str:
        mine = [r for r in runs if r.path == path]
        bad = sum(not r.ok for r in mine)
        return f"OK ({len(mine)} runs)" if not bad else f"FAIL ({bad} of {len(mine)} runs)"

    cq, base = status("connectql"), status("baseline")
    ok = all(r.ok for r in runs)
    table.add_row("result by value (all runs)", cq, base, "", "all OK", met(ok))


def add_latency(table: Table, lat: list[dict[str, float]]) -> None:
    med = {k: statistics.median(r[k] for r in lat) for k in lat[0]}
    table.add_row(
        "first row after launch, beyond session",
        f"{med['first']:.2f} s",
        f"{med['session']:.2f} s (session)",
        f"{med['extra']:+.2f} s",
        "< 2 s",
        met(med["extra"] < LATENCY_GOAL_S),
    )
    table.add_row(
        "  same process: first row - own session",
        f"{med['own_extra']:.2f} s",
        f"{med['bare_own_extra']:.2f} s (bare)",
        f"{med['own_extra'] - med['bare_own_extra']:+.2f} s",
        "(info)",
        "",
    )
    table.add_row(
        "  first row: connectql vs bare PySpark",
        f"{med['first']:.2f} s",
        f"{med['bare']:.2f} s",
        f"{med['first'] - med['bare']:+.2f} s",
        "(info)",
        "",
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.datagen", description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=5_000_000, help="rows per run (default 5,000,000)")
    p.add_argument("--repeat", type=int, default=2, help="repetitions per path (default 2)")
    args = p.parse_args(argv)
    started = time.perf_counter()
    runs = throughput(args.rows, args.repeat)
    console.print(runs_table(runs))
    lat = latency(args.repeat)
    console.print(latency_table(lat))
    console.print(summary(args.rows, runs, lat))
    console.print(f"bench took {time.perf_counter() - started:.0f} s")
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # like connectql's CLI: no teardown noise from Spark's threads and DuckDB
