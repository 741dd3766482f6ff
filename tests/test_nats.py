"""The nats connector against the machine's NATS server with JetStream (127.0.0.1:4222), and a
private one stopped and started again mid-copy (both connectors retried, every message once): the
source reads each message of a subject once across stops and a replayed batch, with the message
columns; the idempotent sink publishes each row once across a replay, also one its progress
bucket missed (the server drops the repeated message ids); SQL through a worker (an inferred
schema, dead letters, a subject no stream holds); and NATS -> stream -> Redis in a `connectql
run` worker killed with SIGKILL mid-way: every message once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading
import uuid
from collections import Counter

import nats
import pyarrow as pa
import pytest
import redis

from connectql.connectors.nats.sink import BUCKET, NatsSink, _keys
from connectql.connectors.nats.source import NatsSource
from connectql.errors import ConnectQLError
from connectql.toolkit import Retryable
from connectql.toolkit.testing import SinkRun, SourceRun, options_of
from tests.crash import killed_once, resumed_until
from tests.helpers import read_parquet_rows, run, wait_until
from tests.servers import free_port
from tests.test_redis import URL as REDIS_URL
from tests.test_redis import entries
from tests.test_redis import keys as redis_keys  # noqa: F401 (fixture)

pytestmark = pytest.mark.spark

URL = "nats://127.0.0.1:4222"


def nats_call(body):
    async def go():
        nc = await nats.connect(URL)
        try:
            return await body(nc.jetstream())
        finally:
            await nc.close()

    return asyncio.run(go())


@pytest.fixture
def subjects():
    """A JetStream stream holding the subjects '<prefix>.>' for this test, deleted afterwards
    (and the testing helpers' sink progress, key 'test.test')."""
    prefix = f"cq{uuid.uuid4().hex[:8]}"

    async def add(js):
        await js.add_stream(name=prefix.upper(), subjects=[f"{prefix}.>"])

    nats_call(add)
    yield prefix

    async def remove(js):
        await js.delete_stream(prefix.upper())
        kv = await js.create_key_value(bucket=BUCKET)
        await kv.purge("test.test")

    nats_call(remove)


def publish(subject: str, ids, **headers) -> list[int]:
    """JSON messages {"id", "name"}; their stream sequences."""

    async def go(js):
        acks = [
            await js.publish(subject, json.dumps({"id": i, "name": f"n{i}"}).encode(),
                             headers={"origin": subject, **headers} )
            for i in ids
        ]  # fmt: skip
        return [a.seq for a in acks]

    return nats_call(go)


def messages(subject: str) -> list:
    """Every message of a subject: (data, headers), in stream order."""

    async def go(js):
        # a pull consumer: its num_pending counts every message until fetched (a push
        # consumer's drops the ones already pushed to the client)
        sub = await js.pull_subscribe(subject, durable=None)
        try:
            pending = (await sub.consumer_info()).num_pending
            found = []
            while len(found) < pending:
                for msg in await sub.fetch(pending - len(found), timeout=5):
                    found.append((msg.data, msg.headers))
            return found
        finally:
            await sub.unsubscribe()

    return nats_call(go)


def test_a_source_reads_each_message_once_across_stops_and_a_replay(spark, subjects, tmp_path):
    a, b = f"{subjects}.a", f"{subjects}.b"
    seqs = publish(a, range(0, 1500))
    publish(b, range(1500, 1600))  # another subject of the stream: not read
    options = {"subject": a, "url": URL}
    run = SourceRun(NatsSource, options, tmp_path, max_records=400)
    run.batches(2)
    publish(a, range(1600, 1800))  # published while no query runs
    run.to_end()
    run.replay_last_batch()
    rows = run.rows()
    assert Counter(r["id"] for r in rows) == Counter([*range(1500), *range(1600, 1800)])
    first = min(rows, key=lambda r: int(r["__position"]))
    assert (first["__topic"], first["__position"], first["name"]) == (a, str(seqs[0]), "n0")
    assert dict(first["__headers"]) == {"origin": a} and first["__key"] is None
    assert first["__timestamp"] is not None


def test_an_idempotent_sink_publishes_each_row_once_across_replays(spark, subjects, tmp_path):
    out = f"{subjects}.out"
    schema = pa.schema([("id", pa.int64()), ("__headers", pa.map_(pa.string(), pa.string()))])
    run = SinkRun(NatsSink, {"subject": out, "url": URL}, tmp_path, schema)
    for start in (0, 100, 200):
        run.add([{"id": i, "__headers": [("h", str(i))]} for i in range(start, start + 100)])
    run.batches(1)
    run.to_end()
    run.replay_last_batch()  # recorded in the bucket: skipped

    async def forget(js):  # a crash between the publishes and the bucket's put
        kv = await js.key_value(BUCKET)
        await kv.put("test.test", b"1")

    nats_call(forget)
    run.replay_last_batch()  # published again: the server drops the ids it has
    got = messages(out)
    assert Counter(json.loads(d)["id"] for d, _h in got) == Counter(range(300))  # each once
    assert got[5][1]["h"] == "5" and got[5][1]["Nats-Msg-Id"].endswith("-0-5")


def test_nats_to_nats_through_sql_with_dead_letters(worker, subjects):
    src, out = f"{subjects}.in", f"{subjects}.copy"
    publish(src, range(5))
    publish(src, [])  # nothing

    async def bad(js):
        await js.publish(src, b"not json")

    nats_call(bad)
    publish(src, range(5, 8))
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR nin FROM nats INTO msgs WITH (url = '{URL}', subject = '{src}',
          'errors.tolerance' = 'all', 'errors.deadletter.stream' = 'msgs_dead',
          'poll.interval.ms' = 50, 'tasks.max' = 2);
        CREATE SINK CONNECTOR nout TO nats FROM msgs WITH (url = '{URL}', subject = '{out}');
        """,
    )
    wait_until(lambda: len(messages(out)) >= 8, 120, what="the copies")
    assert sorted(json.loads(d)["id"] for d, _h in messages(out)) == list(range(8))
    letters = wait_until(  # a batch's dead letters are committed after its stream's rows
        lambda: read_parquet_rows(worker.home / "streams/msgs_dead", "SELECT raw_record FROM t"),
        30,
        what="the dead letter",
    )
    assert letters == [("not json",)]
    plugins = {r[0]: r for r in run(worker, "SHOW CONNECTOR PLUGINS")[0].rows}
    assert "idempotent" in plugins["nats"]
    with pytest.raises(
        ConnectQLError, match=f"no JetStream stream holds subject 'nowhere{subjects}'"
    ):
        run(
            worker,
            f"CREATE SOURCE CONNECTOR x FROM nats INTO y WITH (subject = 'nowhere{subjects}')",
        )
    run(worker, "DROP CONNECTOR nout")

    async def left(js):
        kv = await js.key_value(BUCKET)
        return [k for k in await _keys(kv) if k.startswith("nout.")]

    assert nats_call(left) == []


class CoreListener:
    """A plain nats-py subscriber to a core subject in a thread of its own: `got` holds the
    messages (data, headers) it has received. Stopped by `close` (the thread joined)."""

    def __init__(self, subject: str):
        self.got: list[tuple[bytes, dict | None]] = []
        self._ready, self._stop = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=asyncio.run, args=(self._listen(subject),))
        self._thread.start()
        assert self._ready.wait(10), "the listener did not subscribe"

    async def _listen(self, subject: str) -> None:
        nc = await nats.connect(URL)

        async def got(msg):
            self.got.append((msg.data, msg.headers))

        await nc.subscribe(subject, cb=got)
        await nc.flush()
        self._ready.set()
        while not self._stop.is_set():
            await asyncio.sleep(0.05)
        await nc.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)


def core_publish(subject: str, ids) -> None:
    """JSON messages {"id", "name"} published to a core subject (no JetStream), flushed."""

    async def go():
        nc = await nats.connect(URL)
        for i in ids:
            await nc.publish(subject, json.dumps({"id": i, "name": f"n{i}"}).encode())
        await nc.flush()
        await nc.close()

    asyncio.run(go())


CORE_TOTAL = 2000


def test_core_nats_through_sql_each_message_once_while_running(worker):
    """mode = 'core': what is published to a subject no JetStream stream holds, while the
    source is subscribed, is in the stream once each (spooled, no replay needed), and the core
    sink's messages reach a plain subscriber; the plugin says at-most-once; a wrong mode and a
    core source run once are refused, naming what is wrong."""
    prefix = f"cqcore{uuid.uuid4().hex[:8]}"
    listener = CoreListener(f"{prefix}.out")
    try:
        run(
            worker,
            f"""
            CREATE SOURCE CONNECTOR cin FROM nats INTO cmsgs WITH (url = '{URL}', mode = 'core',
              subject = '{prefix}.in', schema = 'id BIGINT, name STRING', 'poll.interval.ms' = 50);
            CREATE SINK CONNECTOR cout TO nats FROM cmsgs WITH (url = '{URL}', mode = 'core',
              subject = '{prefix}.out');
            """,
        )
        probes = iter(range(-1, -10_000, -1))  # published until one comes out: both run

        def through() -> bool:
            core_publish(f"{prefix}.in", [next(probes)])
            return bool(listener.got)

        wait_until(through, 120, what="a probe through source and sink", every=0.5)
        core_publish(f"{prefix}.in", range(CORE_TOTAL))
        ids = lambda: [json.loads(d)["id"] for d, _h in listener.got if json.loads(d)["id"] >= 0]  # noqa: E731
        wait_until(lambda: len(ids()) >= CORE_TOTAL, 60, what="every message out")
    finally:
        listener.close()
    assert Counter(ids()) == Counter(range(CORE_TOTAL))  # each once (no batch was replayed)
    assert listener.got[-1][1]["Nats-Msg-Id"].count("-") >= 2  # a row id, for de-duplication
    stream = read_parquet_rows(worker.home / "streams/cmsgs", "SELECT id, __topic FROM t")
    assert Counter(i for i, _t in stream if i >= 0) == Counter(range(CORE_TOTAL))
    assert {t for _i, t in stream} == {f"{prefix}.in"}
    described = run(worker, "DESCRIBE PLUGIN nats")[0]
    assert "mode = 'core'" in described.title and "at-most-once" in described.title
    with pytest.raises(ConnectQLError, match="option 'mode' must be one of 'jetstream', 'core'"):
        run(worker, "CREATE SOURCE CONNECTOR x FROM nats INTO y WITH (subject = 'a', mode = 'cor')")
    with pytest.raises(ConnectQLError, match="mode = 'core' has nothing to read once"):
        run(
            worker,
            "CREATE SOURCE CONNECTOR x FROM nats INTO y WITH (subject = 'a', mode = 'core',"
            " format = 'text', run = 'once')",
        )


def test_a_core_source_that_loses_its_server_says_so_and_leaves_no_thread(tmp_path):
    """The driver's side of mode = 'core' against a private server stopped under it: the next
    look raises Retryable naming the server (the connector shows RESTARTING and its restart
    subscribes again), and close leaves no thread behind."""
    port = free_port()
    server = subprocess.Popen(["nats-server", "-a", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    url = f"nats://127.0.0.1:{port}"
    try:
        wait_until(lambda: _quietly(lambda: asyncio.run(_connected(url))), 30, what="nats-server")
        options = {"url": url, "subject": "lost.>", "mode": "core", "format": "text"}
        source = NatsSource(options_of(NatsSource, options))
        source.checkpoint = str(tmp_path)
        before = set(threading.enumerate())
        assert source.latest_offset({"n": 0}) == {"n": 0}  # subscribed
        server.terminate()
        server.wait(timeout=30)

        def lost() -> str | None:
            try:
                source.latest_offset({"n": 0})
            except Retryable as e:
                return str(e)
            return None

        assert wait_until(lost, 10, what="the lost server") == f"nats source: lost 127.0.0.1:{port}"
        source.close()
        assert set(threading.enumerate()) <= before
    finally:
        if server.poll() is None:
            server.terminate()
            server.wait(timeout=30)


def test_a_source_starting_at_latest_reads_only_later_messages_as_text(spark, subjects, tmp_path):
    subject = f"{subjects}.t"
    publish(subject, range(3))
    run = SourceRun(NatsSource, {"subject": subject, "start": "latest", "format": "text"}, tmp_path)
    run.to_end()  # the checkpoint starts after the three
    publish(subject, range(3, 5))
    run.to_end()
    assert sorted(r["value"] for r in run.rows()) == [
        json.dumps({"id": i, "name": f"n{i}"}) for i in (3, 4)
    ]


def test_a_sink_routes_rows_by_a_column_and_writes_bytes(spark, subjects, tmp_path):
    schema = pa.schema([("to", pa.string()), ("value", pa.binary())])
    options = {"subject.column": "to", "format": "bytes"}
    run = SinkRun(NatsSink, options, tmp_path, schema)
    run.add([{"to": f"{subjects}.{i % 2}", "value": bytes([i, 255])} for i in range(10)])
    run.to_end()
    assert [d for d, _h in messages(f"{subjects}.1")] == [bytes([i, 255]) for i in (1, 3, 5, 7, 9)]


@pytest.fixture
def nats_with_users(tmp_path):
    """A private nats-server with JetStream that asks for user 'app' and a password."""
    port, password = free_port(), "pw-" + uuid.uuid4().hex
    proc = subprocess.Popen(
        ["nats-server", "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(tmp_path / "js"),
         "--user", "app", "--pass", password],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"nats://127.0.0.1:{port}"

        async def ready():
            nc = await nats.connect(url, user="app", password=password)
            await nc.jetstream().add_stream(name="AUTH", subjects=["auth.>"])
            await nc.jetstream().publish("auth.in", b'{"id": 1}')
            await nc.close()

        wait_until(lambda: _quietly(lambda: asyncio.run(ready())), 30, what="nats-server")
        yield url, password
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def _connected(url: str) -> None:
    nc = await nats.connect(url)
    await nc.close()


def _quietly(f) -> bool:
    try:
        f()
        return True
    except Exception:
        return False


def test_a_user_and_password_reach_a_server_that_asks_and_stay_secret(worker, nats_with_users):
    url, password = nats_with_users
    auth = f"url = '{url}', user = 'app', password = '{password}'"
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR nin FROM nats INTO msgs WITH ({auth}, subject = 'auth.in');
        CREATE SINK CONNECTOR nout TO nats FROM msgs WITH ({auth}, subject = 'auth.out');
        """,
    )

    async def copied():
        nc = await nats.connect(url, user="app", password=password)
        try:
            return (await nc.jetstream().stream_info("AUTH")).state.messages
        finally:
            await nc.close()

    wait_until(lambda: asyncio.run(copied()) == 2, 120, what="the copy")
    shown = str([r.rows for r in run(worker, "DESCRIBE CONNECTOR nin")])
    assert "app" in shown and password not in shown
    wrong = f"url = '{url}', user = 'app', password = 'nope-{password[:4]}'"
    with pytest.raises(ConnectQLError, match="nats source") as refused:
        run(
            worker,
            f"CREATE SOURCE CONNECTOR bad FROM nats INTO x WITH ({wrong}, subject = 'auth.in')",
        )
    assert f"nope-{password[:4]}" not in str(refused.value)


KILL_TOTAL = 20_000
KILL_SCRIPT = """
CREATE SOURCE CONNECTOR IF NOT EXISTS nin FROM nats INTO msgs WITH (url = '{url}',
  subject = '{subject}', schema = 'id BIGINT, name STRING', 'batch.max.records' = 2000);
CREATE SINK CONNECTOR IF NOT EXISTS rout TO redis FROM msgs WITH (url = '{redis}', key = '{out}');
"""


def test_nats_to_redis_in_a_killed_worker_delivers_every_message_once(
    tmp_path,
    subjects,
    redis_keys,  # noqa: F811
):
    """Across brokers: a JetStream subject -> stream -> a Redis stream, the `connectql run`
    worker killed with SIGKILL mid-copy and started again: every message once at the end."""
    subject, out = f"{subjects}.k", f"{redis_keys}-out"
    publish(subject, range(KILL_TOTAL))
    home, logs = tmp_path / "home", tmp_path / "logs"
    logs.mkdir()
    script = tmp_path / "copy.sql"
    script.write_text(KILL_SCRIPT.format(url=URL, subject=subject, redis=REDIS_URL, out=out))
    client = redis.Redis.from_url(REDIS_URL)

    def some_copied():
        n = client.xlen(out)
        assert n < KILL_TOTAL, "the copy finished before the kill: make it bigger"
        return n >= 4000

    killed_once(home, script, logs, some_copied)
    resumed_until(home, script, logs, lambda: client.xlen(out) >= KILL_TOTAL, "every copy")
    ids = [json.loads(f["value"])["id"] for _id, f in entries(out)]
    assert Counter(ids) == Counter(range(KILL_TOTAL))
    assert {f["origin"] for _id, f in entries(out)[:10]} == {subject}  # headers as fields


class PrivateNats:
    """A nats-server with JetStream on a free port, its store in `store`: stopped and started
    again on the same port and store, its streams and messages come back."""

    def __init__(self, store):
        self.port, self.store, self.proc = free_port(), store, None
        self.url = f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["nats-server", "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.store)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_until(lambda: _quietly(lambda: self.call(lambda js: js.account_info())), 30)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)

    def call(self, body):
        async def go():
            nc = await nats.connect(self.url, max_reconnect_attempts=0)
            try:
                return await body(nc.jetstream())
            finally:
                await nc.close()

        return asyncio.run(go())


def test_a_nats_server_that_goes_away_is_retried_and_both_connectors_resume(worker, tmp_path):
    server = PrivateNats(tmp_path / "js")
    server.start()
    try:
        server.call(lambda js: js.add_stream(name="OUT", subjects=["out.>"]))
        publish_to = lambda ids: server.call(  # noqa: E731
            lambda js: asyncio.gather(*(js.publish("out.in", json.dumps({"id": i}).encode())
                                         for i in ids))
        )  # fmt: skip
        publish_to(range(100))
        retry = "'errors.retry.backoff.ms' = 300, 'errors.retry.max' = 50"
        run(
            worker,
            f"""
            CREATE SOURCE CONNECTOR nin FROM nats INTO nmsgs WITH (url = '{server.url}',
              subject = 'out.in', schema = 'id BIGINT', 'poll.interval.ms' = 50, {retry});
            CREATE SINK CONNECTOR nout TO nats FROM nmsgs WITH (url = '{server.url}',
              subject = 'out.copy', {retry});
            """,
        )

        def copied() -> list[int]:
            async def ids(js):
                sub = await js.pull_subscribe("out.copy", durable=None)
                try:
                    pending = (await sub.consumer_info()).num_pending
                    got = []
                    while len(got) < pending:
                        got += await sub.fetch(pending - len(got), timeout=5)
                    return sorted(json.loads(m.data)["id"] for m in got)
                finally:
                    await sub.unsubscribe()

            return server.call(ids)

        wait_until(lambda: copied() == list(range(100)), 120, what="the first copy")
        server.stop()
        events = "SELECT connector, to_state, reason FROM connector_events ORDER BY time"
        wait_until(
            lambda: state(worker, "nin") == "RESTARTING", 60, what="nin RESTARTING",
            diagnose=lambda: worker.catalog.query(events)[1][-6:],
        )  # fmt: skip
        error = worker.catalog.get_connector("nin").last_error
        assert f"127.0.0.1:{server.port}" in error, error
        server.start()  # the same store: the stream and its messages are back
        publish_to(range(100, 150))
        wait_until(lambda: copied() == list(range(150)), 180, what="every message once after")
        for name in ("nin", "nout"):
            wait_until(lambda n=name: state(worker, n) == "RUNNING", 60, what=f"{name} RUNNING")
    finally:
        if server.proc.poll() is None:
            server.stop()


def state(worker, name: str) -> str:
    return worker.catalog.get_connector(name).state
