"""Issue 53's broker bench: N small JSON messages put in a Redis stream, a JetStream subject, an
MQTT persistent session's queue and RabbitMQ queues, then read into a connectql stream by the
`redis`, `nats`, `mqtt` and `rabbitmq` sources on a warm worker against the broker's own Python
client draining the same messages as fast as it can (the yardstick: XRANGE pages; a pull
consumer's fetches; a paho subscriber; a pika consumer), both parsing every message. Each stream
is checked by value (count, distinct ids, sum of ids, every name) and messages/s reported for
both.

Brokers that keep messages (redis, nats, a RabbitMQ stream queue) are read with `run = 'once'`.
MQTT and a classic RabbitMQ queue cannot replay, so each reader gets a queue of its own filled by
the same publishes before anything is timed: two persistent MQTT sessions (a private Mosquitto
that queues without limit), two classic queues bound to one fanout exchange (with the stream
queue). Their sources run continuously (run = 'once' reads what its first look has spooled,
which waits at most 30 s for a backlog) and are timed from CREATE until the stream holds every
message; the yardsticks acknowledge as the sources do (QoS 1 PUBACKs; a multiple basic.ack
every half prefetch window), but keep nothing on disk."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import duckdb
from rich.console import Console
from rich.table import Table

from bench.common import load

console = Console()
REDIS_URL, NATS_URL = "redis://127.0.0.1:6379/0", "nats://127.0.0.1:4222"
RABBIT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
BROKERS = ("redis", "nats", "mqtt", "rabbitmq")
SCHEMA = "id BIGINT, name STRING, qty INT"
PREFETCH = 10_000  # the rabbitmq source's default prefetch, and the yardstick's
DRAIN_S = 600.0  # the longest any reader may take


@dataclass
class Result:
    method: str
    seconds: float
    messages: int
    check: str

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds else float("nan")


def message(i: int) -> bytes:
    return json.dumps({"id": i, "name": f"n{i}", "qty": i % 10}).encode()


# ------------------------------------------------------------------------------ redis
def redis_fill(key: str, n: int) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    for at in range(0, n, 10_000):
        with client.pipeline(transaction=False) as pipe:
            for i in range(at, min(at + 10_000, n)):
                pipe.xadd(key, {"value": message(i)})
            pipe.execute()


def redis_drain(key: str) -> tuple[int, int]:
    """(messages, sum of ids) read with XRANGE pages, each message parsed."""
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    after, count, total = "0-0", 0, 0
    while True:
        page = client.xrange(key, "(" + after, "+", 10_000)
        if not page:
            return count, total
        for _id, fields in page:
            total += json.loads(fields[b"value"])["id"]
        count += len(page)
        after = page[-1][0].decode()


# ------------------------------------------------------------------------------ nats
def nats_fill(stream: str, subject: str, n: int) -> None:
    import nats

    async def go():
        nc = await nats.connect(NATS_URL)
        js = nc.jetstream()
        await js.add_stream(name=stream, subjects=[subject])
        for at in range(0, n, 2_000):
            await asyncio.gather(
                *(js.publish(subject, message(i)) for i in range(at, min(at + 2_000, n)))
            )
        await nc.close()

    asyncio.run(go())


def nats_drain(stream: str, subject: str) -> tuple[int, int]:
    """(messages, sum of ids) read by a pull consumer's fetches, each message parsed."""
    import nats
    from nats.js.api import AckPolicy, ConsumerConfig

    async def go():
        nc = await nats.connect(NATS_URL)
        js = nc.jetstream()
        sub = await js.pull_subscribe(
            subject, stream=stream, config=ConsumerConfig(ack_policy=AckPolicy.NONE)
        )
        left = (await sub.consumer_info()).num_pending
        count = total = 0
        while left:
            for msg in await sub.fetch(min(left, 1_000), timeout=10):
                total += json.loads(msg.data)["id"]
                count += 1
                left -= 1
        await nc.close()
        return count, total

    return asyncio.run(go())


def nats_drop(stream: str) -> None:
    import nats

    async def go():
        nc = await nats.connect(NATS_URL)
        with contextlib.suppress(Exception):
            await nc.jetstream().delete_stream(stream)
        await nc.close()

    asyncio.run(go())


# ------------------------------------------------------------------------------ mqtt
@contextlib.contextmanager
def mosquitto(folder: Path, inflight: int):
    """A private Mosquitto (url) that sends a client `inflight` unacknowledged QoS 1 messages
    at once (0: no limit; Mosquitto's default is 20)."""
    from tests import servers

    settings = f"allow_anonymous true\nmax_inflight_messages {inflight}\npersistence false\n"
    yield from servers.mosquitto(folder, settings)


def mqtt_client(url: str, client_id: str = "", clean: bool = True, on_message=None):
    import paho.mqtt.client as mqtt

    host, port = url.removeprefix("mqtt://").split(":")
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean)
    c.max_inflight_messages_set(1_000)
    c.max_queued_messages_set(0)
    if on_message is not None:
        c.on_message = on_message
    c.connect(host, int(port))
    c.loop_start()
    return c


def mqtt_sessions(url: str, topic: str, client_ids: list[str]) -> None:
    """Persistent sessions subscribed to `topic` with QoS 1: the broker queues for each."""
    for client_id in client_ids:
        done = threading.Event()
        c = mqtt_client(url, client_id, clean=False)
        c.on_subscribe = lambda *_a, done=done: done.set()
        c.subscribe(topic, 1)
        assert done.wait(10), "no SUBACK"
        c.disconnect()
        c.loop_stop()


def mqtt_fill(url: str, topic: str, n: int) -> None:
    c = mqtt_client(url)
    try:
        for at in range(0, n, 10_000):  # message ids wrap at 65535: a window at a time
            sent = [c.publish(topic, message(i), 1) for i in range(at, min(at + 10_000, n))]
            for info in sent:
                info.wait_for_publish(60)
    finally:
        c.disconnect()
        c.loop_stop()


def mqtt_drain(url: str, client_id: str, n: int) -> tuple[int, int]:
    """(messages, sum of ids) of the session's queue, received by a paho subscriber (QoS 1,
    each PUBACKed as paho does after on_message), each message parsed."""
    got = {"count": 0, "total": 0}
    done = threading.Event()

    def on_message(_c, _u, m):
        got["total"] += json.loads(m.payload)["id"]
        got["count"] += 1
        if got["count"] >= n:
            done.set()

    c = mqtt_client(url, client_id, clean=False, on_message=on_message)
    try:
        done.wait(DRAIN_S)
    finally:
        c.disconnect()
        c.loop_stop()
    return got["count"], got["total"]


# ------------------------------------------------------------------------------ rabbitmq
def rabbit_channel():
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(RABBIT_URL))
    return conn, conn.channel()


def rabbit_fill(tag: str, n: int) -> tuple[str, str, str]:
    """A fanout exchange and three queues bound to it: a classic queue for the yardstick, one for
    the source, a stream queue for both; N persistent messages published to it once. Returns
    (yardstick's classic queue, source's classic queue, stream queue)."""
    import pika

    queues = (f"{tag}-classic-y", f"{tag}-classic-c", f"{tag}-stream")
    conn, ch = rabbit_channel()
    try:
        ch.exchange_declare(tag, "fanout", durable=True)
        for q in queues:
            stream = {"x-queue-type": "stream"} if q.endswith("stream") else None
            ch.queue_declare(q, durable=True, arguments=stream)
            ch.queue_bind(q, tag)
        props = pika.BasicProperties(delivery_mode=2)
        for i in range(n):
            ch.basic_publish(tag, "", message(i), props)
        deadline = time.monotonic() + DRAIN_S
        while ch.queue_declare(queues[1], passive=True).method.message_count < n:
            assert time.monotonic() < deadline, "the broker did not take every message"
            time.sleep(0.2)
    finally:
        conn.close()
    return queues


def rabbit_drain(queue: str, n: int, stream: bool) -> tuple[int, int]:
    """(messages, sum of ids) consumed by pika with a prefetch of PREFETCH, acknowledged by a
    multiple basic.ack every half window; a stream queue from x-stream-offset = first."""
    conn, ch = rabbit_channel()
    count = total = 0
    try:
        ch.basic_qos(prefetch_count=PREFETCH)
        args = {"x-stream-offset": "first"} if stream else None
        every = PREFETCH // 2
        for method, _props, body in ch.consume(queue, arguments=args, inactivity_timeout=30):
            if method is None:
                break
            total += json.loads(body)["id"]
            count += 1
            if count % every == 0 or count >= n:
                ch.basic_ack(method.delivery_tag, multiple=True)
            if count >= n:
                break
        ch.cancel()
    finally:
        conn.close()
    return count, total


def rabbit_drop(tag: str, queues) -> None:
    conn, ch = rabbit_channel()
    try:
        for q in queues:
            ch.queue_delete(q)
        ch.exchange_delete(tag)
    finally:
        conn.close()


# ------------------------------------------------------------------------------ connectql
def stream_check(worker, stream: str, n: int, at_least_once: str | None = None) -> str:
    """ok when the stream holds ids 0..n-1 once each with their names; for an at-least-once
    source (`at_least_once`: the connector) each at least once, duplicates allowed only after
    a restart of the connector (its broker's redelivery), which the check names."""
    from connectql.catalog.streams import committed_files

    files = committed_files(worker.home / "streams" / stream)
    if not files:
        return "FAIL: nothing in the stream"
    got = (
        duckdb.connect()
        .execute(
            f"SELECT count(*), count(DISTINCT id), sum(DISTINCT id),"
            f" count(*) FILTER (WHERE name <> 'n' || id) FROM read_parquet({[str(f) for f in files]!r})"
        )
        .fetchone()
    )
    want = (n, n, n * (n - 1) // 2, 0)
    if tuple(got) == want:
        return "ok"
    if at_least_once and tuple(got[1:]) == want[1:]:
        restarts = worker.catalog.query(
            "SELECT reason FROM connector_events WHERE connector = ? AND to_state = 'RESTARTING'",
            [at_least_once],
        )[1]
        if restarts:
            why = (restarts[0][0] or "")[:70]
            return f"ok: {got[0] - n} again after {len(restarts)} restart(s): {why}"
    return f"FAIL: {got} != {want}"


def connectql_read(worker, name: str, kind: str, options: str, n: int) -> Result:
    script = (
        f"CREATE SOURCE CONNECTOR {name} FROM {kind} INTO {name}_s WITH ({options},"
        f" schema = '{SCHEMA}', run = 'once');"
    )
    t0 = time.perf_counter()
    for _stmt, _result in worker.run_script(script):
        pass
    worker.wait_for_once()
    seconds = time.perf_counter() - t0
    state = worker.catalog.get_connector(name)
    check = stream_check(worker, f"{name}_s", n)
    if state.state != "FINISHED":
        check = f"FAIL: {state.state} {state.last_error or ''}"
    return Result(f"connectql {kind} source, run once", seconds, n, check)


def connectql_follow(worker, name: str, kind: str, options: str, n: int) -> Result:
    """A continuous source from CREATE until its stream holds n messages, then dropped."""
    from connectql.catalog.streams import committed_files

    script = (
        f"CREATE SOURCE CONNECTOR {name} FROM {kind} INTO {name}_s WITH ({options},"
        f" schema = '{SCHEMA}');"
    )
    folder = worker.home / "streams" / f"{name}_s"

    def count() -> int:
        files = committed_files(folder)
        if not files:
            return 0
        sql = f"SELECT count(*) FROM read_parquet({[str(f) for f in files]!r})"
        return duckdb.connect().execute(sql).fetchone()[0]

    t0 = time.perf_counter()
    for _stmt, _result in worker.run_script(script):
        pass
    deadline = t0 + DRAIN_S
    while count() < n and time.perf_counter() < deadline:
        state = worker.catalog.get_connector(name)
        if state.state == "FAILED":
            break
        time.sleep(0.25)
    seconds = time.perf_counter() - t0
    state = worker.catalog.get_connector(name)
    check = stream_check(worker, f"{name}_s", n, at_least_once=name)
    if state.state not in ("RUNNING", "STARTING"):
        check = f"FAIL: {state.state} {state.last_error or ''}"
    for _stmt, _result in worker.run_script(f"DROP CONNECTOR {name};"):
        pass
    return Result(f"connectql {kind} source, continuous", seconds, n, check)


def timed_drain(label: str, drain, n: int) -> Result:
    t0 = time.perf_counter()
    count, total = drain()
    seconds = time.perf_counter() - t0
    ok = (count, total) == (n, n * (n - 1) // 2)
    return Result(label, seconds, n, "ok" if ok else f"FAIL: {count} messages, sum {total}")


def table(title: str, results: list[Result]) -> Table:
    t = Table(title=title)
    for col in ("method", "seconds", "messages/s", "check"):
        t.add_column(col, justify="right" if col in ("seconds", "messages/s") else "left")
    for r in results:
        t.add_row(r.method, f"{r.seconds:.1f}", f"{r.rate:,.0f}", r.check)
    return t


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.brokers", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--broker", default=",".join(BROKERS), help=f"a comma list of {', '.join(BROKERS)}"
    )
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument(
        "--mqtt-inflight",
        type=int,
        default=20,
        help="Mosquitto's max_inflight_messages for the mqtt run (its default 20; 0: no limit)",
    )
    p.add_argument("--keep", action="store_true")
    args = p.parse_args(argv)
    brokers = [b.strip() for b in args.broker.split(",") if b.strip()]
    if not brokers or set(brokers) - set(BROKERS):
        p.error(f"--broker: a comma list of {', '.join(BROKERS)}")
    n, tag = args.messages, f"cqbench{uuid.uuid4().hex[:6]}"
    tmp = Path(tempfile.mkdtemp(prefix="connectql-brokers-"))
    console.print(f"brokers: {n:,} JSON messages each, load {load()}")
    from connectql.worker.worker import Worker

    worker = Worker(tmp / "home")
    warm = "CREATE SOURCE CONNECTOR warm FROM datagen INTO warm_s WITH ('rows.total' = 1000, run = 'once');"
    for _stmt, _result in worker.run_script(warm):  # the session's slow first job, not timed
        pass
    worker.wait_for_once()
    failed = False
    try:
        if "redis" in brokers:
            key = f"{tag}-redis"
            redis_fill(key, n)
            results = [
                timed_drain("redis-py XRANGE pages (yardstick)", lambda: redis_drain(key), n),
                connectql_read(worker, "rin", "redis", f"url = '{REDIS_URL}', key = '{key}'", n),
            ]
            console.print(table(f"redis: {n:,} messages of one stream key", results))
            failed |= any(r.check != "ok" for r in results)
            import redis

            redis.Redis.from_url(REDIS_URL).delete(key)
        if "nats" in brokers:
            stream, subject = tag.upper(), f"{tag}.m"
            nats_fill(stream, subject, n)
            try:
                results = [
                    timed_drain(
                        "nats-py pull consumer (yardstick)", lambda: nats_drain(stream, subject), n
                    ),
                    connectql_read(
                        worker, "nin", "nats", f"url = '{NATS_URL}', subject = '{subject}'", n
                    ),
                ]
            finally:
                nats_drop(stream)
            console.print(table(f"nats: {n:,} messages of one JetStream subject", results))
            failed |= any(r.check != "ok" for r in results)
        if "mqtt" in brokers:
            with mosquitto(tmp, args.mqtt_inflight) as url:
                topic, ids = f"{tag}/m", [f"{tag}-y", f"{tag}-c"]
                mqtt_sessions(url, topic, ids)
                mqtt_fill(url, topic, n)
                options = f"url = '{url}', topic = '{topic}', qos = 1, 'client.id' = '{ids[1]}'"
                results = [
                    timed_drain(
                        "paho-mqtt subscriber, QoS 1 (yardstick)",
                        lambda: mqtt_drain(url, ids[0], n),
                        n,
                    ),
                    connectql_follow(worker, "min", "mqtt", options, n),
                ]
            inflight = args.mqtt_inflight or "no limit"
            title = f"mqtt: {n:,} messages queued for a persistent session (inflight {inflight})"
            console.print(table(title, results))
            failed |= any(r.check != "ok" for r in results)
        if "rabbitmq" in brokers:
            queues = rabbit_fill(tag, n)
            try:
                yard, ours, stream = queues
                results = [
                    timed_drain(
                        "pika consumer, classic queue (yardstick)",
                        lambda: rabbit_drain(yard, n, stream=False),
                        n,
                    ),
                    connectql_follow(
                        worker, "rcin", "rabbitmq",
                        f"url = '{RABBIT_URL}', queue = '{ours}', 'queue.type' = 'classic'", n,
                    ),
                    timed_drain(
                        "pika consumer, stream queue (yardstick)",
                        lambda: rabbit_drain(stream, n, stream=True),
                        n,
                    ),
                    connectql_read(
                        worker, "rsin", "rabbitmq",
                        f"url = '{RABBIT_URL}', queue = '{stream}', 'queue.type' = 'stream'", n,
                    ),
                ]  # fmt: skip
            finally:
                rabbit_drop(tag, queues)
            console.print(table(f"rabbitmq: {n:,} persistent messages per queue", results))
            failed |= any(r.check != "ok" for r in results)
    finally:
        worker.close()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            console.print(f"kept {tmp}")
    console.print(f"load at the end: {load()}")
    return 1 if failed else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
