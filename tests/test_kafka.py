"""The kafka connector against a private Tansu broker (a Kafka-protocol broker; memory storage):
the source reads every record of a topic's partitions once across stops and a replayed batch,
with the message columns, and picks up a partition-topic created later by a pattern; the sink
writes each row once across a replayed batch (a transaction per task and batch, the batch id
committed in it) or again with at-least-once; SQL through a worker (kafka -> stream -> kafka,
dead letters, a topic that does not exist, a broker that does not answer).

Tansu does not filter aborted transactions for read_committed readers, so what is proven here
is the protocol's use and that nothing is lost or written twice by a replay, not a reader's
view of an aborted transaction."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter

import psycopg
import pyarrow as pa
import pytest

from connectql.connectors.kafka.sink import KafkaSink
from connectql.connectors.kafka.source import KafkaSource
from connectql.errors import ConnectQLError
from connectql.toolkit.testing import SinkRun, SourceRun
from tests.crash import killed_once, resumed_until
from tests.helpers import read_parquet_rows, run, wait_until
from tests.kafkaserver import Tansu
from tests.pgserver import create_database, pg_sql
from tests.servers import free_port

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def broker():
    server = Tansu().start()
    yield server
    server.stop()


def produce_json(broker, topic, ids, partition=None):
    broker.produce(
        topic,
        [(f"k{i}", json.dumps({"id": i, "name": f"n{i}"}), [("origin", topic)]) for i in ids],
        partition,
    )


def test_a_source_reads_each_record_once_across_stops_and_a_replay(spark, broker, tmp_path):
    broker.create("src1", 3)
    for part in range(3):
        produce_json(broker, "src1", range(part * 1000, part * 1000 + 700), part)
    options = {
        "bootstrap.servers": broker.servers,
        "topic": "src1",
        "schema": "id BIGINT, name STRING",
    }
    run = SourceRun(KafkaSource, options, tmp_path, max_records=500)
    run.batches(2)
    for part in range(3):
        produce_json(broker, "src1", range(part * 1000 + 700, part * 1000 + 900), part)
    run.to_end()
    run.replay_last_batch()
    rows = run.rows()
    expected = [i for p in range(3) for i in range(p * 1000, p * 1000 + 900)]
    assert Counter(r["id"] for r in rows) == Counter(expected)  # each once
    first = min((r for r in rows if r["__partition"] == 1), key=lambda r: int(r["__position"]))
    assert (first["id"], first["__key"], first["__topic"], first["__position"]) == (
        1000,
        "k1000",
        "src1",
        "0",
    )
    assert dict(first["__headers"]) == {"origin": "src1"} and first["__timestamp"] is not None


def test_a_pattern_source_picks_up_a_topic_created_while_running(spark, broker, tmp_path):
    broker.create("pat.a")
    broker.produce("pat.a", [(None, f"a{i}", None) for i in range(50)])
    options = {"bootstrap.servers": broker.servers, "topic.pattern": r"pat\..*", "format": "text"}
    run = SourceRun(KafkaSource, options, tmp_path)
    run.to_end()
    broker.create("pat.b", 2)
    broker.produce("pat.b", [(None, f"b{i}", None) for i in range(30)])
    broker.create("other")
    broker.produce("other", [(None, "x", None)])
    run.to_end()
    assert sorted(r["value"] for r in run.rows()) == sorted(
        [f"a{i}" for i in range(50)] + [f"b{i}" for i in range(30)]
    )


def test_a_source_starting_at_latest_reads_only_later_records(spark, broker, tmp_path):
    broker.create("late")
    broker.produce("late", [(None, b"\xff\x00old", None)])
    options = {"bootstrap.servers": broker.servers, "topic": "late", "format": "bytes",
               "starting.offsets": "latest"}  # fmt: skip
    run = SourceRun(KafkaSource, options, tmp_path)
    run.to_end()
    broker.produce("late", [(b"\xff", b"\xff\x00new", None)])
    run.to_end()
    rows = run.rows()
    assert [(r["value"], r["__key"]) for r in rows] == [(b"\xff\x00new", "base64:/w==")]


@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
def test_the_sink_writes_each_row_once_across_a_replay(spark, broker, tmp_path, delivery):
    topic = f"out-{delivery}"
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("name", pa.string()),
            ("__headers", pa.map_(pa.string(), pa.string())),
        ]
    )
    options = {"bootstrap.servers": broker.servers, "topic": topic, "auto.create": "true",
               "topic.partitions": "2", "key": "id", "delivery": delivery}  # fmt: skip
    run = SinkRun(KafkaSink, options, tmp_path, schema)
    for start in (0, 100, 200):
        run.add(
            [
                {"id": i, "name": f"n{i}", "__headers": [("h", str(i))]}
                for i in range(start, start + 100)
            ]
        )
    run.batches(1)
    run.to_end()
    replayed = run.replay_last_batch()
    got = broker.records(topic)
    ids = Counter(json.loads(m.value())["id"] for m in got)
    if delivery == "exactly-once":
        assert ids == Counter(range(300))  # the replayed batch's tasks found their batch id
    else:  # the replayed batch is written again
        assert set(ids) == set(range(300)) and sum(ids.values()) > 300, replayed
    five = next(m for m in got if json.loads(m.value())["id"] == 5)
    assert five.key() == b'{"id": 5}' and five.headers() == [("h", b"5")]
    assert json.loads(five.value()) == {"id": 5, "name": "n5"}


def test_kafka_to_kafka_through_sql_with_dead_letters(worker, broker):
    broker.create("sqlin", 2)
    produce_json(broker, "sqlin", range(5), 0)
    broker.produce("sqlin", [(None, b"not json", None)], 1)
    produce_json(broker, "sqlin", range(5, 8), 1)
    servers = broker.servers
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR kin FROM kafka INTO kmsgs WITH ('bootstrap.servers' = '{servers}',
          topic = 'sqlin', 'errors.tolerance' = 'all', 'errors.deadletter.stream' = 'kmsgs_dead',
          'poll.interval.ms' = 50);
        CREATE SINK CONNECTOR kout TO kafka FROM kmsgs WITH ('bootstrap.servers' = '{servers}',
          topic = 'sqlcopy', 'auto.create' = true);
        """,
    )
    wait_until(lambda: len(broker.records("sqlcopy", 0.3)) >= 8, 120, what="the copies")
    copies = broker.records("sqlcopy")
    assert sorted(json.loads(m.value())["id"] for m in copies) == list(range(8))
    assert {m.key() for m in copies} >= {b"k0", b"k7"}  # the source's keys travel as keys
    letters = wait_until(
        lambda: read_parquet_rows(
            worker.home / "streams/kmsgs_dead", "SELECT raw_record, source_offset FROM t"
        ),
        30,
        what="the dead letter",
    )
    assert letters[0][0] == "not json" and json.loads(letters[0][1])["partition"] == 1
    with pytest.raises(ConnectQLError, match="no topic 'nowhere' on 127.0.0.1"):
        run(
            worker,
            f"CREATE SOURCE CONNECTOR x FROM kafka INTO y WITH ('bootstrap.servers' = '{servers}', topic = 'nowhere')",
        )
    with pytest.raises(ConnectQLError, match="no topic 'nowhere' on .*auto.create"):
        run(
            worker,
            f"CREATE SINK CONNECTOR x TO kafka FROM kmsgs WITH ('bootstrap.servers' = '{servers}', topic = 'nowhere')",
        )
    away = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(ConnectQLError, match=f"kafka source: cannot reach {away}"):
        run(
            worker,
            f"CREATE SOURCE CONNECTOR x FROM kafka INTO y WITH ('bootstrap.servers' = '{away}', topic = 't')",
        )
    print(f"refused an unreachable broker in {time.monotonic() - started:.1f} s")
    assert sorted(c.name for c in worker.catalog.connectors()) == ["kin", "kout"]


def test_a_sink_routes_rows_by_a_column_with_its_batches_marked_in_a_topic_of_their_own(
    spark, broker, tmp_path
):
    schema = pa.schema([("id", pa.int64()), ("dest", pa.string())])
    options = {"bootstrap.servers": broker.servers, "topic.column": "dest", "auto.create": "true",
               "marker.topic": "route-marks", "key": "", "format": "json"}  # fmt: skip
    broker.create("route-a")
    broker.create("route-b")
    run = SinkRun(KafkaSink, options, tmp_path, schema)
    run.add([{"id": i, "dest": f"route-{'ab'[i % 2]}"} for i in range(40)])
    run.add([{"id": i, "dest": f"route-{'ab'[i % 2]}"} for i in range(40, 60)])
    run.to_end()
    run.replay_last_batch()
    for name, parity in (("route-a", 0), ("route-b", 1)):
        got = [json.loads(m.value())["id"] for m in broker.records(name)]
        assert sorted(got) == [i for i in range(60) if i % 2 == parity]  # each once
    assert "route-marks" in broker.topics()  # auto.create made the marker topic
    assert {m.key() for m in broker.records("route-a")} == {None}  # key = '': no key


def test_a_source_commits_its_positions_to_a_consumer_group_when_asked(spark, broker, tmp_path):
    broker.create("grp", 2)
    for part in range(2):
        produce_json(broker, "grp", range(part * 100, part * 100 + 60), part)
    options = {"bootstrap.servers": broker.servers, "topic": "grp", "schema": "id BIGINT",
               "commit.offsets": "true", "group.id": "connectql-test-group"}  # fmt: skip
    run = SourceRun(KafkaSource, options, tmp_path)
    run.to_end()
    assert len(run.rows()) == 120
    assert broker.committed("connectql-test-group", "grp", 2) == [60, 60]


def test_kafka_settings_reach_the_client(spark, broker, tmp_path):
    """A kafka.* option is the client's own setting: a message larger than
    kafka.message.max.bytes is refused by the producer, and the error names the broker."""
    schema = pa.schema([("value", pa.string())])
    options = {"bootstrap.servers": broker.servers, "topic": "big", "auto.create": "true",
               "format": "text", "kafka.message.max.bytes": "2000",
               "topic.replication": "1"}  # fmt: skip
    run = SinkRun(KafkaSink, options, tmp_path, schema)
    run.add([{"value": "x" * 5000}])
    with pytest.raises(Exception, match=f"kafka sink: {broker.servers}: .*(too large|size)"):
        run.to_end()


KILL_TOTAL = 40_000
KILL_SCRIPT = """
CREATE SOURCE CONNECTOR IF NOT EXISTS kin FROM kafka INTO kmsgs WITH (
  'bootstrap.servers' = '{servers}', topic = 'killed', schema = 'id BIGINT, name STRING',
  'batch.max.records' = 2000);
CREATE SINK CONNECTOR IF NOT EXISTS kpg TO postgres FROM kmsgs WITH ({conn},
  table = 'copied');
"""


def test_kafka_to_postgres_in_a_killed_worker_delivers_every_record_once(
    tmp_path, broker, pg_shared
):
    """A topic of 3 partitions -> stream -> PostgreSQL, the `connectql run` worker killed with
    SIGKILL mid-copy and started again: every record once in the table."""
    broker.create("killed", 3)
    for part in range(3):
        produce_json(broker, "killed", range(part, KILL_TOTAL, 3), part)
    name = f"cq_{uuid.uuid4().hex[:8]}"
    info = create_database(pg_shared.conninfo(), name)
    s = pg_shared
    conn = f"host = '{s.host}', port = {s.port}, user = '{s.user}', database = '{name}'"
    home, logs = tmp_path / "home", tmp_path / "logs"
    logs.mkdir()
    script = tmp_path / "copy.sql"
    script.write_text(KILL_SCRIPT.format(servers=broker.servers, conn=conn))

    def copied() -> int:
        try:
            return pg_sql(info, "SELECT count(*) FROM copied")[0][0]
        except psycopg.errors.UndefinedTable:
            return 0

    def some_copied():
        n = copied()
        assert n < KILL_TOTAL, "the copy finished before the kill: make it bigger"
        return n >= 4000

    try:
        killed_once(home, script, logs, some_copied)
        resumed_until(home, script, logs, lambda: copied() >= KILL_TOTAL, "every record")
        assert pg_sql(info, "SELECT count(*), count(DISTINCT id), sum(id) FROM copied") == [
            (KILL_TOTAL, KILL_TOTAL, KILL_TOTAL * (KILL_TOTAL - 1) // 2)
        ]
        # the message columns came too: the headers map as jsonb, the key and partition
        row = pg_sql(info, "SELECT __headers, pg_typeof(__headers)::text, __key, __partition"
                           " FROM copied WHERE id = 4")  # fmt: skip
        assert row == [({"origin": "killed"}, "jsonb", "k4", 1)]
    finally:
        pg_sql(pg_shared.conninfo(), f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
