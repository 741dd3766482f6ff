"""Crash recovery through real processes: a `connectql run` worker killed with SIGKILL in the
middle of a datagen -> stream -> file sink pipeline loses no committed record and duplicates none
once a new worker starts on the same home.

The scenario is the issue's: `kill -9` of the worker (and of its JVM) while 2,000,000 generated
rows are on their way, then `connectql run` of the same script again. The new worker resumes both
connectors from their checkpoints; the stream and the Parquet sink must then each hold ids
0 .. 1,999,999 exactly once, with the same values, and after Ctrl-C the connectors are STOPPED.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import duckdb
import pytest

from connectql.catalog.streams import committed_files
from tests.crash import CONNECTQL, ROOT, describe, kill_everything, start_worker
from tests.helpers import read_parquet_rows, wait_until

pytestmark = pytest.mark.spark

TOTAL = 2_000_000

SCRIPT = """
CREATE SOURCE CONNECTOR IF NOT EXISTS gen FROM datagen INTO numbers WITH (
  'rows.total' = {total}, 'rows.per.batch' = 100000, 'tasks.max' = 2,
  fields = 'id BIGINT SEQUENCE, v DOUBLE RANDOM(0, 1)');
CREATE SINK CONNECTOR IF NOT EXISTS out TO file FROM numbers
  WITH (path = '{sink}', format = 'parquet');
"""


def rows(path: Path) -> int:
    """Committed rows in a stream or file sink directory (0 before its first commit)."""
    got = read_parquet_rows(path, "SELECT count(*) FROM t")
    return got[0][0] if got else 0


def cli_sql(home: Path, sql: str) -> str:
    r = subprocess.run(
        [*CONNECTQL, "--home", str(home), "sql", sql],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def table_rows(stdout: str) -> list[list[str]]:
    """The cells of the body rows of a table printed by rich."""
    return [
        [cell.strip() for cell in line.strip("│").split("│")]
        for line in stdout.splitlines()
        if line.startswith("│")
    ]


def test_a_worker_killed_mid_pipeline_loses_and_duplicates_nothing_after_a_restart(tmp_path):
    home, sink, logs = tmp_path / "home", tmp_path / "sink", tmp_path / "logs"
    logs.mkdir()
    script = tmp_path / "pipeline.sql"
    script.write_text(SCRIPT.format(total=TOTAL, sink=sink))
    stream = home / "streams/numbers"

    # 1. the first worker, killed with SIGKILL once both connectors have committed something
    started = time.monotonic()
    first = start_worker(home, script, logs, "first")
    try:

        def mid_pipeline():
            assert first.poll() is None, describe(logs, home, "first")
            in_stream, in_sink = rows(stream), rows(sink)
            assert in_stream < TOTAL, (
                "the pipeline finished before the kill: make it slower"
                f" (stream {in_stream}, sink {in_sink})"
            )
            return (in_stream, in_sink) if in_sink > 0 else None

        wait_until(mid_pipeline, timeout=180, every=0.1, what="rows in the stream and the sink")
    finally:
        kill_everything(first)
    assert first.returncode == -signal.SIGKILL
    at_kill = (rows(stream), rows(sink))
    print(
        f"\ncommitted at the kill ({time.monotonic() - started:.0f}s):"
        f" stream {at_kill[0]}, sink {at_kill[1]}"
    )
    assert 0 < at_kill[0] < TOTAL and 0 < at_kill[1] < TOTAL

    # the killed worker's connectors are still in its catalog, which opens after a SIGKILL (only
    # between workers: a running worker holds the DuckDB file's lock, so `connectql sql` cannot)
    listed = table_rows(cli_sql(home, "SELECT name, state FROM connectors ORDER BY name"))
    assert [r[0] for r in listed] == ["gen", "out"], listed

    # 2. a new worker on the same home, same script: resumes both from their checkpoints
    second = start_worker(home, script, logs, "second")
    try:

        def sink_complete():
            assert second.poll() is None, describe(logs, home, "second")
            return rows(sink) >= TOTAL

        wait_until(sink_complete, timeout=300, every=0.5, what=f"{TOTAL} rows in the sink")
        second.send_signal(signal.SIGINT)
        assert second.wait(timeout=120) == 0, describe(logs, home, "second")
    finally:
        kill_everything(second)
    print(f"sink complete and the worker stopped ({time.monotonic() - started:.0f}s)")
    out = " ".join((logs / "second.out").read_text().split())
    assert "resumed from checkpoints: gen, out" in out
    assert "stopping" in out

    # 3. every id exactly once, in the stream and in the sink, with the same values
    con = duckdb.connect()
    con.execute(f"CREATE VIEW s AS SELECT * FROM read_parquet({committed_files(stream)!r})")
    con.execute(f"CREATE VIEW k AS SELECT * FROM read_parquet({committed_files(sink)!r})")
    stats = (
        "SELECT count(*), count(DISTINCT id), min(id), max(id), sum(hash(id, v)),"
        " sum(round(v * 1e9)::BIGINT) FROM {}"
    )
    in_stream = con.execute(stats.format("s")).fetchone()
    in_sink = con.execute(stats.format("k")).fetchone()
    assert in_stream[:4] == (TOTAL, TOTAL, 0, TOTAL - 1)
    assert in_sink[:4] == (TOTAL, TOTAL, 0, TOTAL - 1)
    assert in_sink == in_stream
    differ = "SELECT count(*) FROM (SELECT id, v FROM {} EXCEPT ALL SELECT id, v FROM {})"
    assert con.execute(differ.format("s", "k")).fetchone()[0] == 0
    assert con.execute(differ.format("k", "s")).fetchone()[0] == 0

    # 4. what a user sees: both connectors STOPPED by Ctrl-C, still meant to run, no error
    status = table_rows(
        cli_sql(
            home,
            "SELECT name, state, desired_state, coalesce(last_error, '-') AS error"
            " FROM connectors ORDER BY name",
        )
    )
    assert status == [["gen", "STOPPED", "running", "-"], ["out", "STOPPED", "running", "-"]]
