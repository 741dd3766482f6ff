"""Chaining (issue 18's one-query plan, runtime/ride.py) against two queries: the CDC latency
of a cdc source and its PostgreSQL sink with `SET sink.chaining = false` (source -> stream,
stream -> target, each its own query) and then, the same pair restarted with chaining on, the
sink riding the source's batches, on one warm worker in one run, for a PostgreSQL and a
MariaDB source. Both halves are checked by value: the target's count and checksum equal the
source's after each (reset in between: the second half's changes repeat the first's)."""

from __future__ import annotations

import argparse
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench import common
from bench.common import Connectql, console, percentile

ROWS = 20_000
LABEL = "cdc"  # Connectql.cdc's connectors: cdc_src -> cdc_s -> cdc_dst


@dataclass
class Side:
    """One source database: how to fill it, reach it, measure on it and reset it."""

    name: str
    start: Callable[[], None]
    stop: Callable[[], None]
    fill: Callable[[], tuple[int, int]]
    src_options: Callable[[], str]
    create_target: Callable[[str], str]  # db -> its conninfo
    target_options: Callable[[str], str]
    source_sum: Callable[[], tuple[int, int]]
    target_sum: Callable[[str], tuple[int, int]]
    execute: Callable[[str], None]  # a statement on the source
    measure: Callable[[Connectql, str], common.Latency]  # (cq, target info)


def postgres() -> Side:
    from bench import postgres as pg

    dbs = pg.Databases()
    return Side(
        "PostgreSQL",
        dbs.start,
        dbs.stop,
        lambda: pg.fill_source(dbs, ROWS, 1000),
        lambda: dbs.options("srcdb"),
        dbs.create,
        dbs.options,
        lambda: pg.checksum(dbs.info("srcdb")),
        pg.checksum,
        lambda sql: common.execute(dbs.info("srcdb"), sql),
        lambda cq, _info: pg.measure_latency(dbs, cq, ROWS, common.SECONDS),
    )


def mysql() -> Side:
    from bench import mysql as my

    srv = my.Servers()

    def execute(sql: str) -> None:
        with contextlib.closing(srv.my.connect("srcdb", autocommit=True)) as conn:
            conn.cursor().execute(sql)

    return Side(
        "MariaDB",
        srv.start,
        srv.stop,
        lambda: my.fill_source(srv, ROWS, 1000),
        srv.my_options,
        srv.pg_create,
        srv.pg_options,
        srv.my_checksum,
        srv.pg_checksum,
        execute,
        lambda cq, _info: my.measure_latency(srv, cq, ROWS, common.SECONDS),
    )


def chain(cq: Connectql) -> list[float]:
    """Chaining on, and the sink restarted so that it rides its source; returns the list its
    rides' seconds go to (read from connector_metrics after the half)."""
    from connectql.runtime.ride import Ride

    cq.run(f"SET sink.chaining = true; RESTART CONNECTOR {LABEL}_dst")
    deadline = time.monotonic() + 60
    while not isinstance(cq.worker.engine.queries.get(f"{LABEL}_dst"), Ride):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{LABEL}_dst does not ride: {cq.problems([f'{LABEL}_dst'])}")
        time.sleep(0.1)
    return []


def ride_seconds(cq: Connectql, since: float) -> list[float]:
    """The seconds of the sink's rides with rows since `since` (epoch seconds)."""
    sql = (
        "SELECT duration_ms FROM connector_metrics WHERE connector = ? AND input_rows > 0"
        " AND started_at >= to_timestamp(?)::TIMESTAMP"
    )
    return [r[0] / 1000 for r in cq.worker.catalog.query(sql, [f"{LABEL}_dst", since])[1]]


def reset(side: Side, target_info: str) -> str:
    """The source as before the first half (the second half's changes repeat the first's),
    once the target has followed."""
    side.execute(f"DELETE FROM orders WHERE id > {ROWS}")
    side.execute("UPDATE orders SET status = 'reset' WHERE status LIKE 'L%'")
    return common.wait_consistent(
        lambda: (side.source_sum(), side.target_sum(target_info)), common.CONSISTENT_S
    )


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def half(label: str, lat: common.Latency) -> dict:
    got = lat.latencies()
    src = [b.seconds for b in lat.src_batches]
    row = {
        "plan": label,
        "changes": f"{len(got)} of {len(lat.changes)}",
        "p50": percentile(got, 50),
        "p99": percentile(got, 99),
        "source batch": median(src),
        "check": lat.consistent,
    }
    console.print(
        f"  {label}: p50 {row['p50']:.2f} s, p99 {row['p99']:.2f} s, {row['changes']} changes,"
        f" source batches {len(src)} (median {row['source batch']:.3f} s); {lat.consistent}"
    )
    return row


def probe(side: Side, tmp: Path) -> list[dict]:
    console.print(f"[bold]{side.name} source[/bold] ({ROWS:,} rows, {common.RATE:g} changes/s)")
    side.start()
    cq = None
    try:
        want = side.fill()
        cq = Connectql(tmp / side.name, "postgres" if side.name == "PostgreSQL" else "mysql")
        cq.run("SET sink.chaining = false")  # the first half: two queries
        info = side.create_target("cdcdb")
        snap = cq.cdc(
            ROWS,
            side.src_options(),
            side.target_options("cdcdb"),
            info,
            lambda: common.check_text(side.target_sum(info), want),
            timeout=600,
            label=LABEL,
        )
        console.print(f"  snapshot: {snap.seconds:.2f} s, {snap.check}")
        rows = [half("two queries", side.measure(cq, info))]
        chain(cq)
        console.print(f"  reset: {reset(side, info)}")
        since = time.time()
        rows.append(half("chained", side.measure(cq, info)))
        seconds = ride_seconds(cq, since)
        rows[-1]["sink write"] = median(seconds)
        console.print(
            f"  the sink's rides with rows: {len(seconds)}, median {median(seconds):.3f} s"
        )
        return rows
    finally:
        if cq is not None:
            cq.close()
        side.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.onequery", description=__doc__.split("\n")[0])
    p.add_argument("--source", choices=["postgres", "mysql", "both"], default="both")
    p.add_argument("--seconds", type=float, default=common.SECONDS, help="each half's changes")
    p.add_argument("--rate", type=float, default=common.RATE, help="changes/s")
    args = p.parse_args(argv)
    common.SECONDS, common.RATE = args.seconds, args.rate
    sides = {"postgres": [postgres], "mysql": [mysql], "both": [postgres, mysql]}[args.source]
    tmp = Path(tempfile.mkdtemp(prefix="bench-onequery-"))
    results, bad = [], False
    try:
        for side in sides:
            s = side()
            for row in probe(s, tmp):
                results.append((s.name, row))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    console.print("\n| source | plan | p50 s | p99 s | changes seen | source batch s | check |")
    console.print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, r in results:
        bad |= (
            not r["check"].startswith("OK")
            or r["changes"].split(" of ")[0] != r["changes"].split(" of ")[1]
        )
        console.print(
            f"| {name} | {r['plan']} | {r['p50']:.2f} | {r['p99']:.2f} | {r['changes']} |"
            f" {r['source batch']:.3f} | {r['check'].split(' (')[0]} |"
        )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
