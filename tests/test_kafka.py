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

import base64
import io
import json
import time
import uuid
from collections import Counter
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal

import fastavro
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
          'poll.interval.ms' = 50, key = 'id');
        CREATE SINK CONNECTOR kout TO kafka FROM kmsgs WITH ('bootstrap.servers' = '{servers}',
          topic = 'sqlcopy', 'auto.create' = true);
        """,
    )
    wait_until(lambda: len(broker.records("sqlcopy", 0.3)) >= 8, 120, what="the copies")
    copies = broker.records("sqlcopy")
    assert sorted(json.loads(m.value())["id"] for m in copies) == list(range(8))
    assert {m.key() for m in copies} >= {b"k0", b"k7"}  # the source's keys travel as keys
    assert dict(run(worker, "DESCRIBE STREAM kmsgs")[0].rows)["key"] == "id"  # key = 'id'
    shown = wait_until(  # each partition's position, as of the last batch
        lambda: dict(run(worker, "DESCRIBE CONNECTOR kin")[0].rows).get("position sqlin:1"), 30
    )
    assert shown == "4 (latest 4)", shown  # the bad record and 3 good ones
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


KILL_TOTAL = 20_000
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


def envelope(op, before=None, after=None, ts=1_700_000_000_000):
    """A Debezium change event of table shop.items with Kafka Connect's schema envelope."""
    row = {"type": "struct", "optional": True, "fields": [
        {"field": "id", "type": "int32", "optional": False},
        {"field": "name", "type": "string", "optional": True},
        {"field": "price", "type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
         "parameters": {"scale": "2", "connect.decimal.precision": "10"}},
        {"field": "made", "type": "int64", "optional": True, "name": "io.debezium.time.MicroTimestamp"},
        {"field": "day", "type": "int32", "optional": True, "name": "io.debezium.time.Date"},
    ]}  # fmt: skip
    schema = {"type": "struct", "fields": [{**row, "field": "before"}, {**row, "field": "after"},
              {"field": "source", "type": "struct", "fields": []},
              {"field": "op", "type": "string"}, {"field": "ts_ms", "type": "int64"}]}  # fmt: skip
    payload = {"before": before, "after": after, "source": {"db": "shop", "table": "items"},
               "op": op, "ts_ms": ts}  # fmt: skip
    return json.dumps({"schema": schema, "payload": payload})


def item(i, name, cents):
    """A row image as Debezium writes it: the decimal's unscaled bytes in base64, the time in
    microseconds, the date in days."""
    raw = cents.to_bytes(8, "big", signed=True).lstrip(b"\x00") or b"\x00"
    return {"id": i, "name": name, "price": base64.b64encode(raw).decode(),
            "made": 1_700_000_000_123_456 + i, "day": 19_700 + i}  # fmt: skip


def test_debezium_change_events_are_applied_to_a_postgres_table(worker, broker, pg_shared):
    """Debezium's JSON change events (with the schema envelope, and without it) read with
    format = 'debezium' and upserted into PostgreSQL: the table ends as the source would be;
    a tombstone is no change; an event of another op is a dead letter."""
    key = lambda i: json.dumps({"id": i})  # noqa: E731
    plain = lambda op, before, after: json.dumps(  # noqa: E731  (no envelope)
        {"before": before, "after": after, "op": op, "ts_ms": 1, "source": {}}
    )
    broker.create("dbz", 2)
    events = [
        (key(1), envelope("r", after=item(1, "one", 150))),
        (key(2), envelope("c", after=item(2, "two", 250))),
        (key(3), envelope("c", after=item(3, "three", -5))),
        (key(2), envelope("u", before=item(2, "two", 250), after=item(2, "TWO", 999))),
        (key(3), envelope("d", before=item(3, "three", -5))),
        (key(3), None),  # the tombstone after a delete
        (
            key(4),
            plain(
                "c",
                None,
                {
                    "id": 4,
                    "name": "four",
                    "price": "4.25",
                    "made": "2024-01-02T03:04:05.5Z",
                    "day": "2024-02-29",
                },
            ),
        ),  # fmt: skip
        (key(1), plain("d", None, None)),  # a delete whose before image is only in its key
        (key(9), json.dumps({"op": "t", "source": {}})),  # a truncate: not a change to apply
    ]
    broker.produce("dbz", [(k, v, None) for k, v in events], 0)
    name = f"cq_{uuid.uuid4().hex[:8]}"
    info = create_database(pg_shared.conninfo(), name)
    s = pg_shared
    conn = f"host = '{s.host}', port = {s.port}, user = '{s.user}', database = '{name}'"
    try:
        run(
            worker,
            f"""
            CREATE SOURCE CONNECTOR dbz FROM kafka INTO items WITH (
              'bootstrap.servers' = '{broker.servers}', topic = 'dbz', format = 'debezium',
              'errors.tolerance' = 'all', 'errors.deadletter.stream' = 'items_dead');
            CREATE SINK CONNECTOR items_pg TO postgres FROM items WITH ({conn}, table = 'items');
            CREATE SINK CONNECTOR items_out TO kafka FROM items WITH (
              'bootstrap.servers' = '{broker.servers}', topic = 'dbzout', format = 'debezium',
              'auto.create' = true);
            """,
        )
        assert run(worker, "DESCRIBE STREAM items")[0].rows[2] == ("key", "id")
        wait_until(
            lambda: _rows_of(info, "SELECT id FROM items ORDER BY id") == [(2,), (4,)],
            120,
            what="the changes applied",
        )
        got = pg_sql(info, "SELECT id, name, price, made, day FROM items ORDER BY id")
        assert got == [
            (
                2,
                "TWO",
                Decimal("9.99"),
                datetime(2023, 11, 14, 22, 13, 20, 123458),
                date(2023, 12, 11),
            ),
            (4, "four", Decimal("4.25"), datetime(2024, 1, 2, 3, 4, 5, 500000), date(2024, 2, 29)),
        ]
        columns = [r[0] for r in pg_sql(info, "SELECT column_name FROM information_schema.columns"
                                              " WHERE table_name = 'items'")]  # fmt: skip
        assert not [c for c in columns if c.startswith("__")]  # a replica: no message columns
        letters = wait_until(
            lambda: read_parquet_rows(
                worker.home / "streams/items_dead", "SELECT error_message FROM t"
            ),
            30,
            what="the truncate's dead letter",
        )
        assert len(letters) == 1 and "op 't'" in letters[0][0]
        # the change stream written back as Debezium events: a delete, then its tombstone
        out = wait_until(lambda: _events(broker, "dbzout", 9), 60, what="the events written")
        assert [(m.key(), e and e["op"]) for m, e in out] == [
            (b'{"id": 1}', "r"), (b'{"id": 2}', "c"), (b'{"id": 3}', "c"), (b'{"id": 2}', "u"),
            (b'{"id": 3}', "d"), (b'{"id": 3}', None), (b'{"id": 4}', "c"),
            (b'{"id": 1}', "d"), (b'{"id": 1}', None),
        ]  # fmt: skip
        update, delete = out[3][1], out[4][1]
        assert update["after"]["name"] == "TWO" and update["after"]["price"] == "9.99"
        assert (delete["before"]["id"], delete["after"]) == (3, None)
        assert update["source"] == {"db": "shop", "table": "items"}
    finally:
        run(worker, "DROP CONNECTOR IF EXISTS items_pg")
        pg_sql(pg_shared.conninfo(), f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _events(broker, topic, count):
    """(message, its event or None for a tombstone) of a topic, in order, once there are
    `count`."""
    got = broker.records(topic, 0.3)
    if len(got) < count:
        return None
    return [(m, json.loads(m.value()) if m.value() is not None else None) for m in got]


def _rows_of(info, query):
    try:
        return pg_sql(info, query)
    except psycopg.errors.UndefinedTable:
        return None


def test_a_broker_that_goes_away_is_retried_and_the_sink_resumes(worker, tmp_path):
    """A running kafka sink whose broker stops: the connector shows RESTARTING naming the
    broker; the broker back (memory storage: the topic made again), the sink writes on."""
    server = Tansu().start()
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.json").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(100)))
    try:
        server.create("away")
        retry = "'errors.retry.backoff.ms' = 300, 'errors.retry.max' = 50"
        run(
            worker,
            f"""
            CREATE SOURCE CONNECTOR fin FROM file INTO fmsgs WITH (path = '{inbox}',
              format = json, schema = 'id BIGINT');
            CREATE SINK CONNECTOR kaway TO kafka FROM fmsgs WITH (
              'bootstrap.servers' = '{server.servers}', topic = 'away', {retry});
            """,
        )
        ids = lambda: sorted(json.loads(m.value())["id"] for m in server.records("away", 0.3))  # noqa: E731
        wait_until(lambda: ids() == list(range(100)), 120, what="the first copy")
        server.stop()
        (inbox / "b.json").write_text(
            "".join(json.dumps({"id": i}) + "\n" for i in range(100, 150))
        )
        events = "SELECT connector, to_state, reason FROM connector_events ORDER BY time"
        wait_until(
            lambda: worker.catalog.get_connector("kaway").state == "RESTARTING", 120,
            what="kaway RESTARTING", diagnose=lambda: worker.catalog.query(events)[1][-6:],
        )  # fmt: skip
        error = worker.catalog.get_connector("kaway").last_error
        assert server.servers in error, error
        server.start()
        server.create("away")  # memory storage: the broker came back empty
        wait_until(lambda: set(range(100, 150)) <= set(ids()), 180, what="the rows after")
        wait_until(lambda: worker.catalog.get_connector("kaway").state == "RUNNING", 60)
    finally:
        server.stop()


def test_a_sink_of_several_streams_writes_each_to_its_own_topic(worker, broker):
    """streams = 'sev_*' with topic = 'sev.${stream}': one kafka sink, a topic per stream
    (made by auto.create), each stream's rows once."""
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR ga FROM datagen INTO sev_a WITH ('rows.total' = 300,
          fields = 'id BIGINT SEQUENCE(1)', run = 'once');
        CREATE SOURCE CONNECTOR gb FROM datagen INTO sev_b WITH ('rows.total' = 200,
          fields = 'id BIGINT SEQUENCE(1)', run = 'once');
        CREATE SINK CONNECTOR sev TO kafka WITH ('bootstrap.servers' = '{broker.servers}',
          streams = 'sev_*', topic = 'sev.${{stream}}', 'auto.create' = true, run = 'once');
        """,
    )
    worker.wait_for_once()
    assert worker.catalog.get_connector("sev").state == "FINISHED"
    for topic, n in (("sev.sev_a", 300), ("sev.sev_b", 200)):
        ids = [json.loads(m.value())["id"] for m in broker.records(topic)]
        assert sorted(ids) == list(range(1, n + 1)), topic


AVRO = {"type": "record", "name": "order", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": ["null", "string"], "default": None},
    {"name": "ok", "type": "boolean"},
    {"name": "score", "type": "double"},
    {"name": "ratio", "type": "float"},
    {"name": "count", "type": "int"},
    {"name": "raw", "type": "bytes"},
    {"name": "color", "type": {"type": "enum", "name": "color", "symbols": ["RED", "BLUE"]}},
    {"name": "tag4", "type": {"type": "fixed", "name": "tag4", "size": 4}},
    {"name": "tags", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": "long"}},
    {"name": "place", "type": {"type": "record", "name": "place", "fields": [
        {"name": "city", "type": "string"}, {"name": "zip", "type": ["null", "int"]}]}},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}},
    {"name": "ms", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "us", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10,
                               "scale": 2}},
    {"name": "big", "type": {"type": "fixed", "name": "big", "size": 9, "logicalType": "decimal",
                             "precision": 20, "scale": 4}},
    {"name": "uid", "type": {"type": "string", "logicalType": "uuid"}},
]}  # fmt: skip
AVRO_TEXT = json.dumps(AVRO)
AVRO_PARSED = fastavro.parse_schema(AVRO)
T0 = datetime(2026, 12, 7, 10, 0, 0, tzinfo=timezone.utc)


def order(i: int) -> dict:
    """Record i of AVRO, every type and logical type set (name NULL for i = 3)."""
    return {"id": i, "name": None if i == 3 else f"n{i}", "ok": i % 2 == 0, "score": i / 4,
            "ratio": 0.5, "count": -i, "raw": bytes([i, 255]), "color": ["RED", "BLUE"][i % 2],
            "tag4": bytes([65 + i] * 4), "tags": [f"t{i}", "x"], "attrs": {"a": i, "b": -1},
            "place": {"city": f"c{i}", "zip": None if i % 2 else 1000 + i},
            "day": date(2026, 12, 1 + i), "ms": T0 + timedelta(milliseconds=i * 1001),
            "us": T0 + timedelta(microseconds=i * 1_000_001), "price": Decimal(f"{i}.25"),
            "big": Decimal(f"-12345678.{i:04d}"), "uid": str(uuid.UUID(int=i))}  # fmt: skip


def avro_datum(record: dict, parsed=AVRO_PARSED, header: bytes = b"") -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, record)
    return header + out.getvalue()


def avro_record(value: bytes, parsed=AVRO_PARSED) -> dict:
    return fastavro.schemaless_reader(io.BytesIO(value), parsed, None)


CONFLUENT = b"\x00\x00\x00\x00\x07"  # magic byte 0, schema id 7


def derived(t):
    """The Avro type a sink without avro.schema writes for a column read as AVRO's type `t`:
    a union of null and it, Avro-only kinds as their Spark column's (fixed: bytes, enum and
    uuid: string, millis: micros), a record's fields and an array's items nullable too."""
    if isinstance(t, list):
        return derived(t[1])
    if not isinstance(t, dict):
        return ["null", t]
    kind, logical = t["type"], t.get("logicalType")
    if logical == "decimal":
        decimal = {k: t[k] for k in ("logicalType", "precision", "scale")}
        return ["null", {"type": "bytes", **decimal}]
    plain = {"uuid": "string", "timestamp-millis": None, "enum": "string", "fixed": "bytes"}
    if logical == "timestamp-millis":
        return ["null", {"type": "long", "logicalType": "timestamp-micros"}]
    if (logical or kind) in plain:
        return ["null", plain[logical or kind]]
    if kind == "record":
        fields = [{"name": f["name"], "type": derived(f["type"])} for f in t["fields"]]
        return ["null", {"type": "record", "name": f"row_{t['name']}", "fields": fields}]
    if kind == "array":
        return ["null", {"type": "array", "items": derived(t["items"])}]
    if kind == "map":
        return ["null", {"type": "map", "values": derived(t["values"])}]
    return ["null", t]


def test_avro_kafka_to_kafka_through_sql_by_value_with_dead_letters(worker, broker):
    """format = 'avro' with avro.schema: every Avro type and logical type reaches the stream by
    value (Confluent's 5-byte header skipped) and the kafka sink writes each row back as the
    same datum; a value without the header and one that is no datum are dead letters with
    their offsets. A sink without avro.schema writes records of the stream's columns (the
    message columns left out); one whose avro.schema the stream does not fit is refused at
    CREATE naming the field."""
    broker.create("avin")
    messages = [(f"k{i}", avro_datum(order(i), header=CONFLUENT), None) for i in range(4)]
    messages.insert(2, (None, b"no header", None))
    messages.insert(3, (None, CONFLUENT + b"\x02\x04", None))  # a datum cut short
    broker.produce("avin", messages)
    servers = broker.servers
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR avin FROM kafka INTO orders WITH ('bootstrap.servers' = '{servers}',
          topic = 'avin', format = 'avro', 'avro.schema' = '{AVRO_TEXT}',
          'avro.confluent.header' = true, 'poll.interval.ms' = 50,
          'errors.tolerance' = 'all', 'errors.deadletter.stream' = 'orders_dead');
        CREATE SINK CONNECTOR avout TO kafka FROM orders WITH ('bootstrap.servers' = '{servers}',
          topic = 'avout', 'auto.create' = true, format = 'avro', 'avro.schema' = '{AVRO_TEXT}');
        CREATE SINK CONNECTOR avd TO kafka FROM orders WITH ('bootstrap.servers' = '{servers}',
          topic = 'avderived', 'auto.create' = true, format = 'avro');
        """,
    )
    narrow = json.dumps({"type": "record", "name": "r", "fields": [{"name": "id", "type": "int"}]})
    refusals = {
        narrow: r"column id \(int64\) does not fit avro.schema's field id \(int32\)",
        json.dumps({**AVRO, "fields": [*AVRO["fields"], {"name": "extra", "type": "long"}]}):
            "avro.schema's field extra is no column of the stream",
    }  # fmt: skip
    for given, error in refusals.items():
        with pytest.raises(ConnectQLError, match=error):
            run(worker, f"CREATE SINK CONNECTOR x TO kafka FROM orders WITH ('bootstrap.servers'"
                f" = '{servers}', topic = 'avout', format = 'avro', 'avro.schema' = '{given}')")  # fmt: skip
    wait_until(lambda: len(broker.records("avout", 0.3)) >= 4, 120, what="the copies")
    copies = broker.records("avout")
    assert [avro_record(m.value()) for m in copies] == [avro_record(avro_datum(order(i)))
                                                        for i in range(4)]  # fmt: skip
    assert [m.key() for m in copies] == [b"k0", b"k1", b"k2", b"k3"]
    fields = [{"name": f["name"], "type": derived(f["type"])} for f in AVRO["fields"]]
    writer = fastavro.parse_schema({"type": "record", "name": "row", "fields": fields})
    got = wait_until(lambda: broker.records("avderived", 0.3), 60, what="the derived records")
    assert len(got) == 4
    two = avro_record(got[2].value(), writer)
    assert two == {**avro_record(avro_datum(order(2))), "uid": str(uuid.UUID(int=2))}
    home = worker.home
    row = read_parquet_rows(home / "streams/orders", """SELECT day, epoch_ms(ms), epoch_us(us),
        price, big, uid, color, tag4, tags, attrs['a'], place.city, place.zip, name, raw,
        count, ratio FROM t WHERE id = 2""")  # fmt: skip
    two = order(2)
    assert row == [(date(2026, 12, 3), int(two["ms"].timestamp() * 1000),
                    int(two["us"].timestamp() * 1_000_000), Decimal("2.25"),
                    Decimal("-12345678.0002"), str(uuid.UUID(int=2)), "RED", b"CCCC",
                    ["t2", "x"], 2, "c2", 1002, "n2", b"\x02\xff", -2, 0.5)]  # fmt: skip
    assert read_parquet_rows(home / "streams/orders", "SELECT name FROM t WHERE id = 3") == [
        (None,)
    ]
    letters = wait_until(
        lambda: read_parquet_rows(
            home / "streams/orders_dead", "SELECT error_message, source_offset FROM t ORDER BY 2"
        ),
        30,
        what="the dead letters",
    )
    assert [json.loads(o)["offset"] for _e, o in letters] == [2, 3]
    assert "no Confluent header" in letters[0][0] and "not an Avro datum" in letters[1][0]
