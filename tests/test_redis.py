"""The redis connector against the machine's Redis (127.0.0.1:6379): the source reads each entry
of several stream keys once across stops and a replayed batch, with the message columns; the
sink adds each row once across a replay; SQL through a worker (dead letters, inferred schema,
redis to redis); and a `connectql run` worker killed with SIGKILL mid-way loses and repeats
nothing."""

from __future__ import annotations

import io
import json
import subprocess
import uuid
from collections import Counter
from datetime import datetime, timezone
from decimal import Decimal

import fastavro
import pyarrow as pa
import pytest
import redis

from connectql.connectors.redis.sink import PROGRESS, RedisSink
from connectql.connectors.redis.source import RedisSource
from connectql.errors import ConnectQLError, ValidationError
from connectql.toolkit.testing import SinkRun, SourceRun
from tests.crash import killed_once, resumed_until
from tests.helpers import read_parquet_rows, run, wait_until
from tests.servers import free_port

pytestmark = pytest.mark.spark

URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
def keys():
    """A prefix for this test's stream keys; every key under it is deleted afterwards, and the
    progress of the testing helpers' sinks (connector '', writer 'test') before and after."""
    client = redis.Redis.from_url(URL)
    prefix = f"cq-test-{uuid.uuid4().hex[:8]}"
    client.delete(PROGRESS.format(connector=""))
    yield prefix
    for key in client.scan_iter(f"{prefix}*"):
        client.delete(key)
    client.delete(PROGRESS.format(connector=""))
    client.close()


def add(key: str, ids: range, **extra) -> list[str]:
    """JSON messages {"id", "name"} added to `key`, with a message key and a header; their
    entry ids."""
    client = redis.Redis.from_url(URL)
    with client.pipeline(transaction=False) as pipe:
        for i in ids:
            value = json.dumps({"id": i, "name": f"n{i}"})
            pipe.xadd(key, {"value": value, "key": f"k{i}", "origin": key, **extra})
        return [e.decode() for e in pipe.execute()]


def entries(key: str) -> list[tuple[str, dict[str, str]]]:
    client = redis.Redis.from_url(URL, decode_responses=True)
    return client.xrange(key)


def test_a_source_reads_each_entry_once_across_stops_and_a_replay(spark, keys, tmp_path):
    a, b = f"{keys}-a", f"{keys}-b"
    ids_a, ids_b = add(a, range(0, 2500)), add(b, range(2500, 3000))
    run = SourceRun(RedisSource, {"key": f"{a}, {b}", "url": URL}, tmp_path, max_records=700)
    run.batches(2)
    add(a, range(3000, 3200))  # added while no query runs
    run.to_end()
    run.replay_last_batch()
    rows = run.rows()
    assert Counter(r["id"] for r in rows) == Counter(range(3200))  # each once
    first = min(rows, key=lambda r: (r["__topic"], r["__position"]))
    assert first["__topic"] == a and first["__position"] == ids_a[0]
    assert first["__key"] == "k0" and first["name"] == "n0"
    assert dict(first["__headers"]) == {"origin": a}
    assert first["__partition"] is None
    ms = int(ids_a[0].split("-")[0])
    assert int(first["__timestamp"].timestamp() * 1000) == ms  # the entry id's time
    assert {r["__position"] for r in rows if r["__topic"] == b} == set(ids_b)


def test_a_source_starting_at_latest_reads_only_later_entries(spark, keys, tmp_path):
    key = f"{keys}-s"
    add(key, range(5))
    options = {"key": key, "url": URL, "start": "latest", "schema": "id BIGINT, name STRING"}
    run = SourceRun(RedisSource, options, tmp_path)
    run.to_end()  # the checkpoint starts after the five
    add(key, range(5, 8))
    run.to_end()
    assert sorted(r["id"] for r in run.rows()) == [5, 6, 7]


def test_a_sink_adds_each_row_once_across_a_replay(spark, keys, tmp_path):
    out = f"{keys}-out"
    schema = pa.schema(
        [("id", pa.int64()), ("name", pa.string()), ("__key", pa.string()),
         ("__headers", pa.map_(pa.string(), pa.string()))]
    )  # fmt: skip
    run = SinkRun(RedisSink, {"key": out, "url": URL}, tmp_path, schema)
    for start in (0, 100, 200):
        run.add(
            [{"id": i, "name": f"n{i}", "__key": f"k{i}", "__headers": [("h", str(i))]}
             for i in range(start, start + 100)]
        )  # fmt: skip
    run.batches(1)
    run.to_end()
    last = run.replay_last_batch()  # 1 or 2: a batch cut short by the stop may be folded
    written = entries(out)  # each row once (two batches folded into one may come in any order)
    assert Counter(json.loads(f["value"])["id"] for _id, f in written) == Counter(range(300))
    assert written[7][1] == {"value": '{"id": 7, "name": "n7"}', "key": "k7", "h": "7"}
    progress = redis.Redis.from_url(URL).hgetall(PROGRESS.format(connector=""))
    assert int(progress[b"test"]) == last  # the writer's last batch id, recorded with its entries


def test_a_source_with_its_own_fields_reads_text_or_bytes_values(spark, keys, tmp_path):
    key = f"{keys}-f"
    client = redis.Redis.from_url(URL)
    client.xadd(key, {"body": "héllo", "k": "x", "tag": b"\xff"})
    client.xadd(key, {"body": b"\x00\xfe"})
    fields = {"key": key, "url": URL, "value.field": "body", "key.field": "k"}
    text = SourceRun(RedisSource, {**fields, "format": "text"}, tmp_path / "text")
    with pytest.raises(AssertionError, match="not UTF-8 text"):  # the second is no text
        text.to_end()
    as_bytes = SourceRun(RedisSource, {**fields, "format": "bytes"}, tmp_path / "bytes")
    as_bytes.to_end()
    rows = sorted(as_bytes.rows(), key=lambda r: r["__position"])
    assert [r["value"] for r in rows] == ["héllo".encode(), b"\x00\xfe"]
    assert rows[0]["__key"] == "x" and dict(rows[0]["__headers"]) == {"tag": "base64:/w=="}
    assert rows[1]["__key"] is None and rows[1]["__headers"] == []


def test_a_sink_routes_rows_by_a_column_trims_and_writes_text(spark, keys, tmp_path):
    schema = pa.schema([("dest", pa.string()), ("value", pa.string()), ("__key", pa.string())])
    options = {"key.column": "dest", "url": URL, "format": "text", "maxlen": 100,
               "value.field": "body", "key.field": "k"}  # fmt: skip
    run = SinkRun(RedisSink, options, tmp_path, schema)
    rows = [{"dest": f"{keys}-{i % 2}", "value": f"v{i}", "__key": None} for i in range(1000)]
    run.add(rows)
    run.to_end()
    client = redis.Redis.from_url(URL)
    assert 100 <= client.xlen(f"{keys}-0") < 500  # MAXLEN ~ 100: trimmed by whole nodes
    last = entries(f"{keys}-1")[-1][1]
    assert last == {"body": "v999"}  # no key: no key field
    with pytest.raises(ValidationError, match="give one of key and key.column"):
        SinkRun(RedisSink, {"url": URL}, tmp_path / "x", schema)


def test_a_user_and_password_reach_an_acl_server_and_stay_secret(worker, keys):
    client = redis.Redis.from_url(URL)
    user, password = f"{keys}-user", "pw-" + uuid.uuid4().hex
    client.acl_setuser(user, enabled=True, passwords=[f"+{password}"], keys=["*"],
                       commands=["+@all"])  # fmt: skip
    try:
        add(f"{keys}-in", range(3))
        auth = f"url = '{URL}', user = '{user}', password = '{password}'"
        run(
            worker,
            f"""
            CREATE SOURCE CONNECTOR rin FROM redis INTO msgs WITH ({auth}, key = '{keys}-in',
              'poll.interval.ms' = 50);
            CREATE SINK CONNECTOR rout TO redis FROM msgs WITH ({auth}, key = '{keys}-out');
            """,
        )
        wait_until(lambda: len(entries(f"{keys}-out")) == 3, 120, what="the copies")
        shown = str([r.rows for r in run(worker, "DESCRIBE CONNECTOR rin")])
        assert user in shown and password not in shown
        wrong = f"url = '{URL}', user = '{user}', password = 'nope'"
        with pytest.raises(ConnectQLError) as refused:
            run(worker, f"CREATE SINK CONNECTOR bad TO redis FROM msgs WITH ({wrong}, key = 'x')")
        assert "nope" not in str(refused.value)
    finally:
        client.acl_deluser(user)


def test_redis_to_redis_through_sql_with_dead_letters(worker, keys):
    """An inferred schema; an entry that does not parse and one without the value field go to
    the dead-letter stream; the sink writes the rest, in order, with their keys and headers;
    DROP removes the sink's progress hash."""
    src, out = f"{keys}-in", f"{keys}-copy"
    add(src, range(10))
    client = redis.Redis.from_url(URL)
    client.xadd(src, {"value": "not json"})
    client.xadd(src, {"other": "field"})
    add(src, range(10, 12))
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR rin FROM redis INTO msgs WITH (url = '{URL}', key = '{src}',
          'errors.tolerance' = 'all', 'errors.deadletter.stream' = 'msgs_dead');
        CREATE SINK CONNECTOR rout TO redis FROM msgs WITH (url = '{URL}', key = '{out}');
        """,
    )
    wait_until(lambda: len(entries(out)) >= 12, 120, what="the copies")
    copied = entries(out)
    assert [json.loads(f["value"])["id"] for _id, f in copied] == list(range(12))
    assert copied[3][1]["key"] == "k3" and copied[3][1]["origin"] == src
    home = worker.home
    letters = wait_until(  # a batch's dead letters are committed after its stream's rows
        lambda: read_parquet_rows(
            home / "streams/msgs_dead", "SELECT error_class, raw_record FROM t ORDER BY 2"
        ),
        30,
        what="the dead letters",
    )
    assert letters == [("MALFORMED_RECORD", "not json"), ("MISSING_VALUE", "other=field")]
    shown = {r[0]: r[1] for r in run(worker, "DESCRIBE STREAM msgs")[0].rows}
    assert shown["column id"] == "long" and shown["column __headers"] == "map<string,string>"
    run(worker, "DROP CONNECTOR rout")
    assert not client.exists(PROGRESS.format(connector="rout"))


KILL_TOTAL = 30_000
KILL_SCRIPT = """
CREATE SOURCE CONNECTOR IF NOT EXISTS rin FROM redis INTO msgs WITH (url = '{url}',
  key = '{src}', schema = 'id BIGINT, name STRING', 'batch.max.records' = 2000);
CREATE SINK CONNECTOR IF NOT EXISTS rout TO redis FROM msgs WITH (url = '{url}', key = '{out}');
"""


@pytest.mark.scenario  # CI is near its 35 minutes; nats -> redis's kill test covers the sink
def test_a_killed_worker_copies_every_entry_once(tmp_path, keys):
    """Redis -> stream -> Redis in a `connectql run` worker killed with SIGKILL while it copies:
    after a restart every entry is in the stream and in the copy exactly once."""
    src, out = f"{keys}-in", f"{keys}-out"
    add(src, range(KILL_TOTAL))
    home, logs = tmp_path / "home", tmp_path / "logs"
    logs.mkdir()
    script = tmp_path / "copy.sql"
    script.write_text(KILL_SCRIPT.format(url=URL, src=src, out=out))
    client = redis.Redis.from_url(URL)

    def some_copied():
        n = client.xlen(out)
        assert n < KILL_TOTAL, "the copy finished before the kill: make it bigger"
        return n >= 4000

    killed_once(home, script, logs, some_copied)
    resumed_until(home, script, logs, lambda: client.xlen(out) >= KILL_TOTAL, "every copy")
    ids = [json.loads(f["value"])["id"] for _id, f in entries(out)]
    assert Counter(ids) == Counter(range(KILL_TOTAL))  # none lost, none twice
    stream = read_parquet_rows(home / "streams/msgs", "SELECT count(*), count(DISTINCT id) FROM t")
    assert stream == [(KILL_TOTAL, KILL_TOTAL)]


def test_a_redis_server_that_goes_away_is_retried_and_both_connectors_resume(worker, tmp_path):
    """A private redis-server (append-only file in tmp_path) stopped mid-copy: the source shows
    RESTARTING naming it; started again on the same port and file, both connectors resume and
    every entry arrives once (the sink's progress hash came back with the data)."""
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "yes", "--appendfsync", "always", "--dir", str(tmp_path)]  # fmt: skip

    def start() -> subprocess.Popen:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: _answers(url), 30, what="the private redis-server")
        return proc

    proc = start()
    try:
        client = redis.Redis.from_url(url)
        for i in range(100):
            client.xadd("rin", {"value": json.dumps({"id": i})})
        retry = "'errors.retry.backoff.ms' = 300, 'errors.retry.max' = 50"
        run(
            worker,
            f"""
            CREATE SOURCE CONNECTOR rin FROM redis INTO rmsgs WITH (url = '{url}', key = 'rin',
              schema = 'id BIGINT', 'poll.interval.ms' = 50, {retry});
            CREATE SINK CONNECTOR rout TO redis FROM rmsgs WITH (url = '{url}', key = 'rout',
              {retry});
            """,
        )

        def copied() -> list[int]:
            found = redis.Redis.from_url(url).xrange("rout")
            return sorted(json.loads(fields[b"value"])["id"] for _id, fields in found)

        wait_until(lambda: copied() == list(range(100)), 120, what="the first copy")
        proc.terminate()
        proc.wait(timeout=30)
        wait_until(lambda: _state(worker, "rin") == "RESTARTING", 60, what="rin RESTARTING")
        error = worker.catalog.get_connector("rin").last_error
        assert f"127.0.0.1:{port}" in error, error
        proc = start()  # the same append-only file: the streams and the progress are back
        client = redis.Redis.from_url(url)
        for i in range(100, 150):
            client.xadd("rin", {"value": json.dumps({"id": i})})
        wait_until(lambda: copied() == list(range(150)), 180, what="every entry once after")
        for name in ("rin", "rout"):
            wait_until(lambda n=name: _state(worker, n) == "RUNNING", 60, what=f"{name} RUNNING")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def _state(worker, name: str) -> str:
    return worker.catalog.get_connector(name).state


READING = {"type": "record", "name": "reading", "fields": [
    {"name": "id", "type": "long"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "level", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6,
                               "scale": 2}},
    {"name": "note", "type": ["null", "string"]},
]}  # fmt: skip


def test_a_redis_source_reads_avro_values_with_the_toolkits_format(spark, keys, tmp_path):
    """format = 'avro' is the toolkit's value format, not kafka's: a redis source reads Avro
    datums (Confluent's header skipped) into their fields' columns."""
    src = f"{keys}-avro"
    parsed = fastavro.parse_schema(READING)
    at = datetime(2026, 12, 7, 8, 30, 0, 250000, tzinfo=timezone.utc)
    client = redis.Redis.from_url(URL)
    for i in range(3):
        datum = io.BytesIO()
        record = {"id": i, "at": at, "level": Decimal(f"{i}.5"), "note": None if i else "first"}
        fastavro.schemaless_writer(datum, parsed, record)
        client.xadd(src, {"value": b"\x00\x00\x00\x00\x01" + datum.getvalue(), "key": f"k{i}"})
    options = {"key": src, "url": URL, "format": "avro", "avro.schema": json.dumps(READING),
               "avro.confluent.header": "true"}  # fmt: skip
    source = SourceRun(RedisSource, options, tmp_path / "in")
    source.to_end()
    rows = sorted(source.rows(), key=lambda r: r["id"])
    ms = int(at.timestamp() * 1000)
    assert [(r["id"], r["at"].timestamp() * 1000, r["level"], r["note"], r["__key"])
            for r in rows] == [
        (0, ms, Decimal("0.50"), "first", "k0"), (1, ms, Decimal("1.50"), None, "k1"),
        (2, ms, Decimal("2.50"), None, "k2"),
    ]  # fmt: skip
