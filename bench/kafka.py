"""Issue 50's Kafka bench: N JSON messages of ~150 bytes in a topic of 3 partitions on a private
Tansu broker, copied into a PostgreSQL table by connectql (a `kafka` source and a `postgres`
sink, `run = 'once'`, on a warm worker) against the floors measured in the same run: a bare
confluent-kafka consumer reading (and parsing) every message, and a consumer's values piped
into `psql \\copy` (the JSON lands in one jsonb column). The pipe's consumer is a bare
confluent-kafka one printing each value (`python -m bench.kafka --cat`), not Debian's `kcat`:
kcat 1.7's librdkafka is dropped by Tansu at its ApiVersion request. Then the stream connectql
filled is written to a new topic by the `kafka` sink (exactly-once and at-least-once): its
messages/s. Every result is checked by value (count, distinct ids, sum of ids)."""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
from rich.console import Console

from bench.brokers import Result, table
from bench.common import load

console = Console(width=140)
PG = "host=127.0.0.1 user=postgres"
DATABASE = "cqbench_kafka"
PARTITIONS = 3


def message(i: int) -> bytes:
    """~150 bytes of JSON."""
    return json.dumps(
        {
            "id": i,
            "customer": f"customer-{i % 9973:05d}",
            "amount": round(i * 0.37 % 1000, 2),
            "status": ("new", "paid", "shipped")[i % 3],
            "note": "x" * 40,
            "created_at": "2026-12-07T10:00:00Z",
        }  # fmt: skip
    ).encode()


def fill(servers: str, topic: str, n: int) -> float:
    from confluent_kafka import Producer

    t0 = time.perf_counter()
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 20, "batch.size": 1_000_000})
    for i in range(n):
        while True:
            try:
                producer.produce(topic, message(i), partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    return time.perf_counter() - t0


def consume_all(servers: str, topic: str, n: int) -> Result:
    """The floor: a bare consumer assigned every partition, each message parsed."""
    from confluent_kafka import Consumer, TopicPartition

    t0 = time.perf_counter()
    c = Consumer({"bootstrap.servers": servers, "group.id": "bench", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    count = total = 0
    idle = time.perf_counter()
    while count < n and time.perf_counter() - idle < 5:
        for m in c.consume(10_000, timeout=0.5):
            if not m.error():
                total += json.loads(m.value())["id"]
                count += 1
                idle = time.perf_counter()
    c.close()
    seconds = time.perf_counter() - t0
    ok = (count, total) == (n, n * (n - 1) // 2)
    return Result(
        "confluent-kafka consumer (floor)",
        seconds,
        n,
        "ok" if ok else f"FAIL: {count} messages, sum {total}",
    )


def cat(servers: str, topic: str, n: int) -> None:
    """Every value of the topic on stdout, a line each (kcat -C -e's job)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": servers, "group.id": "bench", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out, count, idle = sys.stdout.buffer, 0, time.perf_counter()
    while count < n and time.perf_counter() - idle < 5:
        got = [m.value() for m in c.consume(10_000, timeout=0.5) if not m.error()]
        if got:
            out.write(b"\n".join(got) + b"\n")
            count += len(got)
            idle = time.perf_counter()
    out.flush()
    c.close()


def piped(servers: str, topic: str, n: int) -> Result:
    """A consumer's values into `psql \\copy` of one jsonb column."""
    info = f"{PG} dbname={DATABASE}"
    sql(info, "DROP TABLE IF EXISTS kcat_raw; CREATE TABLE kcat_raw (doc jsonb)")
    t0 = time.perf_counter()
    kcat = subprocess.Popen([sys.executable, "-m", "bench.kafka", "--cat", servers, topic, str(n)],
                            stdout=subprocess.PIPE)  # fmt: skip
    psql = subprocess.run(["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-d", DATABASE,
                           "-c", "\\copy kcat_raw (doc) FROM STDIN"], stdin=kcat.stdout,
                          capture_output=True, text=True)  # fmt: skip
    kcat.wait()
    seconds = time.perf_counter() - t0
    got = sql(
        info,
        "SELECT count(*), count(DISTINCT (doc->>'id')::bigint), sum((doc->>'id')::bigint) FROM kcat_raw",
    )[0]
    check = "ok" if tuple(got) == (n, n, n * (n - 1) // 2) else f"FAIL: {got} {psql.stderr[-200:]}"
    return Result("consumer | psql \\copy (pipe)", seconds, n, check)


def sql(info: str, statement: str):
    with psycopg.connect(info, autocommit=True) as c:
        cur = c.execute(statement)
        return cur.fetchall() if cur.description else None


def run_once(worker, script: str) -> float:
    t0 = time.perf_counter()
    for _stmt, _result in worker.run_script(script):
        pass
    worker.wait_for_once()
    return time.perf_counter() - t0


COLUMNS = "id, customer, amount, status, note, created_at"


def connectql_copy(worker, servers: str, topic: str, n: int, values_only: bool = False) -> Result:
    """The topic into a PostgreSQL table through a stream; `values_only`: the sink's AS SELECT
    keeps the values' columns alone, as the pipe copies the values alone (not the message's
    key, headers, topic, partition, offset and time)."""
    conn = f"host = '127.0.0.1', user = 'postgres', database = '{DATABASE}'"
    tag = "_values" if values_only else ""
    select = f"AS SELECT {COLUMNS} FROM korders{tag}" if values_only else f"FROM korders{tag}"
    seconds = run_once(
        worker,
        f"""CREATE SOURCE CONNECTOR kin{tag} FROM kafka INTO korders{tag} WITH (
          'bootstrap.servers' = '{servers}', topic = '{topic}', run = 'once',
          schema = 'id BIGINT, customer STRING, amount DOUBLE, status STRING, note STRING,
          created_at TIMESTAMP');
        CREATE SINK CONNECTOR kpg{tag} TO postgres {select} WITH ({conn}, table = 'korders{tag}',
          run = 'once');""",
    )
    got = sql(
        f"{PG} dbname={DATABASE}",
        f"SELECT count(*), count(DISTINCT id), sum(id) FROM korders{tag}",
    )[0]
    states = {c: worker.catalog.get_connector(c).state for c in (f"kin{tag}", f"kpg{tag}")}
    ok = tuple(got) == (n, n, n * (n - 1) // 2) and set(states.values()) == {"FINISHED"}
    what = "the values' columns (AS SELECT)" if values_only else "with the message columns"
    return Result(
        f"connectql kafka -> postgres, run once, {what}",
        seconds,
        n,
        "ok" if ok else f"FAIL: {got} {states}",
    )


def connectql_sink(worker, servers: str, n: int, delivery: str) -> Result:
    from tests.kafkaserver import records_of

    name = f"kout_{delivery.replace('-', '_')}"
    topic = f"bench-out-{delivery}"
    seconds = run_once(
        worker,
        f"""CREATE SINK CONNECTOR {name} TO kafka FROM korders WITH ('bootstrap.servers' = '{servers}',
          topic = '{topic}', 'auto.create' = true, 'topic.partitions' = {PARTITIONS},
          delivery = '{delivery}', run = 'once');""",
    )
    ids = [json.loads(m.value())["id"] for m in records_of(servers, topic, settle_s=2.0)]
    ok = (len(ids), len(set(ids)), sum(ids)) == (n, n, n * (n - 1) // 2)
    state = worker.catalog.get_connector(name).state
    check = "ok" if ok and state == "FINISHED" else f"FAIL: {len(ids)} messages, {state}"
    return Result(f"connectql stream -> kafka sink ({delivery})", seconds, n, check)


def main(argv: list[str] | None = None) -> int:
    from tests.kafkaserver import Tansu

    p = argparse.ArgumentParser(prog="bench.kafka", description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=1_000_000)
    p.add_argument("--keep", action="store_true")
    p.add_argument("--cat", nargs=3, metavar=("SERVERS", "TOPIC", "N"), help="print the values")
    args = p.parse_args(argv)
    if args.cat:
        cat(args.cat[0], args.cat[1], int(args.cat[2]))
        return 0
    n = args.messages
    tmp = Path(tempfile.mkdtemp(prefix="connectql-kafka-"))
    broker = Tansu().start()
    sql(f"{PG} dbname=postgres", f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
    sql(f"{PG} dbname=postgres", f"CREATE DATABASE {DATABASE}")
    from connectql.worker.worker import Worker

    worker = Worker(tmp / "home")
    try:
        broker.create("orders", PARTITIONS)
        filled = fill(broker.servers, "orders", n)
        console.print(f"kafka: {n:,} JSON messages (~150 bytes) in {PARTITIONS} partitions on Tansu,"
                      f" produced in {filled:.1f} s; load {load()}")  # fmt: skip
        run_once(
            worker,
            "CREATE SOURCE CONNECTOR warm FROM datagen INTO warm_s WITH ('rows.total' = 1000, run = 'once');",
        )
        results = [
            consume_all(broker.servers, "orders", n),
            piped(broker.servers, "orders", n),
            connectql_copy(worker, broker.servers, "orders", n),
            connectql_copy(worker, broker.servers, "orders", n, values_only=True),
        ]
        console.print(table(f"kafka -> postgres: {n:,} messages", results))
        sinks = [
            connectql_sink(worker, broker.servers, n, d) for d in ("exactly-once", "at-least-once")
        ]
        console.print(table(f"stream -> kafka: {n:,} rows", sinks))
        pipe, ours, values = results[1].seconds, results[2].seconds, results[3].seconds
        console.print(
            f"connectql / pipe: {ours / pipe:.2f}x, the values' columns alone {values / pipe:.2f}x"
            f" (goal: at most 2x); load at the end: {load()}"
        )
        return 1 if any(r.check != "ok" for r in results + sinks) else 0
    finally:
        worker.close()
        broker.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
