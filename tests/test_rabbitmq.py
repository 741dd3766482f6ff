"""The rabbitmq connector against the machine's RabbitMQ (127.0.0.1:5672, guest/guest): the
source spools each message of a queue before acknowledging it (a stop loses nothing, a replayed
batch reads the spool again, the queue is empty afterwards); the sink publishes persistent
messages with confirms and message ids; SQL through a worker with dead letters; and a `connectql
run` worker killed with SIGKILL while it consumes: every message at least once."""

from __future__ import annotations

import json
import uuid
from collections import Counter

import pika
import pyarrow as pa
import pytest

from connectql.connectors.rabbitmq.sink import RabbitSink
from connectql.connectors.rabbitmq.source import RabbitSource
from connectql.errors import ConnectQLError
from connectql.toolkit.testing import SinkRun, SourceRun
from tests.crash import kill_and_count
from tests.helpers import read_parquet_rows, run, wait_until

pytestmark = pytest.mark.spark

URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


def channel():
    return pika.BlockingConnection(pika.URLParameters(URL)).channel()


@pytest.fixture
def queues():
    """A prefix for this test's queues; each queue declared under it is deleted afterwards."""
    prefix, made = f"cq-{uuid.uuid4().hex[:8]}", []
    ch = channel()

    def declare(name: str) -> str:
        ch.queue_declare(f"{prefix}-{name}", durable=True)
        made.append(f"{prefix}-{name}")
        return f"{prefix}-{name}"

    yield declare
    for q in made:
        ch.queue_delete(q)
    ch.connection.close()


def publish(queue: str, ids, **headers) -> None:
    ch = channel()
    for i in ids:
        body = json.dumps({"id": i, "name": f"n{i}"})
        props = pika.BasicProperties(delivery_mode=2, headers=headers or None)
        ch.basic_publish("", queue, body, props)
    ch.connection.close()


def drain(queue: str) -> list[tuple[bytes, pika.BasicProperties]]:
    ch, got = channel(), []
    while True:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            break
        got.append((body, props))
    ch.connection.close()
    return got


def depth(queue: str) -> int:
    ch = channel()
    try:
        return ch.queue_declare(queue, passive=True).method.message_count
    finally:
        ch.connection.close()


def test_a_source_spools_each_message_once_across_stops_and_a_replay(spark, queues, tmp_path):
    q = queues("in")
    publish(q, range(2000), origin="test")
    options = {"queue": q, "schema": "id BIGINT, name STRING"}
    run = SourceRun(RabbitSource, options, tmp_path, max_records=700)

    def read_all() -> bool:
        run.to_end()  # each run spools what arrives and reads what the spool held at its start
        return len(run.rows()) >= 2000

    run.batches(2)
    wait_until(read_all, 120, what="every message")
    run.replay_last_batch()
    rows = run.rows()
    assert Counter(r["id"] for r in rows) == Counter(range(2000))  # a clean stop repeats none
    assert {r["__topic"] for r in rows} == {q} and {r["__key"] for r in rows} == {q}
    assert dict(rows[0]["__headers"]) == {"origin": "test"}
    assert depth(q) == 0  # every message acknowledged


def test_a_sink_publishes_persistent_messages_with_ids(spark, queues, tmp_path):
    a, b = queues("a"), queues("b")
    schema = pa.schema([("to", pa.string()), ("value", pa.string())])
    options = {"routing.key.column": "to", "format": "text"}
    run = SinkRun(RabbitSink, options, tmp_path, schema)
    run.add([{"to": a if i % 2 else b, "value": f"v{i}"} for i in range(40)])
    run.to_end()
    got = drain(a)
    assert [body for body, _p in got] == [f"v{i}".encode() for i in range(1, 40, 2)]
    assert all(p.delivery_mode == 2 for _b, p in got)
    assert [p.message_id for _b, p in got] == [f"test-0-{i}" for i in range(1, 40, 2)]
    with pytest.raises(ConnectQLError, match="give one of routing.key and routing.key.column"):
        SinkRun(RabbitSink, {}, tmp_path / "x", schema)


def test_rabbitmq_to_rabbitmq_through_sql_with_dead_letters(worker, queues):
    src, out = queues("src"), queues("out")
    publish(src, range(5))
    ch = channel()
    ch.basic_publish("", src, b"not json")
    ch.connection.close()
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR qin FROM rabbitmq INTO msgs WITH (url = '{URL}', queue = '{src}',
          schema = 'id BIGINT, name STRING', prefetch = 100,
          'errors.tolerance' = 'all', 'errors.deadletter.stream' = 'msgs_dead');
        CREATE SINK CONNECTOR qout TO rabbitmq FROM msgs WITH (
          url = 'amqp://127.0.0.1:5672/%2F', user = 'guest', password = 'guest',
          'routing.key' = '{out}', exchange = '');
        """,
    )
    wait_until(lambda: depth(out) >= 5, 120, what="the copies")
    assert sorted(json.loads(b)["id"] for b, _p in drain(out)) == list(range(5))
    letters = wait_until(
        lambda: read_parquet_rows(worker.home / "streams/msgs_dead", "SELECT raw_record FROM t"),
        30,
        what="the dead letter",
    )
    assert letters == [("not json",)]
    with pytest.raises(ConnectQLError, match="refused the credentials"):
        run(
            worker,
            f"CREATE SOURCE CONNECTOR bad FROM rabbitmq INTO x WITH (queue = '{src}',"
            " user = 'guest', password = 'wrong-pw', format = 'text')",
        )
    with pytest.raises(ConnectQLError, match="no queue"):
        run(
            worker,
            "CREATE SOURCE CONNECTOR bad FROM rabbitmq INTO x WITH (queue = 'nope-q', format = 'text')",
        )


KILL_TOTAL = 30_000
KILL_SCRIPT = """
CREATE SOURCE CONNECTOR IF NOT EXISTS qin FROM rabbitmq INTO msgs WITH (url = '{url}',
  queue = '{queue}', schema = 'id BIGINT, name STRING', prefetch = 500,
  'batch.max.records' = 1000);
"""


def test_a_killed_worker_loses_no_message(tmp_path, queues):
    q = queues("kill")
    publish(q, range(KILL_TOTAL))
    home, logs = tmp_path / "home", tmp_path / "logs"
    logs.mkdir()
    script = tmp_path / "in.sql"
    script.write_text(KILL_SCRIPT.format(url=URL, queue=q))
    stream = home / "streams/msgs"

    def ids() -> list[int]:
        return [r[0] for r in read_parquet_rows(stream, "SELECT id FROM t") or []]

    duplicated = kill_and_count(home, script, logs, ids, KILL_TOTAL, 2000)
    assert duplicated <= 10_000  # at most what was delivered and not yet spooled (prefetch)
    assert depth(q) == 0
