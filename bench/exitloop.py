"""Issue 56's loop: a short `connectql run` script (datagen into two run-once PostgreSQL sinks and
a PostgreSQL bulk source, as test_secrets runs it) N times, each in a fresh home, optionally beside
busy loops; every exit code counted, each run's rows checked by value, and the stderr of any run
that did not exit 0 kept. The yardstick is the same loop's exit codes before the fix."""

from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import psycopg

ROWS = 300
DATABASE = "connectql_exitloop"


def script(home: Path) -> str:
    conn = f"host = '127.0.0.1', port = 5432, user = 'postgres', database = '{DATABASE}'"
    return f"""
    CREATE SOURCE CONNECTOR gen FROM datagen INTO nums WITH ('rows.total' = {ROWS}, run = 'once',
      seed = 7, fields = 'id BIGINT SEQUENCE, qty INT RANDOM(1, 9)');
    CREATE SINK CONNECTOR a TO postgres FROM nums WITH ({conn}, table = 'a', run = 'once');
    CREATE SINK CONNECTOR b TO postgres FROM nums WITH ({conn}, table = 'b', run = 'once');
    CREATE SOURCE CONNECTOR src FROM postgres INTO pgrows WITH ({conn}, table = 'src',
      mode = 'bulk', run = 'once');
    SELECT name, state FROM connectors ORDER BY name;
    """


def prepare() -> None:
    with psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True) as c:
        c.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        c.execute(f"CREATE DATABASE {DATABASE}")
    with psycopg.connect(f"host=127.0.0.1 user=postgres dbname={DATABASE}", autocommit=True) as c:
        c.execute("CREATE TABLE src (id int PRIMARY KEY, v text)")
        c.execute("INSERT INTO src SELECT g, 'v' || g FROM generate_series(1, 30) g")


def target_rows(table: str) -> tuple[int, int] | None:
    """The table's (count, sum of id), then it is dropped; None when the run made no table."""
    with psycopg.connect(f"host=127.0.0.1 user=postgres dbname={DATABASE}") as c:
        try:
            got = c.execute(f"SELECT count(*), coalesce(sum(id), 0) FROM {table}").fetchone()
        except psycopg.errors.UndefinedTable:
            return None
        c.execute(f"DROP TABLE {table}")
        c.commit()
        return got


def busy(stop_at: float) -> None:
    x = 0
    while time.monotonic() < stop_at:
        x += 1


def one_run(i: int, base: Path) -> tuple[int, str]:
    home = base / f"home{i}"
    sql = base / f"run{i}.sql"
    sql.write_text(script(home))
    env = {**os.environ, "CONNECTQL_HOME": str(home), "PYTHONFAULTHANDLER": "1"}
    p = subprocess.run(
        [str(Path(sys.executable).parent / "connectql"), "run", str(sql)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    want = (ROWS, ROWS * (ROWS - 1) // 2)
    wrong = [t for t in ("a", "b") if target_rows(t) != want]
    detail = p.stderr[-4000:] if p.returncode else ""
    return p.returncode, detail + (f"wrong rows in {', '.join(wrong)}" if wrong else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--load", type=int, default=1, help="busy loops beside the runs")
    args = ap.parse_args()
    prepare()
    codes: Counter = Counter()
    loops = []
    if args.load:
        stop_at = time.monotonic() + 24 * 3600
        loops = [multiprocessing.Process(target=busy, args=(stop_at,)) for _ in range(args.load)]
        for p in loops:
            p.start()
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="exitloop-") as tmp:
            for i in range(args.runs):
                code, err = one_run(i, Path(tmp))
                codes[code] += 1
                if code or err:
                    print(f"run {i}: exit {code}\n{err}", flush=True)
                if (i + 1) % 10 == 0:
                    took = time.monotonic() - started
                    print(f"{i + 1} runs in {took:.0f} s: exit codes {dict(codes)}", flush=True)
    finally:
        for p in loops:
            p.terminate()
            p.join()
    print(f"{args.runs} runs, load {args.load}: exit codes {dict(codes)}")
    return 0 if set(codes) == {0} else 1


if __name__ == "__main__":
    sys.exit(main())
