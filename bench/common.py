"""What the database benches (bench.postgres, bench.mysql) share: results and their checks, the
pipe yardstick's runner, Spark's per-batch timings (a progress listener and the phases of a
run), a Worker running the bulk and cdc connector pairs, the CDC latency run against a PostgreSQL
target (writer, poller, percentiles) and the tables that print it all."""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

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

console = Console(width=140)


def execute(info: str, statement: str, params=None) -> list[tuple] | None:
    """One statement on a PostgreSQL database (conninfo `info`); its rows, if any."""
    with psycopg.connect(info, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else None


def check_text(got: tuple[int, int], want: tuple[int, int]) -> str:
    if got == want:
        return f"OK ({got[0]:,} rows, checksum equal)"
    if got[0] != want[0]:
        return f"FAIL: {got[0]:,} rows, expected {want[0]:,}"
    return f"FAIL: {got[0]:,} rows but the checksum differs ({got[1]} != {want[1]})"


def load() -> str:
    """The 1/5/15-minute load averages: other work on the machine moves every figure."""
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def interrupt(*_args) -> None:
    """A SIGTERM handler: end the bench like Ctrl-C, so the finally blocks stop Spark and the
    servers."""
    raise KeyboardInterrupt


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
    cpu: dict[str, float] = field(default_factory=dict)  # CPU s by program, see cpu_since

    @property
    def ok(self) -> bool:
        return self.check.startswith("OK")


# --------------------------------------------------------------------------------------------
# Where the CPU went
# --------------------------------------------------------------------------------------------

_PROGRAMS = {"mariadbd": "mariadbd", "mysqld": "mariadbd", "postgres": "postgres", "java": "java"}


def _processes():
    """(pid, program name, CPU seconds incl. reaped children, parent pid) of each process."""
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        rest = stat.rsplit(")", 1)[1].split()
        yield int(entry), comm, sum(int(x) for x in rest[11:15]) / tick, int(rest[1])


def _program(comm: str) -> str:
    return _PROGRAMS.get(comm, "python" if comm.startswith("python") else "other")


def cpu_now() -> tuple[float, dict[str, float]]:
    """(the machine's busy CPU seconds, CPU seconds by program) so far. A process's figure
    includes its reaped children's (a server's finished backends, a client's pipe), so a
    difference of two snapshots is what each program used in between, on every core."""
    tick = os.sysconf("SC_CLK_TCK")
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    busy = (sum(int(x) for x in fields[:8]) - int(fields[3]) - int(fields[4])) / tick
    used: dict[str, float] = defaultdict(float)
    for _pid, comm, seconds, _parent in _processes():
        used[_program(comm)] += seconds
    return busy, used


def cpu_since(before: tuple[float, dict[str, float]]) -> dict[str, float]:
    """CPU seconds since `before` (cpu_now()): by program, and 'busy' for the whole machine
    (the other programs' too: compare with seconds x cores)."""
    busy, used = cpu_now()
    out = {k: round(v - before[1].get(k, 0.0), 1) for k, v in used.items()}
    out = {k: v for k, v in out.items() if v > 0}
    out["busy"] = round(busy - before[0], 1)
    return out


def tree_cpu(roots: list[int | None]) -> dict[str, float]:
    """CPU seconds used so far by the processes `roots` and their descendants (each with its
    reaped children), by program (this process apart: a bench's worker is its driver): unlike
    cpu_now, none of the machine's other work, so a difference of two snapshots stays
    comparable when other jobs load the machine."""
    parents: dict[int, int] = {}
    stats: dict[int, tuple[str, float]] = {}
    for pid, comm, seconds, parent in _processes():
        parents[pid], stats[pid] = parent, (comm, seconds)
    tree = {r for r in roots if r is not None and r in stats}
    grew = True
    while grew:
        kids = {p for p, pp in parents.items() if pp in tree} - tree
        tree |= kids
        grew = bool(kids)
    used: dict[str, float] = defaultdict(float)
    for pid in tree:
        comm, seconds = stats[pid]
        used["python (this process)" if pid == os.getpid() else _program(comm)] += seconds
    return used


def tree_cpu_since(roots: list[int | None], before: dict[str, float]) -> str:
    """'python 30.1, java 9.2, postgres 14.0 CPU-s' since `before` (tree_cpu(roots))."""
    now = tree_cpu(roots)
    parts = sorted(((k, v - before.get(k, 0.0)) for k, v in now.items()), key=lambda kv: -kv[1])
    return ", ".join(f"{k} {v:.1f}" for k, v in parts if v >= 0.05) + " CPU-s"


def cpu_text(cpu: dict[str, float]) -> str:
    """'busy 9.1 s: java 4.0, mariadbd 2.2, ...' (largest first)."""
    if not cpu:
        return "-"
    parts = sorted(((k, v) for k, v in cpu.items() if k != "busy"), key=lambda kv: -kv[1])
    return f"{cpu.get('busy', 0):.1f} s: " + ", ".join(f"{k} {v:.1f}" for k, v in parts)


# --------------------------------------------------------------------------------------------
# The yardstick: a pipe of two clients
# --------------------------------------------------------------------------------------------


def psql_command(server, db: str, command: str) -> list[str]:
    """psql running `command` on database `db` of a PrivatePostgres."""
    return [
        "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", server.host, "-p", str(server.port),
        "-U", server.user, "-d", db, "-c", command,
    ]  # fmt: skip


def pipe_mean(runs: list[Run]) -> float:
    """The yardstick: the mean time of the pipe runs that passed their check."""
    pipes = [r.seconds for r in runs if r.method.startswith("pipe") and r.ok]
    return statistics.fmean(pipes) if pipes else float("nan")


def run_pipe(
    out_cmd: list[str],
    in_cmd: list[str],
    label: str,
    rows: int,
    check: Callable[[], str],
    note: str,
) -> Run:
    """The yardstick: `out_cmd | in_cmd`, wall clock; `check()` judges the target afterwards."""
    with tempfile.TemporaryFile() as err_out:
        t0, cpu0 = time.perf_counter(), cpu_now()
        copy_out = subprocess.Popen(out_cmd, stdout=subprocess.PIPE, stderr=err_out)
        copy_in = subprocess.Popen(
            in_cmd, stdin=copy_out.stdout, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        copy_out.stdout.close()  # copy_in holds the read end: copy_out sees EPIPE if it dies
        _out, err_in = copy_in.communicate()
        copy_out.wait()
        seconds, cpu = time.perf_counter() - t0, cpu_since(cpu0)
        err_out.seek(0)
        errors = err_out.read().decode(errors="replace") + err_in.decode(errors="replace")
    if copy_out.returncode or copy_in.returncode:
        result = (
            f"FAIL: the pipe exited {copy_out.returncode} | {copy_in.returncode}:"
            f" {errors.strip()[:200]}"
        )
    else:
        result = check()
    return Run(label, rows, seconds, result, note=note, cpu=cpu)


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

        rows_of: Callable[[str, int], int | None] | None = None  # a batch's rows, as counted

        def of(self, name: str, since: float = 0.0, until: float = float("inf")) -> list[Batch]:
            with self.lock:
                found = [b for b in self.batches.get(name, []) if since <= b.start < until]
            for b in found if self.rows_of else ():  # Spark counts a packed source's chunks
                b.rows = self.rows_of(name, b.batch_id) or b.rows
            return found

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


def rows_done(batches: list[Batch], rows: int) -> float | None:
    """When (epoch s) the batches had carried `rows` rows in all."""
    total = 0
    for b in batches:
        total += b.rows
        if total >= rows:
            return b.end
    return None


# --------------------------------------------------------------------------------------------
# connectql
# --------------------------------------------------------------------------------------------


BULK_SQL = """
CREATE SOURCE CONNECTOR {src} FROM {source} INTO {stream} WITH (
  {conn_src}, table = '{table}', mode = 'bulk', run = 'once',
  'batch.rows' = {batch}, 'tasks.max' = {tasks});
CREATE SINK CONNECTOR {dst} TO postgres FROM {stream} WITH (
  {conn_dst}, table = 'orders', run = 'once', 'tasks.max' = {tasks});
"""
CDC_SQL = """
CREATE SOURCE CONNECTOR {label}_src FROM {source} INTO {label}_s WITH (
  {conn_src}, table = 'orders',{batch} 'tasks.max' = {tasks});
CREATE SINK CONNECTOR {label}_dst TO postgres FROM {label}_s WITH (
  {conn_dst}, table = 'orders', 'tasks.max' = {tasks});
"""


class Connectql:
    """One Worker in a temporary home, its SparkSession started before anything is timed,
    running `source` connectors (postgres, mysql) into postgres sinks."""

    def __init__(self, home: Path, source: str):
        from connectql.worker.worker import Worker

        self.source = source
        self.worker = Worker(home)
        t0 = time.perf_counter()
        spark = self.worker.engine.spark
        self.session_s = time.perf_counter() - t0
        self.listener = progress_listener()
        self.listener.rows_of = self.batch_rows
        spark.streams.addListener(self.listener)
        self.phases: dict[str, list[Phase]] = {}

    def batch_rows(self, name: str, batch_id: int) -> int | None:
        """A batch's rows as the catalog counted them (None: not recorded yet)."""
        sql = "SELECT input_rows FROM connector_metrics WHERE connector = ? AND batch_id = ?"
        rows = self.worker.catalog.read(sql, [name, batch_id], figures=True)[1]
        return rows[0][0] if rows else None

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
    def bulk(
        self,
        label: str,
        table: str,
        rows: int,
        conn_src: str,
        conn_dst: str,
        check: Callable[[], str],
        tasks: int = TASKS,
        method: str | None = None,
    ) -> Run:
        """`table` copied by a bulk source and a sink, both `run = 'once'`, into the target of
        `conn_dst` (an empty orders table); `check()` judges the target afterwards."""
        src, dst = f"{label}_src", f"{label}_dst"
        script = BULK_SQL.format(
            src=src,
            dst=dst,
            source=self.source,
            stream=f"{label}_s",
            table=table,
            conn_src=conn_src,
            conn_dst=conn_dst,
            batch=BATCH_ROWS,
            tasks=tasks,
        )
        method = method or f"connectql bulk, run once ({label})"
        t0_wall, t0, cpu0 = time.time(), time.perf_counter(), cpu_now()
        try:
            self.run(script)
            self.worker.wait_for_once()
        except Exception as e:  # a failed statement is a FAIL of this run, not the bench's end
            return Run(method, rows, time.perf_counter() - t0, f"FAIL: {e}")
        seconds, cpu = time.perf_counter() - t0, cpu_since(cpu0)
        errors = self.problems([src, dst], "FINISHED")
        result = f"FAIL: {errors}" if errors else check()
        done = self.finished_at()
        self.listener.wait_rows(dst, rows)
        self.phases[label] = [
            Phase(n, t0_wall, self.listener.of(n), done.get(n)) for n in (src, dst)
        ]
        source_s = done.get(src, float("nan")) - t0_wall
        note = f"source FINISHED at {source_s:.1f} s, sink {seconds - source_s:.1f} s after"
        return Run(method, rows, seconds, result, note=note, cpu=cpu)

    # ---------------------------------------------------------------- (b) cdc snapshot
    def cdc(
        self,
        rows: int,
        conn_src: str,
        conn_dst: str,
        target_info: str,
        check: Callable[[], str],
        timeout: float,
        label: str = "cdc",
        batch_rows: int | None = BATCH_ROWS,
    ) -> Run:
        """A cdc source (snapshot, then changes) and a continuous sink into the PostgreSQL
        database `target_info` (an empty orders table), timed until it holds `rows` rows; the
        connectors are `label`_src and `label`_dst; batch.rows None: the source's default."""
        src, dst = f"{label}_src", f"{label}_dst"
        script = CDC_SQL.format(
            label=label,
            source=self.source,
            conn_src=conn_src,
            conn_dst=conn_dst,
            batch="" if batch_rows is None else f" 'batch.rows' = {batch_rows},",
            tasks=TASKS,
        )
        method = "connectql cdc snapshot, continuous"
        t0_wall, t0 = time.time(), time.perf_counter()
        try:
            self.run(script)
        except Exception as e:
            return Run(method, rows, time.perf_counter() - t0, f"FAIL: {e}")
        full_at, count, last_check = None, 0, 0.0
        with psycopg.connect(target_info, autocommit=True) as conn:
            while time.perf_counter() - t0 < timeout:
                count = conn.execute("SELECT count(*) FROM orders").fetchone()[0]
                if count >= rows:
                    full_at = time.perf_counter()
                    break
                if time.perf_counter() - last_check > 2:  # a failed connector ends the wait
                    last_check = time.perf_counter()
                    errors = self.problems([src, dst], *LIVE)
                    if errors:
                        return Run(method, rows, last_check - t0, f"FAIL: {errors}")
                time.sleep(POLL_COUNT_S)
        if full_at is None:
            errors = self.problems([src, dst], *LIVE)
            return Run(
                method,
                rows,
                timeout,
                f"FAIL: {count:,} of {rows:,} rows after {timeout:.0f} s {errors}".strip(),
            )
        seconds = full_at - t0
        result = check()
        self.listener.wait_rows(dst, rows)
        src_batches = self.listener.of(src, until=t0_wall + seconds)
        dst_batches = self.listener.of(dst, until=t0_wall + seconds)
        self.phases[label] = [
            Phase(src, t0_wall, src_batches, rows_done(src_batches, rows)),
            Phase(dst, t0_wall, dst_batches, rows_done(dst_batches, rows)),
        ]
        src_done = rows_done(src_batches, rows)
        note = (
            f"snapshot in the stream at {src_done - t0_wall:.1f} s"
            if src_done
            else "the source's progress was not reported in time"
        )
        return Run(method, rows, seconds, result, note=note)


# --------------------------------------------------------------------------------------------
# CDC latency (into a PostgreSQL target)
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


def measure_latency(
    cq: Connectql,
    connect_source: Callable[[], contextlib.AbstractContextManager],
    apply: Callable[[object, Change], None],
    target_info: str,
    rows: int,
    seconds: float,
    sums: Callable[[], tuple[tuple[int, int], tuple[int, int]]],
) -> Latency:
    """With cq's cdc_src and cdc_dst running: a probe change, then RATE changes/s for `seconds`
    s, each applied (and committed) by `apply` on a connection from `connect_source()`, each
    timed until the poller sees it in the PostgreSQL target `target_info`; then a wait until
    `sums()` (source's, target's (count, checksum)) agree."""
    changes = plan_changes(rows, int(RATE * seconds))
    poller = Poller(target_info)
    poller.start()
    with connect_source() as conn:
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
    result.consistent = wait_consistent(sums, CONSISTENT_S)
    return result


def wait_consistent(sums: Callable[[], tuple], timeout: float) -> str:
    """Wait until sums() gives (want, got) equal."""
    t0 = time.perf_counter()
    want = got = None
    while time.perf_counter() - t0 < timeout:
        want, got = sums()
        if want == got:
            return f"OK (equal {time.perf_counter() - t0:.1f} s after the last change's wait)"
        time.sleep(1)
    return f"FAIL after {timeout:.0f} s: {check_text(got, want)}"


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------


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


def runs_table(runs: list[Run], pipe_s: float, session_s: float | None, check: str) -> Table:
    """`check`: what the check column compares."""
    caption = f"ratio: seconds / the pipes' mean ({pipe_s:.2f} s); check: {check}"
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


PHASES = {"bulk": "(a) bulk, run once", "cdc": "(b) cdc snapshot"}


def print_snapshot(
    runs: list[Run], pipe_s: float, cq: Connectql, check: str, phases: dict[str, str] = PHASES
) -> None:
    """Section 1's tables: the runs, and Spark's batches of the runs labelled in `phases`."""
    console.print(runs_table(runs, pipe_s, cq.session_s, check))
    for label, title in phases.items():
        if label in cq.phases:
            console.print(phases_table(f"{title}: Spark's batches", cq.phases[label]))


def print_latency(lat: Latency) -> None:
    console.print(latency_table(lat))
    window = max(lat.duration_s, 1.0)
    console.print(
        f"  writer: {len(lat.committed()):,} changes committed in"
        f" {lat.duration_s:.1f} s ({len(lat.committed()) / window:.0f}/s)"
    )
    console.print(window_table(lat))
    console.print(f"  target equals source afterwards: {lat.consistent}")


def failed(runs: list[Run], lat: Latency | None) -> bool:
    """A run's check failed, or changes were lost or the target differs after the latency
    run (timings are never judged)."""
    return not all(r.ok for r in runs) or (
        lat is not None
        and (not lat.consistent.startswith("OK") or len(lat.latencies()) != len(lat.committed()))
    )


def arguments(prog: str, description: str, argv: list[str] | None) -> argparse.Namespace:
    """The options every database bench takes."""
    global RATE
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--rows", type=int, default=1_000_000, help="rows in srcdb.orders")
    p.add_argument("--skip-latency", action="store_true", help="skip the CDC latency section")
    p.add_argument("--skip-breakdown", action="store_true", help="skip the step timings")
    p.add_argument("--seconds", type=float, default=SECONDS, help="latency run (default 30)")
    p.add_argument("--keep", action="store_true", help="keep the temporary home")
    p.add_argument("--rate", type=float, default=RATE, help=f"changes/s (default {RATE})")
    args = p.parse_args(argv)
    if args.rows < 1:
        p.error("--rows must be at least 1")
    if args.rate <= 0:
        p.error("--rate must be above 0")
    RATE = args.rate
    return args


def latency_section(skip: bool, cdc_run: Run, measure: Callable[[], Latency]) -> Latency | None:
    """Section 3, on the cdc pair (b) left running, unless skipped or (b) failed."""
    if skip:
        return None
    console.print("[bold]3. CDC latency[/bold] (the cdc source and sink still running)")
    if not cdc_run.ok:
        console.print("[red]  skipped: the cdc snapshot failed[/red]")
        return None
    lat = measure()
    print_latency(lat)
    return lat


def close(cq: Connectql | None, stop_servers: Callable[[], None], tmp: Path, keep: bool) -> None:
    """The end of a bench, whatever happened: the Worker, the servers, the temporary home."""
    if cq is not None:
        try:
            cq.close()
        except Exception as e:
            console.print(f"[red]closing the worker failed: {e}[/red]")
    stop_servers()
    remove_tmp(tmp, keep)


def remove_tmp(tmp: Path, keep: bool) -> None:
    """A bench's temporary directory removed, or kept and named (--keep)."""
    if keep:
        console.print(f"kept {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
