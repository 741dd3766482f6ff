"""API load bench: concurrent HTTP clients against `connectql server` while its connectors move
data, then a check that no record was lost or duplicated.

    .venv/bin/python -m bench.api [--requests 2000] [--clients 8] [--connectors 5] [--rows 10000]
        [--pairs 3] [--keep]

1. `connectql server --port 0` runs as a real process on a fresh temporary home
   (tests.crash.server_process); everything is sent to it on 127.0.0.1.
2. Through the API (POST /connectors) it gets --connectors connectors: sources - the larger half -
   are datagen at RATE rows/s bounded by 'rows.total' = --rows, each into its own stream; sinks
   are Parquet file sinks reading the first streams. The load starts once every one has
   committed a row (at most MOVING_TIMEOUT_S), so it runs while data moves.
3. --requests requests from --clients threads, each with its own keep-alive connection: a fixed,
   seeded mix of GET /connectors?expand=status, GET /connectors/{name}/status, GET /metrics,
   GET /health, GET /streams and POST /sql (a SELECT on the connectors table), plus --pairs
   pause/resume pairs on the first source, issued in order by one client (a pause runs while the
   others keep going). Each request has REQUEST_TIMEOUT_S and the load LOAD_TIMEOUT_S; a request
   not sent by then counts as failed, as does any non-2xx answer or connection error. The
   yardstick, just before: a tenth as many requests of the same mix (no pause/resume) sent by
   one client alone, so the latencies under load stand next to those of a lone client.
4. Then, within the time the sources need plus FINISH_SLACK_S, every stream and sink directory must
   hold exactly --rows rows with --rows distinct ids (count == count distinct), read from the
   files its `_spark_metadata` log lists (tests.helpers.read_parquet_rows).
Printed: requests/s over the load, latency p50/p95/p99/max per kind of request and overall, the
failed requests (with the first errors), the rows each output committed during the load, and the
record check. Exit 1 if a request failed or a record was lost or duplicated.
"""

from __future__ import annotations

import argparse
import http.client
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from rich.table import Table

from bench.common import console, interrupt, load, percentile, remove_tmp
from tests.crash import server_process
from tests.helpers import read_parquet_rows

RATE = 200  # rows/s of each source
FIELDS = "id BIGINT SEQUENCE, v DOUBLE RANDOM(0,1)"
REQUEST_TIMEOUT_S = 60
LOAD_TIMEOUT_S = 300
MOVING_TIMEOUT_S = 180
FINISH_SLACK_S = 120
STATUS_SQL = "SELECT name, state, rows_total, rows_written, lag FROM connectors"
# kind -> share of the requests (pause and resume come on top, --pairs of each)
SPREAD = ((1, "pause"), (3, "resume"))
MIX = {"list": 0.2, "status": 0.25, "metrics": 0.15, "health": 0.1, "streams": 0.1, "sql": 0.2}


@dataclass
class Output:
    """A directory a connector commits Parquet files to: a source's stream or a sink's path."""

    connector: str
    path: Path
    rows_at_load: tuple[int, int] = (0, 0)  # committed at the load's start and end
    got: tuple[int, int] | None = None  # (count, count distinct id) at the end

    def committed(self) -> int:
        got = read_parquet_rows(self.path, "SELECT count(*) FROM t")
        return got[0][0] if got else 0


@dataclass
class Call:
    kind: str
    method: str
    path: str
    body: str | None = None


@dataclass
class Sample:
    kind: str
    seconds: float
    status: int | None  # None: no answer
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


@dataclass
class Report:
    outputs: list[Output]
    samples: list[Sample] = field(default_factory=list)  # the load's
    planned: int = 0
    load_s: float = 0.0
    baseline: list[Sample] = field(default_factory=list)  # one client's, before the load
    baseline_planned: int = 0
    baseline_s: float = 0.0
    moving_s: float | None = None

    @property
    def failed(self) -> int:
        """Requests that got no 2xx, or were not sent in time."""
        answered = self.samples + self.baseline
        unsent = self.planned + self.baseline_planned - len(answered)
        return sum(not s.ok for s in answered) + unsent

    def lost(self, rows: int) -> list[str]:
        """Each output whose rows are not exactly `rows` distinct ids."""
        return [o.connector for o in self.outputs if o.got != (rows, rows)]


# --------------------------------------------------------------------------------------------
# Connectors
# --------------------------------------------------------------------------------------------


def pipelines(connectors: int, rows: int, home: Path, tmp: Path) -> tuple[list[str], list[Output]]:
    """CREATE statements for `connectors` connectors and the outputs they commit to: sources
    gen_1.. (the larger half) into streams s_1.., sinks out_j reading s_j."""
    sinks = connectors // 2
    statements, outputs = [], []
    for i in range(1, connectors - sinks + 1):
        statements.append(
            f"CREATE SOURCE CONNECTOR gen_{i} FROM datagen INTO s_{i} WITH ("
            f"'rows.per.second' = {RATE}, 'rows.total' = {rows}, fields = '{FIELDS}')"
        )
        outputs.append(Output(f"gen_{i}", home / "streams" / f"s_{i}"))
    for j in range(1, sinks + 1):
        statements.append(
            f"CREATE SINK CONNECTOR out_{j} TO file FROM s_{j}"
            f" WITH (path = '{tmp / f'out_{j}'}', format = 'parquet')"
        )
        outputs.append(Output(f"out_{j}", tmp / f"out_{j}"))
    return statements, outputs


def wait_moving(outputs: list[Output], timeout: float) -> float | None:
    """Seconds until every output has committed a row; None if not all did within timeout."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if all(o.committed() > 0 for o in outputs):
            return time.monotonic() - t0
        time.sleep(1.0)
    return None


def wait_complete(outputs: list[Output], rows: int, timeout: float) -> None:
    """Until every output holds `rows` rows (or timeout); then each one's (count, distinct)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(o.committed() < rows for o in outputs):
        time.sleep(1.0)
    for o in outputs:
        got = read_parquet_rows(o.path)
        o.got = tuple(got[0]) if got else (0, 0)


# --------------------------------------------------------------------------------------------
# Requests
# --------------------------------------------------------------------------------------------


def call_of(kind: str, names: list[str], i: int) -> Call:
    if kind == "list":
        return Call(kind, "GET", "/connectors?expand=status")
    if kind == "status":
        return Call(kind, "GET", f"/connectors/{names[i % len(names)]}/status")
    if kind == "sql":
        return Call(kind, "POST", "/sql", STATUS_SQL)
    return Call(kind, "GET", f"/{kind}")


def plan(requests: int, clients: int, names: list[str], pairs: int, seed: int = 7) -> list[list]:
    """Each client's calls: `requests` in all, the mix shuffled with `seed`; client 0 also
    pauses and resumes names[0] `pairs` times, in order, spread over its calls."""
    pairs = min(pairs, requests // 2)
    rest = requests - 2 * pairs
    kinds = [k for k, share in MIX.items() for _ in range(round(rest * share))]
    kinds = (kinds + list(MIX) * rest)[:rest]  # rounding: top up from the mix, then cut
    random.Random(seed).shuffle(kinds)
    calls = [call_of(kind, names, i) for i, kind in enumerate(kinds)]
    per_client = [calls[c::clients] for c in range(clients)]
    first, marks = per_client[0], []
    for p in range(pairs):  # a pause a quarter into its share of the calls, its resume at 3/4
        marks += [(len(first) * (4 * p + q) // (4 * pairs), a) for q, a in SPREAD]
    for at, action in reversed(marks):
        first.insert(at, Call(action, "PUT", f"/connectors/{names[0]}/{action}"))
    return per_client


def connection(url: str) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    if parts.hostname != "127.0.0.1":
        raise ValueError(f"the bench talks to 127.0.0.1 only, not {parts.hostname}")
    return http.client.HTTPConnection(parts.hostname, parts.port, timeout=REQUEST_TIMEOUT_S)


def send(conn: http.client.HTTPConnection, call: Call) -> Sample:
    """One request on a keep-alive connection, timed to the end of its body."""
    body = call.body.encode() if call.body is not None else None
    headers = {"Content-Type": "text/plain"} if body is not None else {}
    t0 = time.perf_counter()
    try:
        conn.request(call.method, call.path, body, headers)
        response = conn.getresponse()
        answer = response.read()
    except (OSError, http.client.HTTPException) as e:
        conn.close()  # the next request opens a new connection
        return Sample(call.kind, time.perf_counter() - t0, None, f"{type(e).__name__}: {e}")
    seconds = time.perf_counter() - t0
    error = "" if response.status < 300 else answer[:200].decode(errors="replace")
    return Sample(call.kind, seconds, response.status, error)


def client(url: str, calls: list[Call], deadline: float, samples: list[Sample]) -> None:
    conn = connection(url)
    try:
        for call in calls:
            if time.monotonic() >= deadline:
                return
            samples.append(send(conn, call))
    finally:
        conn.close()


def run_load(url: str, plans: list[list[Call]], timeout: float) -> tuple[list[Sample], float]:
    """Every client's calls on its own thread; (samples, wall seconds)."""
    per_client: list[list[Sample]] = [[] for _ in plans]
    deadline = time.monotonic() + timeout
    threads = [
        threading.Thread(target=client, args=(url, calls, deadline, out), daemon=True)
        for calls, out in zip(plans, per_client, strict=True)
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + REQUEST_TIMEOUT_S)
    return [s for out in per_client for s in out], time.perf_counter() - t0


def request(url: str, call: Call) -> Sample:
    conn = connection(url)
    try:
        return send(conn, call)
    finally:
        conn.close()


# --------------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------------


def run(
    tmp: Path,
    requests: int,
    clients: int,
    connectors: int,
    rows: int,
    pairs: int,
    say=console.print,
) -> Report:
    """Server, connectors, load and record check in `tmp`; the server is stopped at the end."""
    home = tmp / "home"
    statements, outputs = pipelines(connectors, rows, home, tmp)
    report = Report(outputs, planned=requests)
    with server_process(home, home.parent, cwd=home.parent) as (_, url):
        names = [o.connector for o in outputs]
        say(f"connectql server on {url}; connectors {', '.join(names)}")
        for statement in statements:
            created = request(url, Call("create", "POST", "/connectors", statement))
            if created.status != 201:
                raise RuntimeError(f"creating a connector failed: {created.error}")
        report.moving_s = wait_moving(outputs, MOVING_TIMEOUT_S)
        moving = "not all" if report.moving_s is None else f"all {report.moving_s:.0f} s after"
        say(f"{moving} the creates moving data; {requests} requests from {clients} clients")
        baseline = plan(max(requests // 10, len(MIX)), 1, names, 0)
        report.baseline_planned = len(baseline[0])
        report.baseline, report.baseline_s = run_load(url, baseline, LOAD_TIMEOUT_S)
        before = [o.committed() for o in outputs]
        plans = plan(requests, clients, names, pairs)
        report.planned = sum(len(p) for p in plans)
        report.samples, report.load_s = run_load(url, plans, LOAD_TIMEOUT_S)
        for o, first in zip(outputs, before, strict=True):
            o.rows_at_load = (first, o.committed())
        say(f"load done in {report.load_s:.1f} s; waiting for {rows:,} rows in every output")
        wait_complete(outputs, rows, rows / RATE + FINISH_SLACK_S)
    return report


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return "-" if seconds != seconds else f"{seconds * 1000:,.1f}"


def latency_row(label: str, samples: list[Sample], baseline: list[Sample]) -> list[str]:
    times = sorted(s.seconds for s in samples)
    alone = sorted(s.seconds for s in baseline)
    failed = sum(not s.ok for s in samples)
    return [
        label,
        f"{len(samples):,}",
        f"[red]{failed}[/red]" if failed else "0",
        *(ms(percentile(times, p)) for p in (50, 95, 99)),
        ms(times[-1] if times else float("nan")),
        *(ms(percentile(alone, p)) for p in (50, 99)),
    ]


def by_kind(samples: list[Sample]) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for s in samples:
        out.setdefault(s.kind, []).append(s)
    return out


def latency_table(report: Report) -> Table:
    answered = len(report.samples)
    table = Table(
        title=f"requests: {answered:,} answered of {report.planned:,} planned in"
        f" {report.load_s:.1f} s = {answered / report.load_s:,.1f} requests/s; the yardstick,"
        f" one client alone before the load: {len(report.baseline)} in {report.baseline_s:.1f} s"
        f" = {len(report.baseline) / report.baseline_s:,.1f} requests/s",
        title_justify="left",
        caption="latency from sending the request to the end of the answer's body, on a"
        " keep-alive connection per client; failed: non-2xx or no answer; 1 client: the same"
        " mix (no pause/resume) sent by one client just before the load",
        caption_justify="left",
    )
    table.add_column("kind")
    for col in ("requests", "failed", "p50 ms", "p95 ms", "p99 ms", "max ms"):
        table.add_column(col, justify="right")
    table.add_column("1 client p50 ms", justify="right")
    table.add_column("1 client p99 ms", justify="right")
    load, alone = by_kind(report.samples), by_kind(report.baseline)
    for kind in [*MIX, "pause", "resume"]:
        if kind in load:
            table.add_row(*latency_row(kind, load[kind], alone.get(kind, [])))
    table.add_row(*latency_row("[bold]all[/bold]", report.samples, report.baseline))
    return table


def records_table(report: Report, rows: int) -> Table:
    table = Table(
        title=f"records: each output must hold exactly {rows:,} rows with {rows:,} distinct ids",
        title_justify="left",
        caption="from the files each directory's _spark_metadata log lists; during load: rows"
        " committed between the load's start and end",
        caption_justify="left",
    )
    for col in ("connector", "output", "during load", "rows", "distinct ids", "check"):
        table.add_column(col, justify="right" if col not in ("connector", "output") else "left")
    for o in report.outputs:
        count, distinct = o.got or (0, 0)
        ok = o.got == (rows, rows)
        table.add_row(
            o.connector,
            o.path.name,
            f"{o.rows_at_load[1] - o.rows_at_load[0]:,}",
            f"{count:,}",
            f"{distinct:,}",
            "OK" if ok else "[red]LOST/DUPLICATED[/red]",
        )
    return table


def show(report: Report, rows: int) -> None:
    console.print(latency_table(report))
    answered = report.samples + report.baseline
    errors = Counter(f"{s.kind} {s.status}: {s.error}" for s in answered if not s.ok)
    for text, n in errors.most_common(5):
        console.print(f"  [red]{n} x {text}[/red]", markup=False)
    unsent = report.planned + report.baseline_planned - len(answered)
    if unsent:
        console.print(f"  [red]{unsent} requests not sent within {LOAD_TIMEOUT_S} s[/red]")
    console.print(records_table(report, rows))
    lost = report.lost(rows)
    console.print(
        f"failed requests: {report.failed}; records: "
        + (f"[red]lost or duplicated in {', '.join(lost)}[/red]" if lost else "OK")
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.api", description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=2000, help="requests in all (2000)")
    p.add_argument("--clients", type=int, default=8, help="concurrent client threads (8)")
    p.add_argument("--connectors", type=int, default=5, help="sources + sinks (5: 3 + 2)")
    p.add_argument("--rows", type=int, default=10_000, help="rows.total of each source (10000)")
    p.add_argument("--pairs", type=int, default=3, help="pause/resume pairs on gen_1 (3)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, interrupt)
    tmp = Path(tempfile.mkdtemp(prefix="bench-api-"))
    console.print(
        f"[bold]API load[/bold]: {args.requests} requests from {args.clients} clients while"
        f" {args.connectors} connectors move data (datagen {RATE} rows/s, {args.rows:,} rows"
        f" each); load averages {load()}; temporary directory {tmp}"
    )
    started = time.time()
    try:
        report = run(tmp, args.requests, args.clients, args.connectors, args.rows, args.pairs)
        show(report, args.rows)
    finally:
        remove_tmp(tmp, args.keep)
    console.print(f"bench took {time.time() - started:.0f} s; load averages {load()}")
    return 1 if report.failed or report.lost(args.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
