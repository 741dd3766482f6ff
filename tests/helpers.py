"""Small helpers shared by the end-to-end tests."""

from __future__ import annotations

import time

import duckdb

from connectql.catalog.streams import committed_files


def wait_until(check, timeout: float = 60.0, every: float = 0.2, what: str = "condition"):
    """Poll `check()` until it returns something truthy; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def read_parquet_rows(path, sql: str = "SELECT count(*), count(DISTINCT id) FROM t"):
    """Run `sql` over the committed Parquet files of a stream or file sink directory (table t)."""
    files = committed_files(path)
    if not files:
        return None
    con = duckdb.connect()
    con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet({files!r}, union_by_name = true)")
    return con.execute(sql).fetchall()


def run(worker, sql: str):
    """Execute a script in `worker` and return the list of results."""
    return [result for _stmt, result in worker.run_script(sql)]
