"""The s3 connectors after kill -9 of a `connectql run` worker (with its JVM): the source killed
while it reads gzip jsonl objects in batches that end inside objects resumes from the record its
checkpoint reached; the sink killed mid-batch writes each record once after the restart."""

from __future__ import annotations

import gzip
import json

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest

from connectql.catalog.streams import committed_files
from tests.crash import killed_once, resumed_until
from tests.helpers import read_parquet_rows
from tests.s3server import bucket, s3server  # noqa: F401
from tests.test_s3_io import put

pytestmark = pytest.mark.spark

OBJECTS, PER_OBJECT, PER_BATCH = 4, 40_000, 7_000
TOTAL = OBJECTS * PER_OBJECT

SCRIPT = """
CREATE SOURCE CONNECTOR IF NOT EXISTS landing FROM s3 INTO events WITH (
  endpoint = '{endpoint}', region = 'us-east-1', bucket = '{bucket}', prefix = 'in/',
  'access.key' = '{access}', 'secret.key' = '{secret}', format = 'jsonl',
  schema = 'id BIGINT, name STRING, v DOUBLE', 'batch.max.records' = {per_batch},
  'poll.interval.ms' = 200);
"""


def in_stream(stream) -> int:
    got = read_parquet_rows(stream, "SELECT count(*) FROM t")
    return got[0][0] if got else 0


@pytest.mark.scenario
def test_a_killed_worker_resumes_inside_an_object_and_emits_each_record_once(
    tmp_path,
    s3server,  # noqa: F811
    bucket,  # noqa: F811
):
    fs = s3server.filesystem()
    for n in range(OBJECTS):
        lines = (
            json.dumps({"id": i, "name": f"n{i}", "v": i / 8})
            for i in range(n * PER_OBJECT, (n + 1) * PER_OBJECT)
        )
        put(fs, f"{bucket}/in/part-{n}.jsonl.gz", gzip.compress("\n".join(lines).encode()))
    home, logs = tmp_path / "home", tmp_path / "logs"
    logs.mkdir()
    script = tmp_path / "landing.sql"
    opts = s3server.options()
    script.write_text(
        SCRIPT.format(
            endpoint=opts["endpoint"],
            bucket=bucket,
            access=opts["access.key"],
            secret=opts["secret.key"],
            per_batch=PER_BATCH,
        )
    )
    stream = home / "streams/events"

    def some_committed():
        count = in_stream(stream)
        assert count < TOTAL, "the source finished before the kill: make it slower"
        return count >= PER_BATCH

    killed_once(home, script, logs, some_committed)
    at_kill = in_stream(stream)
    assert 0 < at_kill < TOTAL and at_kill % PER_OBJECT != 0  # the kill left an object half read
    resumed_until(home, script, logs, lambda: in_stream(stream) >= TOTAL, f"{TOTAL} records")

    con = duckdb.connect()
    con.execute(f"CREATE VIEW s AS SELECT * FROM read_parquet({committed_files(stream)!r})")
    got = con.execute(
        "SELECT count(*), count(DISTINCT id), min(id), max(id),"
        " count(*) FILTER (WHERE v <> id / 8 OR name <> 'n' || id) FROM s"
    ).fetchone()
    assert got == (TOTAL, TOTAL, 0, TOTAL - 1, 0)
    # __source names each record's object and its number there
    wrong = con.execute(
        "SELECT count(*) FROM s WHERE json_extract_string(__source, '$.key')"
        f" <> 'in/part-' || (id // {PER_OBJECT}) || '.jsonl.gz'"
        f" OR json_extract(__source, '$.record')::BIGINT <> id % {PER_OBJECT}"
    ).fetchone()[0]
    assert wrong == 0


SINK_TOTAL, SINK_BATCH, SINK_OBJECT = 120_000, 20_000, 10_000

SINK_SCRIPT = """
CREATE SOURCE CONNECTOR IF NOT EXISTS gen FROM datagen INTO numbers WITH (
  'rows.total' = {total}, 'rows.per.batch' = {per_batch},
  fields = 'id BIGINT SEQUENCE, v DOUBLE RANDOM(0, 1)');
CREATE SINK CONNECTOR IF NOT EXISTS out TO s3 FROM numbers WITH (
  endpoint = '{endpoint}', region = 'us-east-1', bucket = '{bucket}', 'access.key' = '{access}',
  'secret.key' = '{secret}', 'file.max.records' = {per_object});
"""


def sink_objects(fs, name: str) -> list[str]:
    selector = pafs.FileSelector(f"{name}/numbers", recursive=True, allow_not_found=True)
    return sorted(i.path for i in fs.get_file_info(selector) if i.type == pafs.FileType.File)


def sink_rows(fs, name: str) -> int:
    return sum(
        pq.ParquetFile(fs.open_input_file(p)).metadata.num_rows for p in sink_objects(fs, name)
    )


def test_a_sink_killed_mid_batch_writes_each_record_once_after_a_restart(
    tmp_path,
    s3server,  # noqa: F811
    bucket,  # noqa: F811
):
    fs, opts = s3server.filesystem(), s3server.options()
    home, logs = tmp_path / "home", tmp_path / "logs"
    logs.mkdir()
    script = tmp_path / "out.sql"
    script.write_text(
        SINK_SCRIPT.format(
            total=SINK_TOTAL,
            per_batch=SINK_BATCH,
            per_object=SINK_OBJECT,
            endpoint=opts["endpoint"],
            bucket=bucket,
            access=opts["access.key"],
            secret=opts["secret.key"],
        )  # fmt: skip
    )

    def some_written():
        written = sink_rows(fs, bucket)
        assert written < SINK_TOTAL, "the sink finished before the kill: make it slower"
        return written > 0

    killed_once(home, script, logs, some_written)
    assert 0 < sink_rows(fs, bucket) < SINK_TOTAL
    done = lambda: sink_rows(fs, bucket) >= SINK_TOTAL  # noqa: E731
    resumed_until(home, script, logs, done, f"{SINK_TOTAL} records in objects")
    ids = pa.concat_tables(
        [pq.read_table(fs.open_input_file(p), columns=["id"]) for p in sink_objects(fs, bucket)]
    ).column("id")
    assert len(ids) == SINK_TOTAL
    assert pc.count_distinct(ids).as_py() == SINK_TOTAL
    assert (pc.min(ids).as_py(), pc.max(ids).as_py()) == (0, SINK_TOTAL - 1)
    assert all(
        len(p.rsplit("/", 1)[1]) == len("00000000000000000000.parquet")
        for p in sink_objects(fs, bucket)
    )
