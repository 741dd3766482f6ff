"""The s3 source through a real worker and SeaweedFS: records of every object exactly once in key
order with `__source`, batches that end inside an object, objects added while running, replaced
objects read again, bad records as dead letters or a failure naming object and line, and a
schema inferred at CREATE."""

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
    fs = s3server.filesystem()
    put(fs, f"{bucket}/in/a.jsonl", jsonl(rows(0, 2)))
    opts = with_options(s3server, bucket, prefix="in/")
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
    assert not worker.catalog.has_connector("landing")
