"""The s3 source through a real worker and SeaweedFS: records of every object exactly once in key
order with `__source`, batches that end inside an object, objects added while running, replaced
objects read again, objects chosen by a glob or regex pattern, lag in objects and bytes in
`connectors`, bad records as dead letters or a failure naming object and line, a schema inferred
at CREATE, and refusals naming what is wrong."""

from __future__ import annotations

import gzip
import json

import pytest

from connectql.errors import ConnectQLError, PlanError
from tests.helpers import read_parquet_rows, run, wait_until
from tests.s3server import ACCESS_KEY, SECRET_KEY, bucket, s3server  # noqa: F401
from tests.test_s3_io import jsonl, put

pytestmark = pytest.mark.spark


def with_options(server, name: str, **more) -> str:
    opts = {**server.options(), "bucket": name, **more}
    return ", ".join(f"'{k}' = '{v}'" for k, v in opts.items())


def rows(n0: int, n1: int) -> list[dict]:
    return [{"id": i, "name": f"n{i}", "v": i / 4} for i in range(n0, n1)]


def stream_rows(worker, stream: str) -> list[tuple]:
    path = worker.home / "streams" / stream
    return read_parquet_rows(path, "SELECT id, name, v, __source FROM t ORDER BY id") or []


def progress(worker) -> tuple | None:
    """The source's lag (objects left), and objects and bytes read to the end."""
    found = worker.catalog.query(
        "SELECT c.lag, o.committed_offset FROM connectors c JOIN connector_offsets o"
        " ON o.connector = c.name WHERE c.name = 'landing'"
    )[1]
    if not found or not found[0][1]:
        return None
    committed = json.loads(found[0][1])
    return found[0][0], committed["done"], committed["bytes"]


def state(worker, name: str) -> str:
    return worker.catalog.get_connector(name).state


def test_objects_in_key_order_exactly_once_across_batches_ending_mid_object(
    worker,
    s3server,  # noqa: F811
    bucket,  # noqa: F811
):
    fs = s3server.filesystem()
    put(fs, f"{bucket}/in/b.jsonl.gz", gzip.compress(jsonl(rows(7, 12))))
    put(fs, f"{bucket}/in/a.jsonl", jsonl(rows(0, 7)))
    put(fs, f"{bucket}/other/z.jsonl", jsonl(rows(100, 101)))
    opts = with_options(s3server, bucket, prefix="in/", **{"batch.max.records": 3})
    run(
        worker,
        f"CREATE SOURCE CONNECTOR landing FROM s3 INTO events WITH ({opts},"
        " schema = 'id BIGINT, name STRING, v DOUBLE', 'poll.interval.ms' = 100)",
    )
    wait_until(lambda: len(stream_rows(worker, "events")) == 12, what="the first objects")
    got = stream_rows(worker, "events")
    assert [(r[0], r[1], r[2]) for r in got] == [(r["id"], r["name"], r["v"]) for r in rows(0, 12)]
    sources = [json.loads(r[3]) for r in got]
    assert sources[6] == {"bucket": bucket, "key": "in/a.jsonl", "record": 6}
    assert sources[7] == {"bucket": bucket, "key": "in/b.jsonl.gz", "record": 0}
    # progress where users look: objects (lag) and bytes read to the end, in the offsets
    sizes = sum(fs.get_file_info(f"{bucket}/in/{k}").size for k in ("a.jsonl", "b.jsonl.gz"))
    wait_until(lambda: progress(worker) == (0, 2, sizes), what="the progress of both objects")
    # a new object is picked up; a replaced one (another ETag) is read again as new
    put(fs, f"{bucket}/in/c.jsonl", jsonl(rows(12, 14)))
    put(fs, f"{bucket}/in/a.jsonl", jsonl(rows(20, 22)))
    wait_until(lambda: len(stream_rows(worker, "events")) == 16, what="the new objects")
    assert [r[0] for r in stream_rows(worker, "events")][-4:] == [12, 13, 20, 21]
    # an object deleted from the bucket leaves the offset (it holds what a listing finds)
    fs.delete_file(f"{bucket}/in/b.jsonl.gz")
    wait_until(lambda: committed_keys(worker) == ["in/a.jsonl", "in/c.jsonl"], what="b gone")
    assert len(stream_rows(worker, "events")) == 16
    assert state(worker, "landing") == "RUNNING"


def lags(worker) -> tuple:
    """The source's lag (objects not read to the end), lag_bytes and rows in the stream."""
    found = worker.catalog.query("SELECT lag, lag_bytes FROM connectors WHERE name = 'landing'")
    lag, lag_bytes = found[1][0]
    return lag, lag_bytes, len(stream_rows(worker, "events"))


def test_objects_and_bytes_left_are_in_connectors_mid_run_and_zero_at_the_end(
    worker,
    s3server,  # noqa: F811
    bucket,  # noqa: F811
):
    """A glob pattern chooses the objects; a batch every 10 minutes of 3 records leaves both
    matching objects unfinished after the first, until a short trigger lets it catch up."""
    fs = s3server.filesystem()
    put(fs, f"{bucket}/in/a.jsonl", jsonl(rows(0, 7)))
    put(fs, f"{bucket}/in/b.jsonl.gz", gzip.compress(jsonl(rows(7, 12))))
    put(fs, f"{bucket}/in/c.csv", b"id,name,v\n100,x,1.0\n")  # not matched by the glob
    sizes = sum(fs.get_file_info(f"{bucket}/in/{k}").size for k in ("a.jsonl", "b.jsonl.gz"))
    opts = with_options(s3server, bucket, prefix="in/", pattern="in/*.jsonl*")
    run(
        worker,
        f"CREATE SOURCE CONNECTOR landing FROM s3 INTO events WITH ({opts},"
        " schema = 'id BIGINT, name STRING, v DOUBLE', 'batch.max.records' = 3,"
        " 'trigger.interval' = '10 minutes')",
    )
    wait_until(lambda: lags(worker)[2] == 3, what="the first batch")
    wait_until(lambda: lags(worker)[0] is not None, what="the first batch's progress")
    assert lags(worker) == (2, sizes, 3)
    run(worker, "ALTER CONNECTOR landing SET ('trigger.interval' = '100 milliseconds')")
    wait_until(lambda: lags(worker) == (0, 0, 12), what="every record, nothing left")
    assert [r[0] for r in stream_rows(worker, "events")] == list(range(12))
    assert run(worker, "SELECT lag_bytes FROM connectors WHERE name = 'landing'")[0].rows == [(0,)]


def committed_keys(worker) -> list[str]:
    found = worker.catalog.query(
        "SELECT committed_offset FROM connector_offsets WHERE connector = 'landing'"
    )[1]
    return list(json.loads(found[0][0])["objects"]) if found and found[0][0] else []


def test_bad_records_go_to_dead_letters_with_key_and_record(worker, s3server, bucket):  # noqa: F811
    fs = s3server.filesystem()
    lines = [json.dumps(r) for r in rows(0, 3)]
    lines.insert(1, '{"id": "not a number"}')
    put(fs, f"{bucket}/in/a.jsonl", "\n".join(lines).encode())
    opts = with_options(s3server, bucket, prefix="in/")
    run(
        worker,
        f"CREATE SOURCE CONNECTOR landing FROM s3 INTO events WITH ({opts}, run = 'once',"
        " schema = 'id BIGINT, name STRING, v DOUBLE', 'errors.tolerance' = 'all',"
        " 'errors.deadletter.stream' = 'bad')",
    )
    worker.wait_for_once()
    assert [r[0] for r in stream_rows(worker, "events")] == [0, 1, 2]
    dead = read_parquet_rows(worker.home / "streams/bad", "SELECT source_offset, raw_record FROM t")
    assert [(json.loads(o), raw) for o, raw in dead] == [
        ({"bucket": bucket, "key": "in/a.jsonl", "record": 1, "line": 2}, '{"id": "not a number"}')
    ]


def test_a_bad_record_fails_the_connector_naming_object_and_line(worker, s3server, bucket):  # noqa: F811
    fs = s3server.filesystem()
    put(fs, f"{bucket}/in/a.jsonl", b'{"id": 1}\n\n{"id": oops}\n')
    opts = with_options(s3server, bucket, prefix="in/")
    run(
        worker,
        f"CREATE SOURCE CONNECTOR landing FROM s3 INTO events WITH ({opts}, run = 'once',"
        " schema = 'id BIGINT', 'errors.retry.max' = 0)",
    )
    worker.wait_for_once()
    wait_until(lambda: state(worker, "landing") == "FAILED", what="FAILED")
    error = worker.catalog.get_connector("landing").last_error
    where = {"bucket": bucket, "key": "in/a.jsonl", "record": 1, "line": 3}
    assert json.dumps(where) in error, error


def test_schema_is_inferred_from_the_first_object_at_create(worker, s3server, bucket):  # noqa: F811
    """... from the first object the regex pattern chooses (0.txt comes first and is no jsonl)."""
    fs = s3server.filesystem()
    put(fs, f"{bucket}/in/0.txt", b"not json\n")
    put(fs, f"{bucket}/in/a.jsonl", jsonl(rows(0, 2)))
    regex = {"pattern": "[.]jsonl$", "pattern.type": "regex"}
    opts = with_options(s3server, bucket, prefix="in/", **regex)
    run(worker, f"CREATE SOURCE CONNECTOR landing FROM s3 INTO events WITH ({opts}, run = 'once')")
    worker.wait_for_once()
    assert worker.catalog.get_stream("events").schema == (
        "`id` BIGINT, `name` STRING, `v` DOUBLE, `__source` STRING"
    )
    assert [r[0] for r in stream_rows(worker, "events")] == [0, 1]
    shown = repr(
        run(
            worker,
            f"DESCRIBE CONNECTOR landing; EXPLAIN CREATE SOURCE CONNECTOR x FROM s3 INTO y WITH ({opts})",
        )
    )
    assert SECRET_KEY not in shown and ACCESS_KEY not in shown
    assert "bucket" in shown


def test_an_empty_prefix_or_a_missing_bucket_is_refused_naming_the_place(worker, s3server, bucket):  # noqa: F811
    opts = with_options(s3server, bucket, prefix="nothing/")
    with pytest.raises(PlanError, match=f"no object under prefix 'nothing/' in bucket {bucket}"):
        run(worker, f"CREATE SOURCE CONNECTOR landing FROM s3 INTO events WITH ({opts})")
    missing = with_options(s3server, "no-such-bucket")
    with pytest.raises(ConnectQLError, match="there is no bucket no-such-bucket at http://"):
        run(worker, f"CREATE SOURCE CONNECTOR landing FROM s3 INTO events WITH ({missing})")
    both = with_options(s3server, bucket, prefix="in/")
    half = both.replace(f", 'secret.key' = '{SECRET_KEY}'", "")
    with pytest.raises(ConnectQLError, match="access.key is given without secret.key: give both"):
        run(worker, f"CREATE SOURCE CONNECTOR landing FROM s3 INTO events WITH ({half})")
    assert not worker.catalog.has_connector("landing")
