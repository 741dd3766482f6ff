"""Many connectors bench: N datagen sources and N file sinks at once in one worker.

    .venv/bin/python -m bench.many [--pairs 10] [--seconds 60] [--baseline-seconds 20] [--settle 10]
        [--set KEY=VALUE ...] [--interval '1 second'] [--keep]

Shows that 2*N continuous connectors run together in one `connectql run` worker on this small
machine (all reach RUNNING and move data) and what each costs in memory.

1. Two runs, each a real worker process in a fresh temporary home: first a baseline with 1 pair,
   then N pairs. The script holds, for i = 1..N,
       CREATE SOURCE CONNECTOR gen_i FROM datagen INTO s_i WITH ('rows.per.second' = 200, ...);
       CREATE SINK CONNECTOR out_i TO file FROM s_i WITH (path = '<tmp>/out_i', format = 'parquet');
   and runs as `python -m connectql.cli --home HOME run SCRIPT` (its own session, output to a
   file).
2. While it runs the catalog is locked by the worker, so progress is read from the file system:
   every POLL_S the committed rows of each stream (HOME/streams/s_i, written by gen_i) and of each
   sink directory (out_i), from the `_spark_metadata` log (connectql.catalog.streams.
   committed_files) with the row count of each newly committed file from its Parquet footer
   (DuckDB parquet_file_metadata). A connector is "moving" once its directory holds a committed
   row. The measurement window starts --settle seconds after all 2*N are moving (the first
   batches are slow, ~10-20 s: the backlog they leave is caught up by then), or
   START_TIMEOUT_S after launch if they are not all moving by then, and lasts --seconds
   (the baseline: --baseline-seconds); rows/s per connector = rows committed in the window / its
   length, to compare with the 200 rows/s each source generates.
3. Memory, sampled at the same time: the PSS (/proc/PID/smaps_rollup; RSS where it is missing)
   of every process of the worker's session (start_new_session, so the session id is the
   worker's pid; descendants that left the session are added by walking parent pids), split
   into the JVM, the Python driver (the `connectql run` process) and the other Python processes
   (PySpark's daemon, its workers and the Python data source processes). Peak = the highest
   total sampled; steady = the median over the window. Per-connector overhead =
   (steady total with N pairs - steady total with 1 pair) / (2 * (N - 1)). The JVM's part grows
   with its heap over time whatever runs (spark.driver.memory = 2g): treat the JVM delta as rough.
4. After the window the worker gets SIGINT (Ctrl-C: queries stop gracefully), up to STOP_TIMEOUT_S;
   whatever is left of its session is then killed. The catalog, free again, gives each
   connector's final state, rows_total and last_error, and connector_events the state history:
   when each reached RUNNING, its state when the SIGINT was sent, and how many RESTARTING /
   FAILED / STALLED events there were before it (a CANNOT_OPEN_SOCKET failure at start is
   retried by the supervisor: each retry is a RESTARTING event) and from it on (the stop itself).
   A connector is OK when it reached RUNNING, was RUNNING at the SIGINT and committed rows.
5. Tables: per connector, memory per run, and a summary, which also compares the sources'
   rows_total in the catalog (from the progress listener) with their committed rows, and says
   whether Spark's `streams` listener queue overflowed (spark.log), which loses progress events.
--set KEY=VALUE adds `SET key = 'value';` at the top of both scripts and --interval gives every
connector a 'trigger.interval': to try scheduler settings against the same yardstick.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import timezone
from pathlib import Path

import duckdb
from rich.console import Console
from rich.table import Table

from bench.common import remove_tmp
from connectql.catalog.streams import committed_files

ROWS_PER_SECOND = 200
FIELDS = "id BIGINT SEQUENCE, v DOUBLE RANDOM(0,1)"
POLL_S = 2.0
START_TIMEOUT_S = 120  # launch to all moving; then measure anyway and report who is not
STOP_TIMEOUT_S = 120
SETTLE_S = 10
KILL_GRACE_S = 10

console = Console(width=140)

SOURCE_SQL = (
    "CREATE SOURCE CONNECTOR gen_{i} FROM datagen INTO s_{i}"
    " WITH ('rows.per.second' = {rate}, fields = '{fields}'{extra});\n"
)
SINK_SQL = (
    "CREATE SINK CONNECTOR out_{i} TO file FROM s_{i}"
    " WITH (path = '{out}', format = 'parquet'{extra});\n"
)


# --------------------------------------------------------------------------------------------
# Memory of a process tree
# --------------------------------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, int] | None:
    """(ppid, session id) of a process, from /proc/PID/stat (comm may hold spaces and parens)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2 :].split()
    return int(rest[1]), int(rest[3])


def tree_pids(root: int) -> list[int]:
    """The processes of root's session plus every descendant of root."""
    parents: dict[int, int] = {}
    members = {root}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        got = _stat(int(entry))
        if got is None:
            continue
        parents[int(entry)] = got[0]
        if got[1] == root:
            members.add(int(entry))
    grew = True
    while grew:
        new = {pid for pid, ppid in parents.items() if ppid in members} - members
        members |= new
        grew = bool(new)
    return sorted(pid for pid in members if pid in parents)


def pss_kb(pid: int) -> int:
    """Proportional set size in kB; RSS when smaps_rollup is unavailable; 0 if gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def kind_of(pid: int, root: int) -> str:
    """jvm | driver | python | other."""
    if pid == root:
        return "driver"
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return "other"
    name = os.path.basename(argv0)
    if name == "java":
        return "jvm"
    if name.startswith("python"):
        return "python"
    return "other"


@dataclass
class Sample:
    t: float  # seconds after launch
    kb: dict[str, int]  # jvm, driver, python, other
    procs: int

    @property
    def total(self) -> int:
        return sum(self.kb.values())


def sample_memory(root: int, t: float) -> Sample:
    kb = {"jvm": 0, "driver": 0, "python": 0, "other": 0}
    pids = tree_pids(root)
    for pid in pids:
        kb[kind_of(pid, root)] += pss_kb(pid)
    return Sample(t, kb, len(pids))


# --------------------------------------------------------------------------------------------
# Committed rows from the file system
# --------------------------------------------------------------------------------------------


class RowCounter:
    """Committed rows of a file sink directory; each committed file's footer is read once."""

    def __init__(self):
        self.con = duckdb.connect()
        self.rows_of: dict[str, int] = {}

    def count(self, directory: Path) -> int:
        files = committed_files(directory)
        new = [f for f in files if f not in self.rows_of]
        if new:
            try:
                got = self.con.execute(
                    "SELECT file_name, num_rows FROM parquet_file_metadata(?)", [new]
                ).fetchall()
            except duckdb.Error:  # e.g. a file removed meanwhile: try again next poll
                got = []
            self.rows_of.update({name: int(n) for name, n in got})
        return sum(self.rows_of.get(f, 0) for f in files)

    def close(self) -> None:
        self.con.close()


# --------------------------------------------------------------------------------------------
# One run of the worker
# --------------------------------------------------------------------------------------------


@dataclass
class Connector:
    name: str
    kind: str  # source | sink
    directory: Path
    rows: list[tuple[float, int]] = field(default_factory=list)  # (s after launch, rows)
    first_rows_at: float | None = None
    # from the catalog after the run
    running_at: float | None = None
    state_before_stop: str | None = None  # its last state before the SIGINT
    final_state: str | None = None
    rows_total: int | None = None
    last_error: str | None = None
    events: dict[str, int] = field(default_factory=dict)  # to_state -> count, before the SIGINT
    stop_events: dict[str, int] = field(default_factory=dict)  # the same, from the SIGINT on

    @property
    def ok(self) -> bool:
        """Reached RUNNING, was RUNNING when the stop began, and committed rows."""
        return (
            self.running_at is not None
            and self.state_before_stop == "RUNNING"
            and self.first_rows_at is not None
        )

    def rows_at(self, t: float) -> int:
        """Rows committed at the last poll at or before t."""
        return max((r for at, r in self.rows if at <= t), default=0)

    def final_rows(self) -> int:
        return self.rows[-1][1] if self.rows else 0


@dataclass
class RunResult:
    pairs: int
    connectors: list[Connector]
    samples: list[Sample]
    all_moving_at: float | None  # s after launch
    window: tuple[float, float] | None  # (start, end) s after launch, poll times
    stop_at: float  # SIGINT, s after launch
    stop_s: float  # SIGINT to exit
    exit_code: int | None
    left: list[str]  # kinds of the processes of its session alive KILL_GRACE_S after its exit
    log_errors: dict[str, int]
    listener_overflow: bool  # spark.log: the `streams` listener queue dropped events
    events: list[tuple] = field(default_factory=list)  # (t, connector, from, to, reason, error)

    def window_samples(self) -> list[Sample]:
        if self.window is None:
            return []
        a, b = self.window
        return [s for s in self.samples if a <= s.t <= b]

    def steady(self, part: str | None = None) -> float:
        """Median over the window (MB) of the total, or of one part."""
        picked = self.window_samples() or self.samples[-3:]
        values = [s.total if part is None else s.kb[part] for s in picked]
        return statistics.median(values) / 1024 if values else float("nan")

    def peak(self) -> float:
        return max((s.total for s in self.samples), default=0) / 1024

    def rate(self, c: Connector) -> float:
        if self.window is None:
            return float("nan")
        a, b = self.window
        return (c.rows_at(b) - c.rows_at(a)) / (b - a) if b > a else float("nan")

    @property
    def moving(self) -> int:
        return sum(c.first_rows_at is not None for c in self.connectors)


def write_script(
    pairs: int, tmp: Path, settings: list[str] | None = None, interval: str | None = None
) -> Path:
    """The script: `SET` statements (each setting 'key=value'), then the sources, then the
    sinks; `interval` becomes every connector's 'trigger.interval'."""
    script = tmp / f"many_{pairs}.sql"
    text = ""
    for setting in settings or []:
        key, _, value = setting.partition("=")
        text += f"SET {key.strip()} = '{value.strip()}';\n"
    extra = f", 'trigger.interval' = '{interval}'" if interval else ""
    text += "".join(
        SOURCE_SQL.format(i=i, rate=ROWS_PER_SECOND, fields=FIELDS, extra=extra)
        for i in range(1, pairs + 1)
    )
    text += "".join(
        SINK_SQL.format(i=i, out=tmp / f"out_{i}", extra=extra) for i in range(1, pairs + 1)
    )
    script.write_text(text)
    return script


def run_worker(pairs: int, seconds: float, args: argparse.Namespace, tmp: Path) -> RunResult:
    """Launch `connectql run` with `pairs` source/sink pairs, watch it until all are moving plus
    args.settle plus `seconds`, stop it gracefully and read its catalog."""
    settle = args.settle
    tmp.mkdir(parents=True, exist_ok=True)
    home = tmp / f"home_{pairs}"
    script = write_script(pairs, tmp, args.set, args.interval)
    connectors = [
        Connector(f"gen_{i}", "source", home / "streams" / f"s_{i}") for i in range(1, pairs + 1)
    ] + [Connector(f"out_{i}", "sink", tmp / f"out_{i}") for i in range(1, pairs + 1)]
    log_path = tmp / f"run_{pairs}.log"
    cmd = [sys.executable, "-m", "connectql.cli", "--home", str(home), "run", str(script)]
    console.print(
        f"[bold]{pairs} pair(s)[/bold]: {2 * pairs} connectors, `connectql run` as pid ...",
        end="",
    )
    counter = RowCounter()
    samples: list[Sample] = []
    with open(log_path, "wb") as log:
        t0 = time.time()
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=tmp,
            start_new_session=True,
        )
        console.print(f" {proc.pid}")
        try:
            all_moving_at, window = watch(proc, t0, seconds, settle, connectors, counter, samples)
        finally:
            stop_at = time.time() - t0
            stop_s, left = stop(proc)
    for c in connectors:  # what the graceful stop committed
        c.rows.append((time.time() - t0, counter.count(c.directory)))
    counter.close()
    text = log_path.read_text(errors="replace") + read_or_empty(home / "worker.log")
    spark_log = read_or_empty(home / "spark.log")
    result = RunResult(
        pairs,
        connectors,
        samples,
        all_moving_at,
        window,
        stop_at,
        stop_s,
        proc.returncode,
        left,
        log_errors(text),
        "Dropping event from queue streams" in spark_log,
    )
    if (home / "catalog.duckdb").is_file():
        read_catalog(home, t0, result)
    if proc.returncode not in (0, 130):
        console.print(f"[red]worker exited with {proc.returncode}[/red]; its output ends:")
        console.print(log_path.read_text(errors="replace")[-3000:], markup=False)
    return result


def watch(
    proc: subprocess.Popen,
    t0: float,
    seconds: float,
    settle: float,
    connectors: list[Connector],
    counter: RowCounter,
    samples: list[Sample],
) -> tuple[float | None, tuple[float, float] | None]:
    """Poll rows and memory until all connectors are moving (or the start timeout), then
    `settle` more seconds (the backlog of the slow first batches is caught up), then the window
    of `seconds`. Returns when all were moving and the window (s after launch, poll times)."""
    all_moving_at = window_start = None
    next_note = 10.0
    while proc.poll() is None:
        tick = time.time()
        t = tick - t0
        samples.append(sample_memory(proc.pid, t))
        for c in connectors:
            c.rows.append((t, counter.count(c.directory)))
            if c.first_rows_at is None and c.rows[-1][1] > 0:
                c.first_rows_at = t
        moving = sum(c.first_rows_at is not None for c in connectors)
        if all_moving_at is None and moving == len(connectors):
            all_moving_at = t
        if window_start is None and (
            (all_moving_at is not None and t >= all_moving_at + settle)
            or t > START_TIMEOUT_S  # not all moving: measure what is there anyway
        ):
            window_start = t
        if t >= next_note:
            next_note += 15.0
            console.print(
                f"  {t:5.0f} s: {moving}/{len(connectors)} moving,"
                f" {sum(c.rows[-1][1] for c in connectors):,} rows committed,"
                f" PSS {samples[-1].total / 1024:,.0f} MB in {samples[-1].procs} processes"
            )
        if window_start is not None and t - window_start >= seconds:
            return all_moving_at, (window_start, t)
        time.sleep(max(0.0, POLL_S - (time.time() - tick)))
    console.print(f"[red]  the worker exited early (code {proc.returncode})[/red]")
    end = samples[-1].t if samples else 0.0
    return all_moving_at, (window_start, end) if window_start is not None else None


def stop(proc: subprocess.Popen) -> tuple[float, list[str]]:
    """SIGINT the worker (graceful) and wait up to STOP_TIMEOUT_S; then end what is left of its
    session KILL_GRACE_S after its exit (SIGTERM, then SIGKILL). Returns (seconds from SIGINT to
    the worker's exit, kinds of the processes left then)."""
    t0 = time.time()
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        console.print(f"[red]  no exit {STOP_TIMEOUT_S} s after SIGINT: killing[/red]")
    stop_s = time.time() - t0
    if proc.poll() is not None:  # the JVM and Python workers may take a moment to follow
        deadline = time.time() + KILL_GRACE_S
        while time.time() < deadline and tree_pids(proc.pid):
            time.sleep(0.2)
    left = [kind_of(p, proc.pid) for p in tree_pids(proc.pid)]
    if left:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.time() + KILL_GRACE_S
            while time.time() < deadline and tree_pids(proc.pid):
                time.sleep(0.2)
    if proc.poll() is None:
        proc.wait()
    return stop_s, left


def read_or_empty(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


LOG_PATTERNS = {
    "CANNOT_OPEN_SOCKET": r"CANNOT_OPEN_SOCKET",
    "Python worker failed to connect back": r"failed to connect back",
    "Traceback": r"^Traceback",
    "ERROR lines": r"\bERROR\b",
}


def log_errors(text: str) -> dict[str, int]:
    return {k: len(re.findall(p, text, re.MULTILINE)) for k, p in LOG_PATTERNS.items()}


def read_catalog(home: Path, t0: float, result: RunResult) -> None:
    """Final state, rows_total, last_error and the event history of each connector."""
    from connectql.catalog.store import Catalog

    catalog = Catalog(home / "catalog.duckdb")
    try:
        _cols, rows = catalog.query(
            "SELECT name, state, rows_total, last_error FROM connectors ORDER BY name"
        )
        _cols, events = catalog.query(
            "SELECT time, connector, from_state, to_state, reason, error FROM connector_events"
            " ORDER BY time"
        )
    finally:
        catalog.close()
    by_name = {c.name: c for c in result.connectors}
    for name, state, rows_total, last_error in rows:
        if name in by_name:
            c = by_name[name]
            c.final_state, c.rows_total, c.last_error = state, rows_total, last_error
    for at, name, from_state, to_state, reason, error in events:
        t = at.replace(tzinfo=timezone.utc).timestamp() - t0
        result.events.append((t, name, from_state, to_state, reason, error))
        c = by_name.get(name)
        if c is None:
            continue
        if t >= result.stop_at:
            c.stop_events[to_state] = c.stop_events.get(to_state, 0) + 1
            continue
        c.events[to_state] = c.events.get(to_state, 0) + 1
        c.state_before_stop = to_state
        if to_state == "RUNNING" and c.running_at is None:
            c.running_at = t


# Tables
# --------------------------------------------------------------------------------------------


def fmt(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None or x != x else format(x, spec)


def yes(ok: bool) -> str:
    return "[green]yes[/green]" if ok else "[red]no[/red]"


def counts(events: dict[str, int]) -> str:
    picked = {k: v for k, v in events.items() if k in ("RESTARTING", "FAILED", "STALLED")}
    return ", ".join(f"{k} {v}" for k, v in sorted(picked.items())) or "-"


def connectors_table(r: RunResult) -> Table:
    table = Table(
        title=f"connectors, {r.pairs} pair(s)",
        title_justify="left",
        caption="times in s after launch; RUNNING: first RUNNING event; 1st rows: first poll"
        " (every ~2 s) that saw a committed row; rows/s: committed in the window; committed:"
        " rows in the _spark_metadata-listed files after the stop; at SIGINT: its state when the"
        " SIGINT was sent; rows_total, state, last_error: the catalog after the stop; R/F/S:"
        " RESTARTING / FAILED / STALLED events before the SIGINT; in stop: those from it on",
        caption_justify="left",
    )
    for col in ("connector", "RUNNING", "1st rows", "rows/s", "committed", "rows_total"):
        table.add_column(col, justify="right", no_wrap=True)
    for col in ("at SIGINT", "state", "R/F/S", "in stop"):
        table.add_column(col, no_wrap=True)
    table.add_column("last_error", overflow="fold", ratio=1)
    for c in r.connectors:
        table.add_row(
            c.name,
            fmt(c.running_at),
            fmt(c.first_rows_at),
            fmt(r.rate(c)),
            f"{c.final_rows():,}",
            "-" if c.rows_total is None else f"{c.rows_total:,}",
            c.state_before_stop or "-",
            c.final_state or "-",
            "/".join(str(c.events.get(k, 0)) for k in ("RESTARTING", "FAILED", "STALLED")),
            counts(c.stop_events),
            (c.last_error or "")[:100],
        )
    return table


def memory_table(runs: list[RunResult]) -> Table:
    table = Table(
        title="memory (PSS, MB) of the worker's process tree",
        title_justify="left",
        caption="steady: median over the window; peak: highest sampled total; python: PySpark's"
        " daemon, its workers and the Python data source processes; driver: `connectql run`",
        caption_justify="left",
    )
    for col in ("run", "samples", "processes", "peak total", "steady total", "JVM", "driver"):
        table.add_column(col, justify="right")
    table.add_column("python", justify="right")
    table.add_column("other", justify="right")
    for r in runs:
        picked = r.window_samples() or r.samples[-3:]
        procs = statistics.median(s.procs for s in picked) if picked else 0
        table.add_row(
            f"{r.pairs} pair(s)",
            str(len(r.samples)),
            f"{procs:.0f}",
            f"{r.peak():,.0f}",
            f"{r.steady():,.0f}",
            f"{r.steady('jvm'):,.0f}",
            f"{r.steady('driver'):,.0f}",
            f"{r.steady('python'):,.0f}",
            f"{r.steady('other'):,.0f}",
        )
    return table


def problems_table(r: RunResult) -> Table | None:
    """Every RESTARTING / FAILED / STALLED event of a run, if any."""
    bad = [e for e in r.events if e[3] in ("RESTARTING", "FAILED", "STALLED")]
    if not bad:
        return None
    table = Table(
        title=f"restarts and failures, {r.pairs} pair(s) (SIGINT at {r.stop_at:.1f} s)",
        title_justify="left",
    )
    for col in ("s", "connector", "from", "to", "reason", "error"):
        table.add_column(col, overflow="fold")
    for t, name, from_state, to_state, reason, error in bad:
        table.add_row(fmt(t), name, from_state or "", to_state, reason or "", (error or "")[:160])
    return table


def stop_text(r: RunResult) -> str:
    if r.left:
        kinds = sorted(set(r.left))
        left = f"{len(r.left)} killed ({', '.join(f'{r.left.count(k)} {k}' for k in kinds)})"
    else:
        left = "none left"
    return f"{r.stop_s:.1f} s, exit {r.exit_code}, {left}"


def summary_table(base: RunResult, run: RunResult) -> Table:
    n, count = run.pairs, len(run.connectors)
    per = 2 * (n - 1)

    def each(r: RunResult, fn) -> int:
        return sum(fn(c) for c in r.connectors)

    def both(label: str, fn) -> None:
        table.add_row(label, fn(run), fn(base))

    def overhead(part: str | None) -> str:
        if per <= 0:
            return "-"
        return f"{(run.steady(part) - base.steady(part)) / per:,.1f} MB"

    def rates(r: RunResult, kind: str | None = None) -> list[float]:
        return [r.rate(c) for c in r.connectors if kind in (None, c.kind)]

    def python(r: RunResult) -> float:
        return r.steady("driver") + r.steady("python")

    table = Table(
        title=f"summary: {count} connectors in one worker ({os.cpu_count()} cores)",
        title_justify="left",
    )
    table.add_column("metric")
    table.add_column(f"{n} pairs", justify="right")
    table.add_column(f"baseline ({base.pairs} pair)", justify="right")
    both("connectors", lambda r: str(len(r.connectors)))
    both(
        "all RUNNING (reached it, still in it at SIGINT)",
        lambda r: yes(
            all(c.running_at is not None and c.state_before_stop == "RUNNING" for c in r.connectors)
        ),
    )
    both("moving data (committed rows)", lambda r: f"{r.moving}/{len(r.connectors)}")
    both("time from launch until all moving", lambda r: f"{fmt(r.all_moving_at)} s")
    both(
        "last connector RUNNING (s after launch)",
        lambda r: f"{fmt(max((c.running_at or float('nan')) for c in r.connectors))} s",
    )
    both(
        "measurement window",
        lambda r: f"{r.window[1] - r.window[0]:.0f} s" if r.window else "-",
    )
    both(
        f"rows/s per connector, median (each source makes {ROWS_PER_SECOND})",
        lambda r: (
            f"{fmt(statistics.median(rates(r)))}"
            f" (min {fmt(min(rates(r)))}, max {fmt(max(rates(r)))})"
        ),
    )
    both(
        "  sources / sinks, median",
        lambda r: (
            f"{fmt(statistics.median(rates(r, 'source')))}"
            f" / {fmt(statistics.median(rates(r, 'sink')))}"
        ),
    )
    both("rows committed in total (after stop)", lambda r: f"{each(r, Connector.final_rows):,}")
    both(
        "RESTARTING / FAILED events before SIGINT",
        lambda r: (
            f"{each(r, lambda c: c.events.get('RESTARTING', 0))}"
            f" / {each(r, lambda c: c.events.get('FAILED', 0))}"
        ),
    )
    both(
        "RESTARTING / FAILED events from SIGINT on",
        lambda r: (
            f"{each(r, lambda c: c.stop_events.get('RESTARTING', 0))}"
            f" / {each(r, lambda c: c.stop_events.get('FAILED', 0))}"
        ),
    )
    both("CANNOT_OPEN_SOCKET in the logs", lambda r: str(r.log_errors["CANNOT_OPEN_SOCKET"]))
    both(
        "sources: catalog rows_total / committed rows",
        lambda r: (
            f"{each(r, lambda c: (c.rows_total or 0) * (c.kind == 'source')):,}"
            f" / {each(r, lambda c: c.final_rows() * (c.kind == 'source')):,}"
        ),
    )
    both(
        "progress events dropped (spark.log: queue `streams` full)",
        lambda r: "[red]yes[/red]" if r.listener_overflow else "no",
    )
    both("PSS peak total", lambda r: f"{r.peak():,.0f} MB")
    both("PSS steady total", lambda r: f"{r.steady():,.0f} MB")
    both("  JVM", lambda r: f"{r.steady('jvm'):,.0f} MB")
    both("  Python (driver + workers)", lambda r: f"{python(r):,.0f} MB")
    table.add_row(f"per-connector overhead (steady delta / {per})", overhead(None), "")
    table.add_row("  JVM", overhead("jvm"), "")
    table.add_row(
        "  Python", f"{(python(run) - python(base)) / per:,.1f} MB" if per > 0 else "-", ""
    )
    both("graceful stop (SIGINT to exit)", stop_text)
    return table


def show(r: RunResult) -> None:
    console.print(connectors_table(r))
    if r.stop_s >= STOP_TIMEOUT_S:
        console.print(
            f"[red]  the worker did not exit within {STOP_TIMEOUT_S} s of SIGINT and was killed:"
            " the catalog's states and rows_total are those it had recorded by then[/red]"
        )
    problems = problems_table(r)
    if problems is not None:
        console.print(problems)
    errs = ", ".join(f"{k}: {v}" for k, v in r.log_errors.items())
    console.print(f"  logs (run output + worker.log): {errs}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.many", description=__doc__.split("\n")[0])
    p.add_argument("--pairs", type=int, default=10, help="source/sink pairs (default 10)")
    p.add_argument(
        "--seconds", type=float, default=60, help="measurement window, N pairs (default 60)"
    )
    p.add_argument(
        "--baseline-seconds", type=float, default=20, help="window of the 1-pair run (default 20)"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a SET statement at the top of both scripts, e.g. spark.scheduler.mode=FIFO",
    )
    p.add_argument(
        "--interval", help="'trigger.interval' of every connector, e.g. '1 second' (default none)"
    )
    p.add_argument(
        "--settle",
        type=float,
        default=SETTLE_S,
        help=f"wait after all are moving, before the window (default {SETTLE_S})",
    )
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = p.parse_args(argv)
    started = time.time()
    tmp = Path(tempfile.mkdtemp(prefix="bench-many-"))
    console.print(
        f"[bold]Many connectors[/bold]: datagen at {ROWS_PER_SECOND} rows/s → stream → Parquet"
        f" sink; 1 pair, then {args.pairs} pairs, each run in its own `connectql run` worker"
        f" ({os.cpu_count()} cores); temporary directory {tmp}"
        + (f"; SET {', '.join(args.set)}" if args.set else "")
        + (f"; trigger.interval {args.interval}" if args.interval else "")
    )
    try:
        base = run_worker(1, args.baseline_seconds, args, tmp / "base")
        show(base)
        run = run_worker(args.pairs, args.seconds, args, tmp / "many")
        show(run)
        console.print(memory_table([base, run]))
        console.print(summary_table(base, run))
    finally:
        remove_tmp(tmp, args.keep)
    console.print(f"bench took {time.time() - started:.0f} s")
    return 0 if all(c.ok for c in run.connectors + base.connectors) else 1


if __name__ == "__main__":
    sys.exit(main())
