"""Issue 53's broker bench: N small JSON messages put in a Redis stream and a JetStream subject,
then read into a connectql stream by the `redis` and `nats` sources (`run = 'once'` on a warm
worker) against the broker's own Python client draining the same messages as fast as it can (the
yardstick: XRANGE pages; a pull consumer's fetches), both parsing every message. Each stream is
checked by value (count, distinct ids, sum of ids, every name) and messages/s reported for
both."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import sys
import tempfile
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


# ------------------------------------------------------------------------------ connectql
def stream_check(worker, stream: str, n: int) -> str:
    from connectql.catalog.streams import committed_files

    files = committed_files(worker.home / "streams" / stream)
    if not files:
        return "FAIL: nothing in the stream"
    got = (
        duckdb.connect()
        .execute(
            f"SELECT count(*), count(DISTINCT id), sum(id), count(*) FILTER (WHERE name <> 'n' || id)"
            f" FROM read_parquet({[str(f) for f in files]!r})"
        )
        .fetchone()
    )
    want = (n, n, n * (n - 1) // 2, 0)
    return "ok" if tuple(got) == want else f"FAIL: {got} != {want}"


def connectql_read(worker, name: str, kind: str, options: str, n: int) -> Result:
    script = (
        f"CREATE SOURCE CONNECTOR {name} FROM {kind} INTO {name}_s WITH ({options},"
        " schema = 'id BIGINT, name STRING, qty INT', run = 'once');"
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
    p.add_argument("--broker", choices=["redis", "nats", "both"], default="both")
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--keep", action="store_true")
    args = p.parse_args(argv)
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
        if args.broker in ("redis", "both"):
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
        if args.broker in ("nats", "both"):
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
