"""Small helpers shared by the end-to-end tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import duckdb

from connectql.catalog.streams import committed_files


def while_changing(execute, statements, rounds: int, wait) -> None:
    """Run `statements(i)` (SQL texts) through `execute` for rounds 1..rounds on a thread, 50 ms
    apart, while `wait()` runs here; the thread is joined before it returns."""

    def change() -> None:
        for i in range(1, rounds + 1):
            for statement in statements(i):
                execute(statement)
            time.sleep(0.05)

    changer = threading.Thread(target=change)
    changer.start()
    try:
        wait()
    finally:
        changer.join()


def wait_until(
    check, timeout: float = 60.0, every: float = 0.2, what: str = "condition", diagnose=None
):
    """Poll `check()` until it returns something truthy; fail the test after `timeout` seconds
    (saying what `diagnose()` returns then, when given)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    seen = f"; found {diagnose()}" if diagnose else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}{seen}")


def read_parquet_rows(path, sql: str = "SELECT count(*), count(DISTINCT id) FROM t"):
    """Run `sql` over the committed Parquet files of a stream or file sink directory (table t)."""
    files = committed_files(path)
    if not files:
        return None
    con = duckdb.connect()
    con.execute(f"CREATE VIEW t AS SELECT * FROM read_parquet({files!r}, union_by_name = true)")
    return con.execute(sql).fetchall()


def lag_of(worker, name: str) -> int | None:
    """The connector's `lag` in the connectors table."""
    return worker.catalog.query("SELECT lag FROM connectors WHERE name = ?", [name])[1][0][0]


def lag_bytes_below(worker, name: str, limit: int) -> bool:
    """Whether the connector's lag_bytes is known and under `limit`."""
    found = worker.catalog.query("SELECT lag_bytes FROM connectors WHERE name = ?", [name])[1]
    return found[0][0] is not None and 0 <= found[0][0] < limit


def lag_below(worker, name: str, limit: int) -> bool:
    """Whether the connector's lag is known and under `limit`."""
    lag = lag_of(worker, name)
    return lag is not None and 0 <= lag < limit


def run(worker, sql: str):
    """Execute a script in `worker` and return the list of results. A statement that fails
    carries the connectors' last state changes as a note, for the test's report."""
    from connectql.errors import StateError

    try:
        return [result for _stmt, result in worker.run_script(sql)]
    except StateError as e:
        history = worker.catalog.query(
            "SELECT time, connector, from_state, to_state, reason FROM connector_events"
            " ORDER BY time DESC LIMIT 20"
        )[1]
        e.add_note("last state changes, newest first:\n" + "\n".join(map(str, history)))
        raise


def replay_last_batch(home, script: str, connector: str, before_replay=None) -> None:
    """Run `script` (a `run = 'once'` pipeline) in a worker, then make Spark believe the
    connector's last batch never finished (a crash between the sink's commit and Spark's commit
    log) and run the connector again in a new worker: Spark replays that batch."""
    from connectql.worker.worker import Worker

    first = Worker(home)
    run(first, script)
    first.wait_for_once()
    first.close(stop_spark=False)
    commits = home / f"checkpoints/{connector}/commits"
    last = max(commits.iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    last.unlink()
    (commits / f".{last.name}.crc").unlink(missing_ok=True)
    if before_replay:
        before_replay()
    second = Worker(home)
    run(second, f"RESTART CONNECTOR {connector}")
    second.wait_for_once()
    second.close(stop_spark=False)
    assert last.exists(), "Spark ran the batch again and logged its commit"


def run_rejecting_sinks(worker, sink_type: str, conn: str) -> int:
    """2000 datagen rows into two existing tables `tolerant` and `strict` of a database sink
    (`conn`: its connection options), both with CHECK (qty <= 100): `tolerant` dead-letters to
    `rejects`, `strict` fails. Checks the dead letters, that `tolerant`'s tasks.max = 1 made one
    writer of two stream files per batch (two without it), and the counts of `tolerant`;
    returns how many rows have qty > 100."""

    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR gen FROM datagen INTO nums WITH ('rows.total' = 2000,
          run = 'once', seed = 5, fields = 'id BIGINT SEQUENCE, qty INT RANDOM(1, 120)',
          'tasks.max' = 2);
        CREATE SINK CONNECTOR tolerant TO {sink_type} FROM nums WITH ({conn}, table = 'tolerant',
          'primary.key' = 'id', run = 'once', 'tasks.max' = 1,
          'errors.tolerance' = 'all', 'errors.deadletter.stream' = 'rejects');
        CREATE SINK CONNECTOR strict TO {sink_type} FROM nums WITH ({conn}, table = 'strict',
          run = 'once', 'errors.retry.max' = 0);
        """,
    )
    worker.wait_for_once()
    over = read_parquet_rows(worker.home / "streams/nums", "SELECT count(*) FROM t WHERE qty > 100")
    over = over[0][0]
    assert over > 0
    letters = run(
        worker, "SELECT connector, stage, error_class, raw_record, source_offset FROM rejects"
    )[0].rows
    assert len(letters) == over
    assert {(c, s, e) for c, s, e, _r, _o in letters} == {("tolerant", "write", "CheckViolation")}
    assert all(json.loads(raw)["qty"] > 100 for *_x, raw, _o in letters)
    assert all("batch" in json.loads(offset) for *_x, offset in letters)
    # a rejected row's "row" is its writer task's partition << 40 | its place in the task
    assert {json.loads(offset)["row"] >> 40 for *_x, offset in letters} == {0}
    counts = worker.catalog.query(
        "SELECT rows_total, rows_written, rows_dead_lettered FROM connectors WHERE name = 'tolerant'"
    )[1]
    assert counts == [(2000, 2000 - over, over)]
    assert worker.catalog.get_connector("strict").state == "FAILED"
    return over


def check_poison_isolated(worker, table: str, position: str) -> str:
    """The end of a several-table source's poison test: with connectors 'tolerant' (into
    stream s, dead letters in 'rejects') and 'strict' (errors.retry.max = 0) over tables bad,
    good1, good2, where good1 got ids 1 and 2, good2 id 1 and bad ids 1 (the poison) and 2:
    every other change flowed, one dead letter names `table` and the log `position`, tolerant
    runs on; strict runs on too, its table bad stopped (tables_failed and last_error name it
    and the position; none of its changes from the poison on in its stream) and its other
    tables whole. Returns the dead letter's message."""

    def ids(stream: str):
        rows = read_parquet_rows(worker.home / "streams" / stream, "SELECT id FROM t ORDER BY id")
        return [r[0] for r in rows or []]

    wait_until(lambda: ids("s_good1") == [1, 2], timeout=90, what="good1's changes")
    wait_until(lambda: ids("s_good2") == [1] and ids("s_bad") == [2], timeout=60)
    rejects = worker.home / "streams/rejects"
    query = "SELECT connector, stage, error_class, error_message, source_offset FROM t"
    wait_until(lambda: read_parquet_rows(rejects, query), timeout=60, what="the dead letter")
    letters = read_parquet_rows(rejects, query)
    assert len(letters) == 1
    connector, stage, error_class, message, offset = letters[0]
    assert (connector, stage, error_class) == ("tolerant", "read", "ValueError")
    assert f"table {table}" in message and position in message
    assert '"table":"bad"' in offset.replace(" ", "")
    tolerant = worker.catalog.get_connector("tolerant")
    assert tolerant.state == "RUNNING", (tolerant.state, tolerant.last_error)
    wait_until(lambda: ids("x_good1") == [1, 2] and ids("x_good2") == [1], timeout=90)
    strict = worker.catalog.get_connector("strict")
    assert strict.state == "RUNNING" and list(strict.tables_failed) == ["bad"]
    error = strict.tables_failed["bad"]
    assert f"table {table}" in error and position in error and "other tables go on" in error
    assert "errors.tolerance = 'all'" in error and strict.last_error == error
    assert ids("x_bad") == []  # the poison's transaction and bad's later changes left out
    events = "SELECT reason FROM connector_events WHERE connector = 'strict'"
    reasons = [r for (r,) in run(worker, events)[0].rows]
    assert any(r.startswith("table bad stopped") for r in reasons), reasons
    described = dict(run(worker, "DESCRIBE CONNECTOR strict")[0].rows)
    assert described["table bad stopped"] == error
    return message


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children first), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], list(children.get(pid, []))
    while todo:
        p = todo.pop(0)
        found.append(p)
        todo += children.get(p, [])
    return found


def interrupt(
    proc: subprocess.Popen, timeout: float = 120, sig: int = signal.SIGINT
) -> tuple[str, str]:
    """Ctrl-C (or `sig`) to a `connectql run` started in the background; its output once it stopped. One
    that does not stop within `timeout` is killed with its JVM and Python workers (a failed
    test leaves no worker behind), and the test fails saying so."""
    proc.send_signal(sig)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for pid in [proc.pid, *descendants(proc.pid)]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _out, err = proc.communicate()
        raise AssertionError(
            f"connectql run did not stop within {timeout} s of signal {sig} (killed):\n{err[-2000:]}"
        ) from None
