"""The rabbitmq connector against the machine's RabbitMQ (127.0.0.1:5672, guest/guest): the
source spools each message of a queue before acknowledging it (a stop loses nothing, a replayed
batch reads the spool again, the queue is empty afterwards); a stream queue is read by offset
(each message once across stops, a replay and a kill -9, from where stream.offset says); the
sink publishes persistent messages with confirms and message ids; SQL through a worker with dead
letters; a `connectql run` worker killed with SIGKILL while it consumes: every message at least
once from a classic queue, exactly once from a stream queue; and a broker cut off from a stream
queue's source: RESTARTING naming it, then resumed by itself."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections import Counter
from datetime import datetime, timezone

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

    def declare(name: str, **arguments) -> str:
        ch.queue_declare(f"{prefix}-{name}", durable=True, arguments=arguments or None)
        made.append(f"{prefix}-{name}")
        return f"{prefix}-{name}"

    yield declare
    for q in made:
        ch.queue_delete(q)
    ch.connection.close()


def publish(queue: str, ids, confirm: bool = False, **headers) -> None:
    ch = channel()
    if confirm:  # each in the queue once basic_publish returns
        ch.confirm_delivery()
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
          schema = 'id BIGINT, name STRING', prefetch = 100, 'queue.type' = 'classic',
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


KILL_TOTAL = 15_000
STREAM_TOTAL = 6_000  # ids after KILL_TOTAL, in a stream queue
KILL_SCRIPT = """
CREATE SOURCE CONNECTOR IF NOT EXISTS qin FROM rabbitmq INTO msgs WITH (url = '{url}',
  queue = '{queue}', schema = 'id BIGINT, name STRING', prefetch = 500,
  'batch.max.records' = 1000);
CREATE SOURCE CONNECTOR IF NOT EXISTS sin FROM rabbitmq INTO smsgs WITH (url = '{url}',
  queue = '{stream}', schema = 'id BIGINT, name STRING', 'batch.max.records' = 500);
"""


def test_a_killed_worker_loses_no_message_and_repeats_none_of_a_stream(tmp_path, queues):
    """One worker (two start-ups are most of the wall time) reads a classic queue and a stream
    queue: killed with SIGKILL, the next finds every message, the stream's each once."""
    q, sq = queues("kill"), queues("stream-kill", **{"x-queue-type": "stream"})
    publish(q, range(KILL_TOTAL))
    publish(sq, range(KILL_TOTAL, KILL_TOTAL + STREAM_TOTAL))
    home, logs = tmp_path / "home", tmp_path / "logs"
    logs.mkdir()
    script = tmp_path / "in.sql"
    script.write_text(KILL_SCRIPT.format(url=URL, queue=q, stream=sq))

    def ids(stream: str = "") -> list[int]:
        if not stream:
            return ids("msgs") + ids("smsgs")
        return [
            r[0] for r in read_parquet_rows(home / "streams" / stream, "SELECT id FROM t") or []
        ]

    at_kill = []
    total = KILL_TOTAL + STREAM_TOTAL
    duplicated = kill_and_count(
        home, script, logs, ids, total, 2000, on_restart=lambda: at_kill.append(len(ids("smsgs")))
    )
    assert 0 < at_kill[0] < STREAM_TOTAL  # the stream was read half way when the worker died
    assert Counter(ids("smsgs")) == Counter(range(KILL_TOTAL, total))  # each once
    assert duplicated <= 10_000  # the queue's: at most what was delivered and not yet spooled
    assert depth(q) == 0


def test_a_stream_queue_is_read_by_offset_once_across_stops_and_a_replay(spark, queues, tmp_path):
    # declared with an argument classic queues take too: queue.type = 'auto' still tells
    q = queues("stream", **{"x-queue-type": "stream", "x-max-length-bytes": 100_000_000})
    publish(q, range(2000), origin="test")
    run = SourceRun(RabbitSource, {"queue": q, "schema": "id BIGINT, name STRING"}, tmp_path, 700)
    run.batches(2)
    assert 0 < len(run.rows()) <= 1400  # batch.max.records cuts the offsets
    wait_until(lambda: run.to_end() or len(run.rows()) >= 2000, 60, what="every message")
    run.replay_last_batch()
    publish(q, range(2000, 2500))
    wait_until(lambda: run.to_end() or len(run.rows()) >= 2500, 60, what="the later ones")
    rows = run.rows()
    assert Counter(r["id"] for r in rows) == Counter(range(2500))  # once each, the replay too
    assert sorted(int(r["__position"]) for r in rows) == list(range(2500))  # the stream offsets
    first = min(rows, key=lambda r: r["id"])
    assert dict(first["__headers"]) == {"origin": "test"}  # x-stream-offset is __position
    assert {r["__topic"] for r in rows} == {q}


def test_a_stream_queue_starts_where_stream_offset_says(spark, queues, tmp_path):
    q = queues("from", **{"x-queue-type": "stream"})
    publish(q, range(100), confirm=True)
    time.sleep(1.5)  # the next messages go to chunks written after `since`
    since = datetime.now(timezone.utc).isoformat()
    publish(q, range(100, 150), confirm=True)

    def read(start: str, name: str) -> list[int]:
        options = {"queue": q, "queue.type": "stream", "stream.offset": start, "format": "json",
                   "schema": "id BIGINT"}  # fmt: skip
        run = SourceRun(RabbitSource, options, tmp_path / name)
        run.to_end()
        if start == "next":  # only what is published after the connector began
            publish(q, range(150, 160), confirm=True)
            run.to_end()
        return sorted(r["id"] for r in run.rows())

    assert read("60", "offset") == list(range(60, 150))
    assert read(since, "timestamp") == list(range(100, 150))
    assert read("next", "next") == list(range(150, 160))
    with pytest.raises(ConnectQLError, match="stream.offset = 'soon' is not first"):
        RabbitSource({"queue": q, "stream.offset": "soon", "format": "text"})


class Relay:
    """The broker as a connector reaches it through a port of this test's own: cut() closes the
    port and every connection through it (a broker gone, as the connector sees it: the
    machine's broker is shared, so it is not stopped), mend() opens the port again."""

    def __init__(self, to: tuple[str, int] = ("127.0.0.1", 5672)):
        self.to, self.port = to, 0
        self.sockets: list[socket.socket] = []
        self.threads: list[threading.Thread] = []
        self.mend()

    def mend(self) -> None:
        listener = socket.create_server(("127.0.0.1", self.port))
        self.port = listener.getsockname()[1]
        self.sockets.append(listener)
        self._start(self._accept, listener)

    def cut(self) -> None:
        for s in self.sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        for t in self.threads:
            t.join(timeout=10)
        self.sockets, self.threads = [], []

    def _start(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self.threads.append(thread)
        thread.start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
                upstream = socket.create_connection(self.to)
            except OSError:
                return
            self.sockets += [client, upstream]
            self._start(_pump, client, upstream)
            self._start(_pump, upstream, client)


def stream_ids(home, stream: str) -> list[int]:
    return [i for (i,) in read_parquet_rows(home / "streams" / stream, "SELECT id FROM t") or []]


def _pump(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    for s in (source, target):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def test_a_stream_queue_source_shows_an_outage_and_resumes_by_itself(worker, queues):
    """The broker goes away (its relay cut): the connector shows RESTARTING naming it; back,
    the connector resumes by itself from its offset, each message once. Its json schema is
    inferred from the stream queue's messages at CREATE (a classic queue's must be given)."""
    q, relay = queues("outage", **{"x-queue-type": "stream"}), Relay()
    classic = queues("outage-classic")
    publish(q, range(300))
    url = f"amqp://guest:guest@127.0.0.1:{relay.port}/%2F"
    with pytest.raises(ConnectQLError, match=f"needs schema = '...' for a classic.*'{classic}'"):
        run(worker, f"CREATE SOURCE CONNECTOR c FROM rabbitmq INTO c WITH (url = '{url}', queue = '{classic}')")  # fmt: skip
    try:
        run(
            worker,
            f"""CREATE SOURCE CONNECTOR sgone FROM rabbitmq INTO gone WITH (url = '{url}',
              queue = '{q}', 'errors.retry.backoff.ms' = 300, 'errors.retry.max' = 50)""",
        )
        assert worker.catalog.get_stream("gone").schema.startswith("`id` BIGINT, `name` STRING, ")
        ids = lambda: stream_ids(worker.home, "gone")  # noqa: E731
        connector = lambda: worker.catalog.get_connector("sgone")  # noqa: E731
        wait_until(lambda: len(ids()) >= 300, 120, what="the first messages", diagnose=connector)
        relay.cut()
        publish(q, range(300, 500))
        wait_until(lambda: connector().state == "RESTARTING", 60, what="sgone RESTARTING")
        assert f"127.0.0.1:{relay.port}" in connector().last_error, connector().last_error
        relay.mend()
        wait_until(lambda: len(ids()) >= 500, 120, what="every message", diagnose=connector)
        assert Counter(ids()) == Counter(range(500))
        wait_until(lambda: connector().state == "RUNNING", 60, what="sgone RUNNING by itself")
    finally:
        run(worker, "DROP CONNECTOR IF EXISTS sgone")
        relay.cut()


def test_asking_whether_a_missing_queue_is_a_stream_does_not_make_it():
    """queue.type = 'auto' asks the broker by declaring the queue again as a stream: a queue
    that is not there is named and left not there (not made as a stream)."""
    import pika.exceptions as px

    from connectql.connectors.rabbitmq import stream

    name = f"cq-{uuid.uuid4().hex[:8]}-missing"
    with pytest.raises(ConnectQLError, match=f"queue '{name}'.*no queue"):
        stream.is_stream({"url": URL, "queue": name})
    with pytest.raises(px.ChannelClosedByBroker):
        channel().queue_declare(name, passive=True)
