"""Small stream files merged (real Spark, real files): under a running source and sink nothing
is lost or read twice, a sink created later reads every record once, a kill -9 in the middle of
a merge leaves the stream whole, and which files may be merged."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connectql.catalog.streams import append_files, committed_entries, committed_files
from connectql.errors import ConnectQLError
from connectql.runtime.retention import (
    MERGE_MIN_FILES,
    SPARK_MAX_FILE_AGE_MS,
    Limits,
    Reader,
    entry_times,
    merge_groups,
    merge_time,
)
from connectql.worker.retainer import effective_options
from tests.helpers import read_parquet_rows, run, wait_until

DAY = 24 * 3600 * 1000


def _merged(stream) -> list[str]:
    return [f for f in committed_files(stream) if Path(f).name.startswith("merged-")]


def test_merging_under_a_running_sink_loses_and_repeats_nothing(worker, tmp_path):
    out, late = tmp_path / "out", tmp_path / "late"
    began = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(seconds=1)
    run(worker, "SET stream.retention.check.interval = '300 ms'")
    run(worker, "CREATE STREAM s WITH ('merge.target.bytes' = '1 MB')")
    run(
        worker,
        "CREATE SOURCE CONNECTOR g FROM datagen INTO s WITH ('rows.per.second' = 400,"
        " 'trigger.interval' = '200 milliseconds', fields = 'id BIGINT SEQUENCE')",
    )
    sink = (
        "CREATE SINK CONNECTOR {} TO file FROM s WITH (path = '{}', 'trigger.interval' = '300 ms')"
    )
    run(worker, sink.format("k", out))
    stream = worker.catalog.get_stream("s").path
    wait_until(lambda: _merged(stream), timeout=300, what="a merge")
    run(worker, "RESTART CONNECTOR k")  # a restarted sink does not take merged files for new
    run(worker, sink.format("late", late))  # a new sink reads the merged files, once
    first = set(_merged(stream))
    wait_until(lambda: set(_merged(stream)) - first, timeout=300, what="a merge with both sinks")
    run(worker, "PAUSE CONNECTOR g")
    total = worker.catalog.query("SELECT rows_total FROM connectors WHERE name = 'g'")[1][0][0]
    for path in (out, late):
        wait_until(
            lambda p=path: (read_parquet_rows(p) or [(0, 0)])[0][0] >= total,
            timeout=90,
            what=f"{path.name} to have {total} rows",
        )
    for path in (out, late):
        assert read_parquet_rows(path) == [(total, total)]  # each record once
    assert read_parquet_rows(stream) == [(total, total)]
    assert run(worker, "SELECT count(*), count(DISTINCT id) FROM s")[0].rows == [(total, total)]
    worker.retainer.run_once()
    merged_rows = sum(pq.ParquetFile(f).metadata.num_rows for f in _merged(stream))
    assert merged_rows > total / 2 and len(committed_files(stream)) < total / 100
    # (a batch busy for a minute on a loaded machine shows STALLED: not this test's concern)
    for name in ("k", "late"):
        assert worker.catalog.state_of(name) in ("RUNNING", "STALLED")
    _, rows = worker.catalog.query(
        "SELECT records, files, oldest_record, newest_record FROM streams"
    )
    records, files, oldest, newest = rows[0]
    assert (records, files) == (total, len(committed_files(stream)))
    # merged files keep their records' commit times (in their names), not their log time
    assert began < oldest < newest < datetime.now(timezone.utc).replace(tzinfo=None)

    def behind():  # a sink's last batch is in its output before its checkpoint's commit
        worker.retainer.run_once()
        _, rows = worker.catalog.query("SELECT readers FROM streams")
        return {k: r["records_behind"] for k, r in json.loads(rows[0][0]).items()}

    def unread():  # what the sinks have not passed, for a failure message
        from connectql.runtime.retention import last_commit, reader_of

        out = {}
        for name in ("k", "late"):
            cp = worker.checkpoint_of(name)
            reader = reader_of(cp)
            left = [e for e in committed_entries(stream) if not reader.passed(e)]
            out[name] = (worker.catalog.state_of(name), last_commit(cp), reader.newest, left)
        return out

    # both have passed the merged files (a sink's batch may take long on a loaded machine)
    wait_until(lambda: behind() == {"k": 0, "late": 0}, 90, what="no sink behind", diagnose=unread)


def test_stream_merge_option_is_checked(worker):
    run(worker, "CREATE STREAM s WITH ('merge.target.bytes' = '64 MB')")
    assert worker.catalog.get_stream("s").retention_options["merge.target.bytes"] == "64 MB"
    with pytest.raises(ConnectQLError, match="'merge.target.bytes' must be a size"):
        run(worker, "ALTER STREAM s SET ('merge.target.bytes' = 'large')")
    run(worker, "ALTER STREAM s SET ('merge.target.bytes' = '0', retention = '1 day')")
    st = worker.catalog.get_stream("s")
    assert (st.retention_options["merge.target.bytes"], st.retention) == ("0", "1 day")
    run(worker, "SET stream.merge.target.bytes = '256 MB'; CREATE STREAM t")
    options = effective_options(worker.catalog.get_stream("t"), worker.catalog.settings())
    assert Limits.of(options).merge_bytes == 256 * 1024**2


def _stream_of_small_files(stream: Path, files: int, rows: int) -> int:
    stream.mkdir()
    for i in range(files):
        f = stream / f"{'a' * 12}-b{i}-0.parquet"
        ids = pa.array(range(i * rows, (i + 1) * rows), pa.int64())
        pq.write_table(pa.table({"id": ids, "pad": pa.array(["x" * 40] * rows)}), f)
        append_files(stream, [f])
    return files * rows


_MERGER = """
import sys
print("started", flush=True)
from connectql.catalog.streams import committed_entries
from connectql.runtime.merge import merge
stream = sys.argv[1]
merge(stream, committed_entries(stream), 1)
"""


def test_a_kill_during_a_merge_loses_and_repeats_nothing(tmp_path):
    stream = tmp_path / "s"
    total = _stream_of_small_files(stream, 30, 30_000)
    finished, killed = False, 0
    for delay in (0.2, 0.4, 0.6, 0.8, 1.0, 60):
        p = subprocess.Popen(
            [sys.executable, "-c", _MERGER, str(stream)], stdout=subprocess.PIPE, text=True
        )
        p.stdout.readline()  # the interpreter is up
        try:
            p.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
            killed += 1
        finished = p.returncode == 0
        assert read_parquet_rows(stream) == [(total, total)], f"after {delay} s"
        if finished:
            break
    assert finished and killed and len(committed_files(stream)) == 1
    assert read_parquet_rows(stream, "SELECT min(id), max(id) FROM t") == [(0, total - 1)]
    # what the killed merges left behind is not listed; only the sweep removes it, later
    assert len(list(stream.glob("*.parquet"))) >= 31


def _e(name: str, t: int, size: int = 100) -> dict:
    return {"path": f"file:///s/{name}", "modificationTime": t, "size": size}


def test_which_files_merge_and_their_log_time():
    now = 1_800_000_000_000
    wid = "0123456789ab"
    files = [_e(f"{wid}-b{i}-0.parquet", now + i) for i in range(2 * MERGE_MIN_FILES)]
    everything = Reader(frozenset(f"/s/{wid}-b{i}-0.parquet" for i in range(100)), now + 100)
    # a writer's batch not committed yet could be replayed: its file stays
    groups = merge_groups(files, {"k": everything}, {wid: 14}, target=1000)
    assert [len(g) for g in groups] == [10]  # 1000 bytes; the 5 left are under the minimum
    assert [len(g) for g in merge_groups(files, {"k": everything}, {}, 1000)] == [10, 10]
    assert merge_groups(files, {"k": everything}, {wid: 5}, target=1000) == []
    assert merge_groups(files, {"k": everything}, {wid: None}, target=1000) == []
    # a reader that has not passed a file holds it (and every later one) out
    partial = Reader(frozenset(f"/s/{wid}-b{i}-0.parquet" for i in range(12)), now + 12)
    assert [len(g) for g in merge_groups(files, {"k": partial}, {}, 1000)] == [10]
    assert merge_groups(files, {"k": Reader()}, {}, 1000) == []
    assert merge_groups(files, {}, {}, 0) == []
    # the merged file's log time: older than maxFileAge behind what every reader has seen,
    # and behind the group's newest file (a sink that listed the group just before)
    t = merge_time(files[:10], {"k": everything})
    assert t == now + 9 - SPARK_MAX_FILE_AGE_MS - 1
    merged = _e(f"merged-{now}-{now + 9}-abcd.parquet", t)
    assert everything.passed(merged) and not Reader().passed(merged)
    assert entry_times(merged) == (now, now + 9)
    assert merge_time([_e("x", 5 * DAY)], {}) is None  # never before 0


def test_merging_keeps_columns_added_later(tmp_path):
    from connectql.runtime.merge import merge

    stream = tmp_path / "s"
    stream.mkdir()
    old, new = stream / "old.parquet", stream / "new.parquet"
    pq.write_table(pa.table({"id": [1]}), old)
    pq.write_table(pa.table({"id": [2], "name": ["b"]}), new)
    append_files(stream, [old, new])
    before = time.time()
    merge(stream, committed_entries(stream), 1)
    rows = read_parquet_rows(stream, "SELECT id, name FROM t ORDER BY id")
    assert rows == [(1, None), (2, "b")]
    assert os.stat(old).st_mtime >= before - 1  # kept on disk for readers that listed it


KILLED_SCRIPT = """
SET stream.retention.check.interval = '200 ms';
CREATE STREAM IF NOT EXISTS s WITH ('merge.target.bytes' = '1 MB');
CREATE SOURCE CONNECTOR IF NOT EXISTS g FROM datagen INTO s WITH ('rows.per.second' = 1000,
  'rows.total' = {total}, 'trigger.interval' = '200 milliseconds',
  fields = 'id BIGINT SEQUENCE, v DOUBLE RANDOM(0, 1)');
CREATE SINK CONNECTOR IF NOT EXISTS k TO file FROM s WITH (path = '{sink}',
  'trigger.interval' = '300 ms');
"""


@pytest.mark.scenario
def test_a_worker_killed_while_merging_under_a_running_sink_loses_and_repeats_nothing(tmp_path):
    """kill -9 of a `connectql run` worker whose retention pass merges the stream under a
    running source and sink, four times: each as soon as a merged file is being written (on
    disk, not yet in the log), or a moment after a merge when none is caught. After a last
    worker has run to the end, the stream and the sink each hold every id once, alike."""
    from tests.crash import kill_everything, start_worker

    total, home, sink, logs = 60_000, tmp_path / "home", tmp_path / "sink", tmp_path / "logs"
    logs.mkdir()
    script = tmp_path / "merging.sql"
    script.write_text(KILLED_SCRIPT.format(total=total, sink=sink))
    stream, during = home / "streams/s", 0
    for n in range(4):
        proc = start_worker(home, script, logs, f"w{n}")
        try:
            logged, leftover = _merge_files(stream)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and proc.poll() is None:
                now_logged, unlogged = _merge_files(stream)
                if unlogged - leftover:  # a merged file being written
                    during += 1
                    break
                if now_logged - logged:
                    time.sleep((0.05, 0.15, 0.3, 0.6)[n])
                    break
                time.sleep(0.005)
        finally:
            kill_everything(proc)
    last = start_worker(home, script, logs, "last")
    try:
        wait_until(lambda: (read_parquet_rows(sink) or [(0, 0)])[0][0] >= total, 300, 0.5)
        last.send_signal(signal.SIGINT)
        assert last.wait(timeout=120) == 0
    finally:
        kill_everything(last)
    print(f"\n{during} of 4 kills landed while a merged file was being written")
    whole = "SELECT count(*), count(DISTINCT id), min(id), max(id), sum(hash(id, v)) FROM t"
    in_stream, in_sink = read_parquet_rows(stream, whole), read_parquet_rows(sink, whole)
    assert in_stream[0][:4] == (total, total, 0, total - 1)
    assert in_sink == in_stream
    assert _merged(stream), "no merge happened"


def _merge_files(stream: Path) -> tuple[set[str], set[str]]:
    """Names of the merged files in the stream's log, and of those on disk but not in it."""
    if not (stream / "_spark_metadata").exists():
        return set(), set()
    logged = {Path(f).name for f in _merged(stream)}
    return logged, {f.name for f in stream.glob("merged-*.parquet")} - logged


def test_a_toolkit_sources_timestamps_dates_and_nested_values_merge_and_expire(worker, tmp_path):
    """A Python source's TIMESTAMP (microseconds, UTC) and DATE columns merge with the files of
    the same stream, and the merged file keeps every value; then the stream expires whole."""
    run(worker, "SET stream.retention.check.interval = '1 hour'")  # passes run here by hand
    run(worker, "CREATE STREAM t WITH ('merge.target.bytes' = '1 MB')")
    run(
        worker,
        "CREATE SOURCE CONNECTOR g FROM datagen INTO t WITH ('rows.total' = 600, run = 'once',"
        " 'batch.max.records' = 50, fields = 'id BIGINT SEQUENCE, ts TIMESTAMP NOW,"
        " d DATE NOW, v DOUBLE RANDOM(0, 1)')",
    )
    worker.wait_for_once()
    stream = worker.catalog.get_stream("t").path
    query = "SELECT id, ts, d, v FROM t ORDER BY id, ts"
    before = read_parquet_rows(stream, query)
    assert len(before) == 600 and len(committed_files(stream)) >= MERGE_MIN_FILES
    worker.retainer.run_once()
    first = _merged(stream)
    assert first, "no merge happened"
    assert read_parquet_rows(stream, query) == before  # every value as it was
    # more files beside the merged one (Spark's, INT96 timestamps), merged with it in turn
    run(worker, "DROP CONNECTOR g")
    run(
        worker,
        "CREATE SOURCE CONNECTOR g2 FROM datagen INTO t WITH ('rows.total' = 600, run = 'once',"
        " 'batch.max.records' = 50, fields = 'id BIGINT SEQUENCE, ts TIMESTAMP NOW,"
        " d DATE NOW, v DOUBLE RANDOM(0, 1)')",
    )
    worker.wait_for_once()
    before = read_parquet_rows(stream, query)
    worker.retainer.run_once()
    assert set(_merged(stream)) - set(first), "no second merge happened"
    assert read_parquet_rows(stream, query) == before
    assert run(worker, "SELECT count(*) FROM t")[0].rows == [(1200,)]
    run(worker, "ALTER STREAM t SET (retention = '1 millisecond')")
    worker.retainer.run_once()
    assert committed_files(stream) == []
