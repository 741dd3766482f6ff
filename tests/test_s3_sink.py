"""The s3 sink against SeaweedFS: every format and compression read back by the source's readers,
object names from the template with start offsets, rolling by record count, a replayed batch
that writes the same names and content, and refusals at CREATE."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

from connectql.config import validate
from connectql.connectors.s3 import records
from connectql.connectors.s3.objects import ObjectFormat
from connectql.connectors.s3.records import Format
from connectql.connectors.s3.sink import S3Sink
from connectql.errors import ConnectQLError, PermanentError
from tests.helpers import replay_last_batch, run, wait_until
from tests.s3server import bucket, s3server  # noqa: F401

pytestmark = pytest.mark.spark

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("v", pa.float64())])
TABLE = pa.Table.from_pylist([{"id": i, "name": f"n{i}", "v": i / 2} for i in range(25)], SCHEMA)


@pytest.mark.parametrize(
    "fmt, compression, suffix",
    [
        ("parquet", "snappy", "parquet"),
        ("parquet", "zstd", "parquet"),
        ("jsonl", "gzip", "jsonl.gz"),
        ("jsonl", "none", "jsonl"),
        ("csv", "zstd", "csv.zst"),
        ("avro", "gzip", "avro"),
    ],
)
def test_each_format_reads_back_as_written(s3server, bucket, fmt, compression, suffix):  # noqa: F811
    fs, written = s3server.filesystem(), ObjectFormat(fmt, compression)
    assert written.ext == suffix
    path = f"{bucket}/o.{written.ext}"
    with fs.open_output_stream(path, compression=None) as out:
        written.write(out, TABLE)
    handle, _ = records.open_object(fs, path, Format(fmt))
    with handle:
        back = [
            r
            for c in records.chunks(handle, Format(fmt), SCHEMA, 0, 100)
            for r in c.batch.to_pylist()
        ]
    assert back == TABLE.to_pylist()


def objects(fs, name: str) -> dict[str, bytes]:
    """Every data object of the bucket (not the sink's own) by key, with its content."""
    selector = pafs.FileSelector(name, recursive=True)
    found = {}
    for info in fs.get_file_info(selector):
        key = info.path[len(name) + 1 :]
        if info.type == pafs.FileType.File and not key.startswith("_connectql/"):
            with fs.open_input_stream(info.path, compression=None) as f:
                found[key] = f.read()
    return found


def ids_by_object(fs, name: str) -> dict[str, list[int]]:
    """The ids of the records in each jsonl data object, by key."""
    found = {}
    for key in sorted(objects(fs, name)):
        handle, _ = records.open_object(fs, f"{name}/{key}", Format("jsonl"))
        with handle:
            chunks = records.chunks(handle, Format("jsonl"), SCHEMA, 0, 1_000_000)
            found[key] = [r["id"] for c in chunks for r in c.batch.to_pylist()]
    return found


def pipeline(server, name: str, **sink) -> str:
    opts = {**server.options(), "bucket": name, **sink}
    given = ", ".join(f"'{k}' = '{v}'" for k, v in opts.items())
    return f"""
    CREATE SOURCE CONNECTOR IF NOT EXISTS gen FROM datagen INTO events WITH ('rows.total' = 25,
      run = 'once', fields = 'id BIGINT SEQUENCE, name STRING RANDOM(4), v DOUBLE RANDOM(0, 1)');
    CREATE SINK CONNECTOR out TO s3 FROM events WITH ({given}, run = 'once');
    """


def test_objects_named_by_template_roll_by_records_and_hold_every_row(
    worker,
    s3server,  # noqa: F811
    bucket,  # noqa: F811
):
    run(worker, pipeline(s3server, bucket, format="jsonl", **{"file.max.records": 10}))
    worker.wait_for_once()
    fs = s3server.filesystem()
    found = ids_by_object(fs, bucket)
    assert list(found) == [f"events/0/{n:020d}.jsonl" for n in (0, 10, 20)]
    assert [i for ids in found.values() for i in ids] == list(range(25))
    assert not [
        i
        for i in fs.get_file_info(pafs.FileSelector(f"{bucket}/_connectql", recursive=True))
        if "/0/" in i.path
    ]


def test_compressed_objects_are_what_other_tools_read(worker, s3server, bucket):  # noqa: F811
    """A .jsonl.gz object is one gzip stream of JSON lines, as `gunzip` after `aws s3 cp` wants
    (pyarrow, left to guess from the suffix, would compress it a second time)."""
    run(worker, pipeline(s3server, bucket, format="jsonl", compression="gzip"))
    worker.wait_for_once()
    found = objects(s3server.filesystem(), bucket)
    assert list(found) == [f"events/0/{0:020d}.jsonl.gz"]
    lines = gzip.decompress(found[f"events/0/{0:020d}.jsonl.gz"]).decode().splitlines()
    assert [json.loads(line)["id"] for line in lines] == list(range(25))


def test_file_flush_interval_rolls_objects_by_time(worker, s3server, bucket):  # noqa: F811
    """file.flush.interval.ms is the sink's trigger: a continuous sink fed 10 records a second
    for 10 s writes several objects over time, each named by the records before it, holding
    every record once; with trigger.interval as well it is refused."""
    opts = {**s3server.options(), "bucket": bucket, "format": "jsonl"}
    given = ", ".join(f"'{k}' = '{v}'" for k, v in opts.items())
    run(
        worker,
        "CREATE SOURCE CONNECTOR gen FROM datagen INTO events WITH ('rows.total' = 100,"
        " 'rows.per.second' = 10, fields = 'id BIGINT SEQUENCE, name STRING RANDOM(4)')",
    )
    sink = f"CREATE SINK CONNECTOR out TO s3 FROM events WITH ({given}"
    plan = run(worker, f"EXPLAIN {sink}, 'file.flush.interval.ms' = 2500)")[0]
    assert dict(plan.rows)["trigger"] == "every 2500 ms"
    with pytest.raises(ConnectQLError, match="file.flush.interval.ms and trigger.interval"):
        run(worker, f"{sink}, 'file.flush.interval.ms' = 2500, 'trigger.interval' = '1 second')")
    with pytest.raises(ConnectQLError, match="file.flush.interval.ms must be at least 1"):
        run(worker, f"{sink}, 'file.flush.interval.ms' = 0)")
    assert not worker.catalog.has_connector("out")
    run(worker, f"{sink}, 'file.flush.interval.ms' = 1000, 'tasks.max' = 1)")
    fs = s3server.filesystem()
    total = lambda: sum(len(ids) for ids in ids_by_object(fs, bucket).values())  # noqa: E731
    wait_until(lambda: total() >= 100, 120, 0.5, "every record in objects")
    found = ids_by_object(fs, bucket)
    assert len(found) > 1, found
    assert sorted(i for ids in found.values() for i in ids) == list(range(100))
    before = 0  # each name's start offset: the records the sink wrote before the object
    for key, ids in sorted(found.items()):
        assert key == f"events/0/{before:020d}.jsonl"
        before += len(ids)


def test_a_replayed_batch_writes_the_same_names_and_content(home, spark, s3server, bucket):  # noqa: F811
    fs = s3server.filesystem()
    seen = {}
    replay_last_batch(
        home,
        pipeline(s3server, bucket, format="parquet", prefix="out/"),
        "out",
        before_replay=lambda: seen.update(objects(fs, bucket)),
    )
    assert list(seen) == [f"out/events/0/{0:020d}.parquet"]
    assert objects(fs, bucket) == seen


def test_a_bad_template_or_compression_is_refused_at_create(worker, s3server, bucket):  # noqa: F811
    with pytest.raises(ConnectQLError, match=r"file.name.template names \{topic\}"):
        run(worker, pipeline(s3server, bucket, **{"file.name.template": "{topic}/{start_offset}"}))
    with pytest.raises(ConnectQLError, match="compression 'snappy' is not available for jsonl"):
        run(worker, pipeline(s3server, bucket, format="jsonl", compression="snappy"))
    assert not worker.catalog.has_connector("out")


def test_a_task_writes_each_object_once_it_is_full_holding_no_more(s3server, bucket):  # noqa: F811
    """With file.max.records, a task's rows arriving batch by batch are staged object by
    object as each fills (the first before the rows after it arrive), cut across batches."""
    given = {**s3server.options(), "bucket": bucket, "format": "jsonl", "file.max.records": 10}
    sink = S3Sink(validate({o.name: o for o in S3Sink.options}, given, "s3 sink"))
    staging = pafs.FileSelector(f"{bucket}/{sink._home('w')}/0", allow_not_found=True)
    seen = []

    def arriving():
        for batch in TABLE.to_batches(max_chunksize=4):  # 4 + 4 + 4 (the first object) + ...
            seen.append(len(sink.fs.get_file_info(staging)))
            yield batch

    staged = sink.stage_batches("w", 0, 0, pa.RecordBatchReader.from_batches(SCHEMA, arriving()))
    assert seen == [0, 0, 0, 1, 1, 2, 2]  # objects staged before each batch came
    assert [records for _task, _key, records in staged] == [10, 10, 5]
    rows = [
        json.loads(line)["id"]
        for _task, key, _n in staged
        for line in sink.fs.open_input_stream(f"{bucket}/{key}").read().decode().splitlines()
    ]
    assert rows == list(range(25))


def test_an_object_bigger_than_s3_copies_in_one_request_is_refused(s3server, bucket):  # noqa: F811
    """The commit copies each staged object once, server-side, and S3 copies at most 5 GiB in
    one request: staging a bigger object fails naming file.max.records (a 300-byte limit stands
    in for 5 GiB)."""
    given = {**s3server.options(), "bucket": bucket, "format": "jsonl"}
    sink = S3Sink(validate({o.name: o for o in S3Sink.options}, given, "s3 sink"))
    sink.COPY_LIMIT = 300
    with pytest.raises(PermanentError, match=r"an object of 25 records is \d+ bytes, more than"):
        sink.stage("w", 0, 0, TABLE)
    with pytest.raises(PermanentError, match="set file.max.records lower, e.g. [1-9]"):
        sink.stage("w", 0, 0, TABLE)
    staged = sink.stage("w", 1, 0, TABLE.slice(0, 2))
    assert [(task, records) for task, _key, records in staged] == [(0, 2)]


def test_a_sink_of_several_streams_puts_each_streams_objects_under_its_own_name(
    worker,
    s3server,  # noqa: F811
    bucket,  # noqa: F811
):
    """streams = 'sm_*': one s3 sink writes each stream's records once, under the {stream}
    of its object names, the streams there at CREATE and one created after the sink started;
    a template without {stream} would write them alike and is refused, naming the option."""

    def source(stream: str, first: int, total: int) -> str:
        return (
            f"CREATE SOURCE CONNECTOR {stream}_gen FROM datagen INTO {stream} WITH (run = 'once',"
            f" 'rows.total' = {total}, fields = 'id BIGINT SEQUENCE({first})');"
        )

    opts = {**s3server.options(), "bucket": bucket, "format": "jsonl", "prefix": "out/"}
    given = ", ".join(f"'{k}' = '{v}'" for k, v in opts.items())
    run(worker, source("sm_a", 100, 5) + source("sm_b", 200, 4))
    sink = f"CREATE SINK CONNECTOR out TO s3 WITH ({given}, streams = 'sm_*'"
    alike = "'file.name.template' = '{partition}/{start_offset}.{ext}'"
    with pytest.raises(
        ConnectQLError,
        match=r"streams sm_a and sm_b would be written alike: give file.name.template a"
        r" \{stream\} so that each stream has its own",
    ):
        run(worker, f"{sink}, {alike})")
    assert not worker.catalog.has_connector("out")
    run(worker, f"{sink})")
    fs = s3server.filesystem()

    def ids() -> dict[str, list[int]]:  # each data object's ids, gathered by its first part
        found: dict[str, list[int]] = {}
        for key, body in sorted(objects(fs, bucket).items()):
            lines = body.decode().splitlines()
            found.setdefault(key.split("/")[1], []).extend(json.loads(x)["id"] for x in lines)
        return found

    want = {"sm_a": list(range(100, 105)), "sm_b": list(range(200, 204))}
    wait_until(lambda: ids() == want, 60, 0.5, "sm_a and sm_b under their names", ids)
    run(worker, source("sm_c", 300, 3))  # created after the sink started: it joins
    want["sm_c"] = list(range(300, 303))
    wait_until(lambda: ids() == want, 60, 0.5, "sm_c, created later, under its name", ids)
    assert all(k.startswith("out/sm_") for k in objects(fs, bucket)), list(objects(fs, bucket))
    assert worker.catalog.get_connector("out").streams == ["sm_a", "sm_b", "sm_c"]
    events = run(worker, "SELECT reason FROM connector_events WHERE connector = 'out'")[0].rows
    assert ("follows stream sm_c, created later",) in events, events
    assert ids() == want  # still each record once
