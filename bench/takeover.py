"""Takeover: kill -9 of the active `connectql server` → every connector RUNNING again on the
standby (goal: 15 s), against the yardstick of no standby: a new `connectql server` started on
the home right after the kill (as a process supervisor would). Both with the same connectors
(datagen sources into streams, file sinks from them); afterwards every stream and sink output is
checked by value: ids 0..n-1 each exactly once, and more of them than at the kill."""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from rich.table import Table

from bench.common import console, load
from connectql.api.client import Remote
from connectql.worker.home import read_address
from tests.crash import kill_everything, server_process, start_connectql, stop_server
from tests.helpers import read_parquet_rows, wait_until
from tests.servers import free_port
from tests.test_standby import health

GOAL_S = 15.0


def script(pairs: int, out: Path) -> str:
    return "".join(
        f"CREATE SOURCE CONNECTOR gen{i} FROM datagen INTO s{i} WITH ('rows.per.second' = 50,"
        f" fields = 'id BIGINT SEQUENCE');\n"
        f"CREATE SINK CONNECTOR out{i} TO file FROM s{i} WITH (path = '{out / f'out{i}'}',"
        " format = 'parquet');\n"
        for i in range(pairs)
    )


def all_running(url: str, n: int) -> bool:
    try:
        _, body = Remote(url, timeout=5).request("GET", "/connectors?expand=status")
    except Exception:
        return False
    states = [c["status"]["connector"]["state"] for c in body.values()]
    return len(states) == n and all(s == "RUNNING" for s in states)


def outputs(home: Path, out: Path, pairs: int) -> list[tuple[int, int, int]]:
    """(rows, distinct ids, max id + 1) of every stream and sink output."""
    dirs = [home / f"streams/s{i}" for i in range(pairs)] + [out / f"out{i}" for i in range(pairs)]
    sql = "SELECT count(*), count(DISTINCT id), coalesce(max(id), -1) + 1 FROM t"
    return [(read_parquet_rows(d, sql) or [(0, 0, 0)])[0] for d in dirs]


def check(before, after) -> str:
    bad = [a for a in after if not (a[0] == a[1] == a[2])]
    if bad:
        return f"FAIL: an output lost or repeated ids: {bad}"
    if any(a[0] <= b[0] for a, b in zip(after, before, strict=True)):
        return f"FAIL: an output did not grow after the kill: {before} -> {after}"
    return f"OK ({sum(a[0] for a in after):,} rows, each id once, every output grew)"


def one_run(base: Path, pairs: int, standby: bool) -> tuple[float, float | None, str]:
    """(kill → all RUNNING s, kill → /health active s (standby only), check)."""
    home, out, logs = base / "home", base / "out", base / "logs"
    n = 2 * pairs
    procs = []
    try:
        started = server_process(home, logs, "active")  # kept: collected, it stops the server
        active, url = started.__enter__()
        procs.append(active)
        if standby:
            port = free_port()
            second = start_connectql(
                home, ["server", "--standby", "--port", str(port)], logs, "second"
            )
            procs.append(second)
            url2 = f"http://127.0.0.1:{port}"
            wait_until(lambda: (health(url2) or {}).get("role") == "standby", 120, 0.5, "standby")
        list(Remote(url).run(script(pairs, out)))
        wait_until(lambda: all_running(url, n), 180, 0.5, "connectors RUNNING")
        wait_until(lambda: min(o[0] for o in outputs(home, out, pairs)) > 0, 120, 0.5, "rows")
        time.sleep(3)
        kill_everything(active)
        killed = time.monotonic()
        before = outputs(home, out, pairs)
        became_active = None
        if not standby:  # the yardstick: a new server on the home, at once
            second = start_connectql(home, ["server", "--port", "0"], logs, "second")
            procs.append(second)
            url2 = None
            while url2 is None:  # its address, from the home as the CLI finds it
                assert second.poll() is None, (logs / "second.err").read_text()
                found = read_address(home)
                url2 = found["url"] if found and found["pid"] == second.pid else None
                time.sleep(0.05)
        while not all_running(url2, n):
            if became_active is None and (health(url2) or {}).get("role") == "active":
                became_active = time.monotonic() - killed
            assert second.poll() is None, (logs / "second.err").read_text()
            time.sleep(0.1)
        took = time.monotonic() - killed

        def grown() -> bool:
            now = outputs(home, out, pairs)
            return all(a[0] > b[0] for a, b in zip(now, before, strict=True))

        try:  # RUNNING is the query started; its first batch follows
            wait_until(grown, 120, 0.5, "every output to grow after the kill")
        except AssertionError:
            pass  # check() says which did not
        return took, became_active, check(before, outputs(home, out, pairs))
    finally:
        for p in reversed(procs):
            stop_server(p)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.takeover", description=__doc__)
    p.add_argument("--pairs", type=int, default=2, help="datagen → stream → file pairs (2)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="connectql-bench-takeover-"))
    try:
        load_before = load()
        standby = one_run(tmp / "standby", args.pairs, standby=True)
        restart = one_run(tmp / "restart", args.pairs, standby=False)
        table = Table(
            title=f"kill -9 → {2 * args.pairs} connectors RUNNING (load {load_before} → {load()})"
        )
        for col in (
            "worker after the kill",
            "seconds",
            "/health answers active at",
            "goal",
            "check",
        ):
            table.add_column(col)
        table.add_row(
            "standby takes over",
            f"{standby[0]:.1f}",
            f"{standby[1]:.1f}" if standby[1] else "",
            f"{GOAL_S:.0f}",
            standby[2],
        )
        table.add_row(
            "yardstick: new server started at once", f"{restart[0]:.1f}", "", "", restart[2]
        )
        console.print(table)
        return 0 if standby[2].startswith("OK") and restart[2].startswith("OK") else 1
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
