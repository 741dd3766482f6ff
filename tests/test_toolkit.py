"""The toolkit's Spark adapter: a toolkit source and sink through a real SparkSession, stopped
part way and resumed from the checkpoint, with a replayed batch."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from pyspark.sql.types import StructType

from connectql.errors import ConnectQLError, PermanentError
from connectql.runtime.engine import field_lag, lag
from connectql.runtime.riders import TOOLKIT, make_rider
from connectql.toolkit.spark import STREAM_KEY_KEY, Pacer, StreamWriter, spark_options
from connectql.toolkit.testing import SinkRun, SourceRun, StreamsSinkRun
from tests.toolkit_connectors import (
    Chunked,
    Counter,
    JsonDir,
    Opened,
    Picky,
    Shelf,
    Shelves,
    Sloppy,
    StagedPicky,
    Streaming,
    written,
)

pytestmark = pytest.mark.spark


def test_a_source_stopped_part_way_resumes_from_its_checkpoint_and_a_replay_adds_nothing(
    spark, tmp_path
):
    run = SourceRun(Counter, {"count": 50, "tasks.max": 2}, tmp_path, max_records=10)
    run.batches(2)
    first = run.rows()
    assert 20 <= len(first) < 50  # the read limit cut the records into batches of 10
    run.to_end()
    run.replay_last_batch()
    rows = run.rows()
    assert sorted(r["id"] for r in rows) == list(range(50))
    assert {r["text"] for r in rows} >= {"record 0", "record 49"}


def test_a_source_of_several_tables_resumes_and_replays_each_tables_rows_once(spark, tmp_path):
    run = SourceRun(Shelves, {"count": 30, "tasks.max": 2}, tmp_path, max_records=10)
    run.batches(1)
    assert 0 < len(run.rows("books")) < 15  # ids 0..9 at most: the read limit
    run.to_end()
    run.replay_last_batch()
    books, pens = run.rows("books"), run.rows("pens")
    assert sorted(r["id"] for r in books) == list(range(0, 30, 2))
    assert sorted((r["id"], r["color"]) for r in pens) == [(i, f"c{i}") for i in range(1, 30, 2)]
    assert run.rows("cups") == []


def test_a_retryable_error_is_retried_and_a_bad_record_fails_naming_its_offset(spark, tmp_path):
    flaky = tmp_path / "flaky"
    flaky.touch()
    run = SourceRun(Counter, {"count": 5, "flaky": str(flaky)}, tmp_path / "a")
    run.to_end()
    assert not flaky.exists()  # the first read raised Retryable; the retry read everything
    assert sorted(r["id"] for r in run.rows()) == list(range(5))
    bad = SourceRun(Counter, {"count": 5, "bad": 3}, tmp_path / "b")
    with pytest.raises(
        AssertionError, match=r'a record at \{"n": 2\} does not parse: not a number'
    ):
        bad.to_end()


def test_a_source_that_plans_its_batches_reads_chunk_by_chunk_to_the_end(spark, tmp_path):
    """plans_batches: each latest_offset is where the next batch ends; a run-once query goes
    on until the source says no batch is due (not the first batch's end)."""
    run = SourceRun(Chunked, {"count": 25, "chunk": 10, "tasks.max": 2}, tmp_path)
    run.to_end()
    assert sorted(r["id"] for r in run.rows()) == list(range(25))
    assert run._committed() == 3  # 10 + 10 + 5
    run.to_end()
    assert run._committed() == 3 and len(run.rows()) == 25  # nothing due: no batch


def test_a_sink_writes_each_batch_once_across_a_stop_and_a_replayed_batch(spark, tmp_path):
    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    out = tmp_path / "out"
    run = SinkRun(JsonDir, {"path": str(out)}, tmp_path, schema)
    for start in (0, 3, 6):
        run.add([{"id": i, "text": f"r{i}"} for i in range(start, start + 3)])
    run.batches(1)
    assert len(written(out)) == 3  # one input file per batch
    run.to_end()
    assert run.replay_last_batch() >= 1  # files 1 and 2 arrive in one or two batches
    assert sorted(r["id"] for r in written(out)) == list(range(9))


@pytest.mark.parametrize("sink", [Picky, StagedPicky], ids=["write", "staged commit"])
def test_rows_a_sink_rejects_are_dead_letters_once_across_a_replayed_batch(spark, tmp_path, sink):
    """Rows a sink's write rejects, or a staged sink's commit (named by its own keys, with
    their values), go to the dead-letter stream once, across a failed and a replayed batch."""
    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    out = tmp_path / "out"
    crash = tmp_path / "crash"
    options = {"path": str(out), "crash": str(crash)}
    run = SinkRun(sink, options, tmp_path, schema, dead_letters=True)
    run.add([{"id": i, "text": f"r{i}"} for i in range(12)])  # 9: one round
    run.to_end()
    run.add([{"id": i, "text": f"r{i}"} for i in (29, 30, 39, 49)])  # three rounds
    crash.touch()  # ... after which the write fails: the batch is run again
    with pytest.raises(AssertionError, match="the target went away"):
        run.to_end()
    run.to_end()
    assert run.replay_last_batch() >= 0
    assert sorted(r["id"] for r in written(out)) == [*range(9), 10, 11, 30]
    dead = sorted((json.loads(r["raw_record"])["id"], r["error_class"]) for r in run.dead_letters())
    assert dead == [(9, "ValueError"), (29, "ValueError"), (39, "ValueError"), (49, "ValueError")]


def test_a_sink_whose_rejected_names_a_row_it_was_not_given_fails_the_batch(spark, tmp_path):
    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    run = SinkRun(Sloppy, {"path": str(tmp_path / "out")}, tmp_path, schema, dead_letters=True)
    run.add([{"id": i, "text": f"r{i}"} for i in range(3)])
    with pytest.raises(
        AssertionError,
        match=r"Rejected names row 3, not a row of the data it was given \(rows 0 to 2\)",
    ):
        run.to_end()
    assert run.dead_letters() == []


def test_a_sink_may_take_a_tasks_rows_batch_by_batch_as_they_arrive(spark, tmp_path):
    """stage_batches gets the rows as Spark sends them, in Arrow batches of at most
    spark.sql.execution.arrow.maxRecordsPerBatch rows, not gathered into one table."""
    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    out = tmp_path / "out"
    run = SinkRun(Streaming, {"path": str(out)}, tmp_path, schema)
    run.add([{"id": i, "text": f"r{i}"} for i in range(25_000)])
    run.to_end()
    sizes = json.loads((out / "sizes.txt").read_text())
    assert sum(map(sum, sizes)) == 25_000 and max(map(len, sizes)) >= 3, sizes
    limit = int(spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch"))
    assert max(n for task in sizes for n in task) <= limit
    assert sorted(r["id"] for r in written(out)) == list(range(25_000))


def test_a_staged_commit_whose_rejected_lacks_the_rows_fails_the_batch(spark, tmp_path):
    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    options = {"path": str(tmp_path / "out"), "sloppy": True}
    run = SinkRun(StagedPicky, options, tmp_path, schema, dead_letters=True)
    run.add([{"id": i, "text": f"r{i}"} for i in range(12)])
    with pytest.raises(
        AssertionError, match=r"commit's Rejected names \(0, 9\) without its row in records"
    ):
        run.to_end()
    assert run.dead_letters() == [] and written(tmp_path / "out") == []


def test_a_staged_commit_that_rejects_without_a_dead_letter_stream_names_the_row(spark, tmp_path):
    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    run = SinkRun(StagedPicky, {"path": str(tmp_path / "out")}, tmp_path, schema)
    run.add([{"id": i, "text": f"r{i}"} for i in range(12)])
    with pytest.raises(
        AssertionError, match=r"the target rejects row \{'id': 9, 'text': 'r9'\}: .*no nines"
    ):
        run.to_end()
    assert written(tmp_path / "out") == []


def test_a_sink_is_told_the_lease_epoch_of_its_worker():
    schema = StructType.fromDDL("id BIGINT, text STRING")
    told = StreamWriter(JsonDir({"path": "x"}), schema, {"connectql.epoch": "3"})
    assert told.sink.epoch == 3
    assert StreamWriter(JsonDir({"path": "x"}), schema, {}).sink.epoch is None


def test_a_sink_is_opened_with_its_writer_epoch_name_and_the_types_its_source_declared(tmp_path):
    schema = StructType.fromDDL("""id BIGINT COMMENT '{"postgres": "int8"}', text STRING""")
    opened = tmp_path / "opened"
    ids = {"connectql.writer": "w1", "connectql.connector": "out", "connectql.epoch": "2"}
    ids[STREAM_KEY_KEY] = '["id"]'
    StreamWriter(Opened({"path": "x", "opened": str(opened)}), schema, ids)
    seen = [json.loads(line) for line in opened.read_text().splitlines()]
    assert seen == [["w1", 2, "out", ["id"], {"id": '{"postgres": "int8"}', "text": ""}]]


def test_a_sink_is_opened_each_time_its_query_starts(spark, tmp_path):
    schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
    opened = tmp_path / "opened"
    run = SinkRun(Opened, {"path": str(tmp_path / "out"), "opened": str(opened)}, tmp_path, schema)
    for start in (0, 3):
        run.add([{"id": i, "text": f"r{i}"} for i in range(start, start + 3)])
    run.batches(1)
    first = len(opened.read_text().splitlines())
    assert first >= 1  # Spark may make the writer more than once per start (open is idempotent)
    run.to_end()  # the query starts again from its checkpoint
    assert len(opened.read_text().splitlines()) > first
    assert sorted(r["id"] for r in written(tmp_path / "out")) == list(range(6))


def test_a_sink_of_several_streams_writes_each_once_across_a_replay(spark, tmp_path):
    """StreamsSinkRun: a sink per stream (its ${stream} filled in, its key, its writer id),
    each round wrapped by together(); the last batch replayed writes nothing twice."""
    out, opened, rounds = tmp_path / "out", tmp_path / "opened", tmp_path / "rounds"
    schemas = {
        "a": pa.schema([("id", pa.int64()), ("text", pa.string())]),
        "b": pa.schema([("k", pa.int64())]),
    }
    options = {"path": f"{out}/${{stream}}", "opened": str(opened), "rounds": str(rounds)}
    run = StreamsSinkRun(Shelf, options, tmp_path, schemas, keys={"a": ("id",)})
    run.add("a", [{"id": i, "text": f"a{i}"} for i in range(3)])
    run.add("b", [{"k": i} for i in range(2)])
    run.add("a", [{"id": i, "text": f"a{i}"} for i in range(3, 5)])
    run.batches(1)
    run.to_end()
    # A batch cut short by batches()'s stop may be folded into the next one when the query
    # resumes (Spark's file source has already noted its files), so 1 or 2 batches follow it.
    assert run.replay_last_batch() in (1, 2)
    assert sorted(r["id"] for r in written(out / "a")) == list(range(5))
    assert sorted(r["k"] for r in written(out / "b")) == [0, 1]
    seen = [json.loads(line) for line in opened.read_text().splitlines()]
    writers = {tuple(key): writer for writer, _epoch, _name, key, _notes in seen}
    assert writers.keys() == {("id",), ()} and len(set(writers.values())) == 2
    assert {n for n, _pid in map(json.loads, rounds.read_text().splitlines())} == {2}
    with pytest.raises(TypeError, match="writes one stream"):
        StreamsSinkRun(JsonDir, {"path": str(out)}, tmp_path / "x", schemas)


def test_a_toolkit_sink_riding_a_source_writes_a_replayed_ride_once(spark, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    options = {**spark_options(JsonDir, {"path": str(out)}, set()), "connectql.writer": "r1"}
    rider = make_rider(TOOLKIT, options, StructType.fromDDL("id BIGINT, text STRING"))
    rider.open("sink connector 'o'")
    assert rider.committed() == -1
    rows = pa.record_batch({"id": [1, 2], "text": ["a", "b"]})
    staged = [rider.write(3, task, iter([rows])) for task in (0, 1)]  # two tasks' rows
    assert [m.rows for m in staged] == [2, 2]
    rider.commit(staged, 3)
    rider.commit(staged, 3)  # the ride again, after a crash before its end was noted
    assert rider.committed() == 3
    assert sorted(r["id"] for r in written(out)) == [1, 1, 2, 2]


def test_a_pace_needs_the_offset_key_that_counts_records():
    class Unpaceable(Counter):
        lag_field = None

        def records_per_second(self):
            return 10.0

    with pytest.raises(PermanentError, match=r"records_per_second\(\) needs lag_field"):
        Pacer.of(Unpaceable({"count": 5}))
    paced = Pacer.of(type("Paced", (Unpaceable,), {"lag_field": "n"})({"count": 5}))
    now = [0.0]
    paced.clock = lambda: now[0]
    assert paced.allowed({"n": 3}) == 0
    now[0] = 0.45
    assert paced.allowed({"n": 3}) == 4 and paced.allowed({"n": 5}) == 2


def test_lag_bytes_is_latest_minus_end_of_its_key_whatever_lag_the_source_reports():
    end, latest = '{"done": 1, "bytes": 300}', '{"done": 3, "bytes": 1000, "lag": 7}'
    assert (lag(end, latest, "done"), field_lag(end, latest, "bytes")) == (7, 700)
    assert lag(end, '{"done": 3, "bytes": 1000}', "done") == 2
    assert field_lag(end, latest, None) is None and field_lag(None, latest, "bytes") is None
    assert field_lag(end, '{"done": 3}', "bytes") is None  # a key the offset lacks


def test_options_of_gives_a_hand_made_source_its_options_as_connectql_would():
    from connectql.toolkit.testing import options_of
    from tests.toolkit_connectors import Counter

    opts = options_of(Counter, {"count": "3"})
    assert opts["count"] == 3 and opts["bad"] == 0 and opts["tasks.max"] == 1
    assert Counter(opts).options["count"] == 3
    with pytest.raises(ConnectQLError, match="did you mean 'count'"):
        options_of(Counter, {"cuont": 3})


def acks(path) -> list[int]:
    return [int(n) for n in path.read_text().split()] if path.exists() else []


def test_commit_acknowledges_every_batch_once_including_the_last_and_at_a_stop(tmp_path):
    """Spark commits a batch only when it plans the next; the toolkit also commits the batch
    that ended where Spark next asks from, and at a stop the last one in the commit log: so
    the ack floor reaches the last record, each end acknowledged once."""
    from tests.toolkit_connectors import Acking

    ack = tmp_path / "acks"
    run = SourceRun(Acking, {"count": 10, "acks": str(ack)}, tmp_path / "a", max_records=4)
    run.batches(1)  # stopped after one batch: its end acknowledged at the stop
    assert acks(ack) == [4]
    run.to_end()  # the rest, the last batch too, each end once
    assert acks(ack) == [4, 8, 10]
    assert sorted(r["id"] for r in run.rows()) == list(range(10))


def test_a_commit_that_fails_is_retried_later_and_does_not_fail_the_data_path(tmp_path):
    from tests.toolkit_connectors import Acking

    ack, refuse = tmp_path / "acks", tmp_path / "refuse"
    refuse.write_text("")
    opts = {"count": 10, "acks": str(ack), "refuse": str(refuse)}
    run = SourceRun(Acking, opts, tmp_path / "a", max_records=4)
    run.to_end()  # every commit raises: the rows arrive all the same
    assert sorted(r["id"] for r in run.rows()) == list(range(10)) and acks(ack) == []
    refuse.unlink()
    run.to_end()  # the next run acknowledges where the last one ended
    assert acks(ack) == [10]
