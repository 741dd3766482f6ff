"""Stream retention under a running datagen source and a file sink (real Spark, real files):
expired files leave the stream's log and the disk, sinks still get every record once, a paused
sink holds retention back under 'wait' and reports what it lost under 'drop'."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connectql.catalog.streams import (
    append_files,
    committed_entries,
    committed_files,
    prune_log,
    remove_files,
    sweep_orphans,
)
from connectql.errors import ConnectQLError
from connectql.runtime.retention import (
    Limits,
    Reader,
    decide,
    files_read,
    reader_of,
    size_bytes,
)
from tests.helpers import read_parquet_rows, run, wait_until

SOURCE = (
    "CREATE SOURCE CONNECTOR g FROM datagen INTO s WITH ('rows.per.second' = 200,"
    " 'trigger.interval' = '300 milliseconds', fields = 'id BIGINT SEQUENCE')"
)


def _sink(out: Path, extra: str = "") -> str:
    return (
        f"CREATE SINK CONNECTOR k TO file FROM s WITH (path = '{out}',"
        f" 'trigger.interval' = '300 milliseconds'{extra})"
    )


def _stream_path(worker) -> str:
    return worker.catalog.get_stream("s").path


def _rows_total(worker, name: str) -> int:
    return worker.catalog.query("SELECT rows_total FROM connectors WHERE name = ?", [name])[1][0][0]


def _events(worker, name: str) -> list[str]:
    rows = worker.catalog.query(
        "SELECT reason FROM connector_events WHERE connector = ? ORDER BY time", [name]
    )[1]
    return [r[0] for r in rows]


def _lost(worker) -> int:
    return worker.catalog.query("SELECT rows_lost FROM connectors WHERE name = 'k'")[1][0][0]


def _left(worker) -> str:
    """What a pass of retention sees of the files still in the log (a failure's diagnosis)."""
    reader = reader_of(worker.checkpoint_of("k"))
    files = [
        (Path(e["path"]).name, e["modificationTime"], reader.passed(e))
        for e in committed_entries(_stream_path(worker))
    ]
    alive = worker.retainer._thread.is_alive()
    return f"files (name, time, passed by k) {files[:5]}, k read {len(reader.read)}; retainer alive {alive}"


def _stop_source_and_drain(worker, out: Path) -> int:
    """Pause the source, wait until the sink has every record it wrote but those it lost;
    returns the source's count."""
    run(worker, "PAUSE CONNECTOR g")
    total = _rows_total(worker, "g")
    wait_until(
        lambda: (read_parquet_rows(out) or [(0, 0)])[0][0] + _lost(worker) >= total,
        timeout=90,
        what=f"the sink to have {total} rows",
        diagnose=lambda: read_parquet_rows(out),
    )
    return total


def test_expired_files_leave_log_and_disk_and_the_sink_gets_every_record_once(worker, tmp_path):
    out = tmp_path / "out"
    run(worker, "SET stream.retention.check.interval = '300 ms'")
    run(worker, "CREATE STREAM s WITH (retention = '2 s')")
    run(worker, SOURCE)
    run(worker, _sink(out))
    seen: set[str] = set()

    def removed():
        now = set(committed_files(_stream_path(worker)))
        seen.update(now)
        return seen - now

    gone = wait_until(removed, timeout=90, what="retention to remove a file")
    assert not any(Path(f).exists() for f in gone), "removed from the log but left on disk"
    # a sink restarted after retention goes on from its checkpoint
    run(worker, "RESTART CONNECTOR k")
    wait_until(lambda: len(removed()) > len(gone), timeout=60, what="more files removed")
    total = _stop_source_and_drain(worker, out)
    assert read_parquet_rows(out) == [(total, total)]  # each record once
    ids = read_parquet_rows(out, "SELECT min(id), max(id) FROM t")
    assert ids == [(0, total - 1)]
    assert worker.catalog.state_of("k") == "RUNNING"
    # what is left is what is younger than the retention: the stream holds fewer records
    wait_until(
        lambda: not committed_files(_stream_path(worker)),
        timeout=90,  # the sink's last commit and a retention pass, on a loaded machine
        what="all expired",
        diagnose=lambda: _left(worker),
    )
    assert not [p for p in Path(_stream_path(worker)).glob("*.parquet")]
    worker.retainer.run_once()
    _, rows = worker.catalog.query("SELECT records, files, bytes, readers FROM streams")
    assert rows[0][:3] == (0, 0, 0)
    assert json.loads(rows[0][3]) == {
        "k": {"records_behind": 0, "files_behind": 0, "holds_retention": False}
    }


def test_a_paused_sink_holds_retention_back_under_wait_and_reports_loss_under_drop(
    worker, tmp_path
):
    out = tmp_path / "out"
    run(worker, "SET stream.retention.check.interval = '300 ms'")
    run(worker, "CREATE STREAM s WITH (retention = '1 s')")
    run(worker, SOURCE)
    run(worker, _sink(out))
    wait_until(lambda: read_parquet_rows(out), timeout=90, what="the sink's first rows")
    run(worker, "PAUSE CONNECTOR k")
    read_so_far = read_parquet_rows(out)[0][0]

    def unread():
        return set(committed_files(_stream_path(worker))) - files_read(worker.checkpoint_of("k"))

    held = wait_until(unread, timeout=90, what="a file the paused sink has not read")
    wait_until(
        lambda: all(time.time() - Path(f).stat().st_mtime > 2 for f in held),
        what="the unread files to be past retention",
    )
    worker.retainer.run_once()  # a pass with them past retention: they stay
    assert held <= set(committed_files(_stream_path(worker)))
    assert all(Path(f).exists() for f in held)
    wait_until(
        lambda: any("holds back retention of stream s" in e for e in _events(worker, "k")),
        timeout=30,
        what="the held-back event",
    )
    assert held <= set(committed_files(_stream_path(worker)))
    d = {r[0]: r[1] for r in run(worker, "DESCRIBE STREAM s")[0].rows}
    assert "holds retention back" in d["sink k"] and d["option retention"] == "1 s"
    assert int(d["records"]) >= _rows_total(worker, "g") - read_so_far - 1000

    run(worker, "ALTER STREAM s SET ('retention.policy' = 'drop')")
    wait_until(
        lambda: not any(Path(f).exists() for f in held), timeout=30, what="unread files dropped"
    )
    lost = _lost(worker)
    assert lost >= len(held)  # each file holds a record or more
    assert any("lost" in e and "retention.policy = 'drop'" in e for e in _events(worker, "k"))
    # back to 'wait' before the sink runs again, so that the count below is exact
    run(worker, "ALTER STREAM s SET ('retention.policy' = 'wait')")
    run(worker, "RESUME CONNECTOR k")
    total = _stop_source_and_drain(worker, out)
    lost = _lost(worker)
    got = read_parquet_rows(out)[0]
    assert got[0] == got[1] == total - lost  # the rest arrived, each once
    assert worker.catalog.state_of("k") == "RUNNING"


def test_stream_options_are_checked_and_altered(worker):
    run(worker, "CREATE STREAM s WITH (retention = '7 days', 'retention.bytes' = '10 GB')")
    st = worker.catalog.get_stream("s")
    assert (st.retention, st.retention_bytes, st.retention_policy) == ("7 days", "10 GB", None)
    for bad, named in [
        ("CREATE STREAM t WITH (retention = 'soon')", "'retention'"),
        ("CREATE STREAM t WITH ('retention.bytes' = 'lots')", "'retention.bytes'"),
        ("CREATE STREAM t WITH (retension = '1 s')", "unknown option 'retension'"),
        ("ALTER STREAM s SET ('retention.policy' = 'keep')", "'retention.policy'"),
        ("ALTER STREAM nope SET (retention = '1 s')", "no stream named 'nope'"),
        ("SET stream.retention.bytes = 'big'", "'retention.bytes'"),
        ("SET stream.retention.check.interval = 'often'", "'retention'"),
    ]:
        with pytest.raises(ConnectQLError, match=named):
            run(worker, bad)
    assert not worker.catalog.find_stream("t")
    assert worker.catalog.get_stream("s").retention_policy is None  # a refused ALTER: no change
    altered = run(worker, "ALTER STREAM s SET ('retention.policy' = 'DROP', retention = '1 hour')")
    assert "retention.policy = drop" in altered[0].message
    st = worker.catalog.get_stream("s")
    assert (st.retention, st.retention_bytes, st.retention_policy) == ("1 hour", "10 GB", "drop")


def _entry(name: str, t: int, size: int = 100) -> dict:
    return {"path": f"file:///s/{name}", "modificationTime": t, "size": size}


def test_decide_by_age_size_and_policy():
    files = [_entry("a", 1000), _entry("b", 2000), _entry("c", 3000)]
    by_age = decide(files, Limits(age_ms=1500), {}, now_ms=4000)
    assert [e["path"] for e in by_age.remove] == ["file:///s/a", "file:///s/b"]
    by_size = decide(files, Limits(bytes=150), {}, now_ms=4000)
    assert [e["path"] for e in by_size.remove] == ["file:///s/a", "file:///s/b"]
    read = {"k": Reader(frozenset({"/s/a"})), "j": Reader(frozenset({"/s/a", "/s/b"}))}
    wait = decide(files, Limits(age_ms=1500), read, now_ms=4000)
    assert [e["path"] for e in wait.remove] == ["file:///s/a"]
    assert list(wait.held) == ["k"] and not wait.lost
    drop = decide(files, Limits(age_ms=1500, policy="drop"), read, now_ms=4000)
    assert len(drop.remove) == 2 and [e["path"] for e in drop.lost["k"]] == ["file:///s/b"]
    assert size_bytes("10 GB") == 10 * 1024**3 and size_bytes("512") == 512
    assert size_bytes("1.5 MiB") == int(1.5 * 1024**2)


def test_the_log_and_the_folder_keep_only_what_readers_need(tmp_path):
    stream = tmp_path / "s"
    stream.mkdir()
    table = pa.table({"id": [1, 2]})
    files = []
    for i in range(12):
        f = stream / f"w-b{i}-0.parquet"
        pq.write_table(table, f)
        append_files(stream, [f])
        files.append(f)
    remove_files(stream, {files[0].resolve().as_uri(), files[1].resolve().as_uri()})
    assert sorted(committed_files(stream)) == sorted(str(f.resolve()) for f in files[2:])
    meta = stream / "_spark_metadata"
    assert (meta / "19.compact").exists()  # empty batches up to the compaction batch
    # the removed files are the caller's to delete; an old orphan goes, a young one stays
    old = time.time() - 3600
    for f in (files[0], *(meta / str(n) for n in range(9))):
        os.utime(f, (old, old))
    assert sweep_orphans(stream) == 1 and not files[0].exists() and files[1].exists()
    assert prune_log(stream) == 9  # log files before the previous compact, and old
    assert (meta / "9.compact").exists() and (meta / "19.compact").exists()
    assert sorted(committed_files(stream)) == sorted(str(f.resolve()) for f in files[2:])


def test_worker_defaults_apply_to_streams_that_set_none(worker):
    from connectql.worker.retainer import effective_options

    run(
        worker,
        """SET stream.retention = '2 s'; SET stream.retention.bytes = '1 GB';
        SET stream.retention.policy = 'drop';
        CREATE STREAM plain; CREATE STREAM own WITH (retention = '1 hour')""",
    )
    saved = worker.catalog.settings()
    assert effective_options(worker.catalog.get_stream("plain"), saved) == {
        "retention": "2 s",
        "retention.bytes": "1 GB",
        "retention.policy": "drop",
        "merge.target.bytes": None,  # their defaults apply
        "cleanup": None,
        "delete.retention": None,
    }
    assert effective_options(worker.catalog.get_stream("own"), saved)["retention"] == "1 hour"
    shown = {r[0]: r[1] for r in run(worker, "SHOW SETTINGS")[0].rows}
    assert shown["stream.retention"] == "2 s" and shown["stream.retention.policy"] == "drop"


def test_retention_bytes_removes_the_oldest_files_until_the_stream_fits(worker):
    run(worker, "CREATE STREAM s WITH ('merge.target.bytes' = '0')")
    stream = Path(_stream_path(worker))
    stream.mkdir(parents=True, exist_ok=True)
    files, now = [], time.time()
    for i in range(10):
        f = stream / f"w-b{i}-0.parquet"
        pq.write_table(pa.table({"id": pa.array(range(i * 500, (i + 1) * 500))}), f)
        os.utime(f, (now - 100 + i, now - 100 + i))  # in order, the oldest first
        append_files(stream, [f])
        files.append(f)
    sizes = [f.stat().st_size for f in files]
    limit = sum(sizes) * 0.45
    run(worker, f"ALTER STREAM s SET ('retention.bytes' = '{int(limit)}')")
    worker.retainer.run_once()
    kept = sorted(committed_files(stream))
    assert kept == [str(f.resolve()) for f in files[-len(kept) :]]  # the newest stay
    assert sum(sizes[-len(kept) :]) <= limit < sum(sizes[-len(kept) - 1 :])  # no more went
    assert not any(f.exists() for f in files[: -len(kept)])  # the others left the disk too
    _, rows = worker.catalog.query("SELECT records, files, bytes FROM streams")
    assert rows[0] == (500 * len(kept), len(kept), sum(sizes[-len(kept) :]))
    assert run(worker, "SELECT min(id), count(*) FROM s")[0].rows == [
        ((10 - len(kept)) * 500, 500 * len(kept))
    ]


def test_a_sink_has_read_the_files_of_its_source_log_up_to_its_last_commits_end(tmp_path):
    """Spark's file source numbers its own log batches: after a batch that read no new file
    (or a restart) they drift from the query's batch ids. What a sink has read is what its
    last committed batch's end offset ({"logOffset": n}) covers, not its batch id."""
    from connectql.runtime.retention import batch_files, reader_of

    cp = tmp_path / "cp"
    for folder in ("offsets", "commits", "sources/0"):
        (cp / folder).mkdir(parents=True)
    for batch, log in ((0, 0), (1, 2), (2, 3)):  # query batch 1 ended at the source's log 2
        (cp / "offsets" / str(batch)).write_text(f'v1\n{{}}\n{{"logOffset":{log}}}\n')
    for batch in (0, 1):
        (cp / "commits" / str(batch)).write_text("v1\n{}\n")
    for log in range(4):
        entry = {"path": f"file:///s/f{log}.parquet", "timestamp": 1000 + log, "batchId": log}
        (cp / "sources" / "0" / str(log)).write_text("v1\n" + json.dumps(entry) + "\n")
    assert reader_of(cp).read == {"/s/f0.parquet", "/s/f1.parquet", "/s/f2.parquet"}
    assert batch_files(cp, 1) == ["file:///s/f1.parquet", "file:///s/f2.parquet"]
    assert batch_files(cp, 2) == ["file:///s/f3.parquet"]
