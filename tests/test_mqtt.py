"""The mqtt connector against Mosquitto: the source's persistent session and spool (a message
acknowledged only once it is spooled; a stop loses nothing, a replayed batch reads the spool
again); the sink publishing rows (topic or topic.column, text values); SQL through a worker with
dead letters; and a `connectql run` worker killed with SIGKILL while messages arrive, against a
private Mosquitto that queues a session's messages without limit: every message at least once,
the duplicates counted."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import uuid
from collections import Counter

import paho.mqtt.client as mqtt
import pyarrow as pa
import pytest

from connectql.connectors.mqtt.sink import MqttSink
from connectql.connectors.mqtt.source import MqttSource
from connectql.errors import ConnectQLError
from connectql.toolkit.testing import SinkRun, SourceRun
from tests import servers
from tests.crash import kill_and_count
from tests.helpers import read_parquet_rows, run, wait_until
from tests.servers import free_port

pytestmark = pytest.mark.spark

URL = "mqtt://127.0.0.1:1883"


def client(url: str = URL, client_id: str = "", clean: bool = True) -> mqtt.Client:
    host, port = url.removeprefix("mqtt://").split(":")
    c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean)
    c.connect(host, int(port))
    c.loop_start()
    return c


def publish(topic: str, ids, url: str = URL) -> None:
    """JSON messages {"id", "name"} published with QoS 1, each acknowledged."""
    c = client(url)
    try:
        sent = [c.publish(topic, json.dumps({"id": i, "name": f"n{i}"}), 1) for i in ids]
        for info in sent:
            info.wait_for_publish(30)
    finally:
        c.disconnect()
        c.loop_stop()


def session(topic: str, client_id: str, url: str = URL) -> None:
    """The persistent session a source will use, made now: the broker keeps what is published
    to `topic` from here on for it."""
    c = client(url, client_id, clean=False)
    done = threading.Event()
    c.on_subscribe = lambda *_a: done.set()
    c.subscribe(topic, 1)
    assert done.wait(10)
    c.disconnect()
    c.loop_stop()


@pytest.fixture
def topic():
    return f"cq/{uuid.uuid4().hex[:8]}"


def test_a_source_spools_each_message_once_across_stops_and_a_replay(spark, topic, tmp_path):
    client_id = f"cq-{uuid.uuid4().hex[:8]}"
    session(f"{topic}/#", client_id)
    options = {"topic": f"{topic}/#", "client.id": client_id, "schema": "id BIGINT, name STRING"}
    run = SourceRun(MqttSource, options, tmp_path, max_records=300)
    publish(f"{topic}/a", range(1000))

    def read_all() -> bool:
        run.to_end()  # each run spools what arrived and reads what the spool held at its start
        return len(run.rows()) >= 1000

    run.batches(2)
    wait_until(read_all, 120, what="every message")
    run.replay_last_batch()
    rows = run.rows()
    assert Counter(r["id"] for r in rows) == Counter(range(1000))  # a clean stop repeats none
    assert {r["__topic"] for r in rows} == {f"{topic}/a"}
    assert sorted(int(r["__position"]) for r in rows) == list(range(1000))  # spool positions
    spooled = list((tmp_path / "checkpoint" / "mqtt-spool").glob("*.seg"))
    assert len(spooled) <= 1  # committed segments are deleted (the last may stay)


def test_a_sink_publishes_text_by_topic_column(spark, topic, tmp_path):
    got: list[tuple[str, bytes]] = []
    listener = client()
    listener.on_message = lambda _c, _u, m: got.append((m.topic, m.payload))
    listener.subscribe(f"{topic}/#", 1)
    time.sleep(0.5)
    try:
        schema = pa.schema([("to", pa.string()), ("value", pa.string())])
        options = {"topic.column": "to", "format": "text", "qos": 2, "retain": False}
        run = SinkRun(MqttSink, options, tmp_path, schema)
        run.add([{"to": f"{topic}/{i % 2}", "value": f"v{i}"} for i in range(50)])
        run.to_end()
        wait_until(lambda: len(got) >= 50, 30, what="the messages")
    finally:
        listener.disconnect()
        listener.loop_stop()
    assert sorted(got) == sorted((f"{topic}/{i % 2}", f"v{i}".encode()) for i in range(50))


def test_mqtt_to_mqtt_through_sql_with_dead_letters(worker, topic):
    got: list[bytes] = []
    listener = client()
    listener.on_message = lambda _c, _u, m: got.append(m.payload)
    listener.subscribe(f"{topic}/out", 1)
    try:
        client_id = f"cq-sql-{topic.rsplit('/', 1)[-1]}"
        session(f"{topic}/in", client_id)  # the broker keeps what is published from now on
        run(
            worker,
            f"""
            CREATE SOURCE CONNECTOR min FROM mqtt INTO msgs WITH (url = '{URL}',
              topic = '{topic}/in', schema = 'id BIGINT, name STRING', 'client.id' = '{client_id}',
              'errors.tolerance' = 'all', 'errors.deadletter.stream' = 'msgs_dead');
            CREATE SINK CONNECTOR mout TO mqtt FROM msgs WITH (url = '{URL}', topic = '{topic}/out');
            """,
        )
        publish(f"{topic}/in", range(5))
        c = client()
        c.publish(f"{topic}/in", b"not json", 1).wait_for_publish(10)
        c.disconnect()
        c.loop_stop()
        wait_until(lambda: len(got) >= 5, 120, what="the copies")
    finally:
        listener.disconnect()
        listener.loop_stop()
    assert sorted(json.loads(p)["id"] for p in got) == list(range(5))
    letters = wait_until(
        lambda: read_parquet_rows(worker.home / "streams/msgs_dead", "SELECT raw_record FROM t"),
        30,
        what="the dead letter",
    )
    assert letters == [("not json",)]
    plugins = {r[0]: r for r in run(worker, "SHOW CONNECTOR PLUGINS")[0].rows}
    assert "at-least-once" in plugins["mqtt"]


def mosquitto(tmp_path, extra: str = "allow_anonymous true\n"):
    """A Mosquitto of the test's own (its url), its sessions persisted under tmp_path."""
    yield from servers.mosquitto(
        tmp_path, f"{extra}persistence true\npersistence_location {tmp_path}/\n"
    )


@pytest.fixture
def private_mosquitto(tmp_path):
    yield from mosquitto(tmp_path)


@pytest.fixture
def mosquitto_with_users(tmp_path):
    """(url, password) of a Mosquitto that lets only user 'app' in."""
    password = "pw-" + uuid.uuid4().hex
    users = tmp_path / "passwords"
    subprocess.run(["mosquitto_passwd", "-c", "-b", str(users), "app", password], check=True)
    users.chmod(0o600)
    for url in mosquitto(tmp_path, f"allow_anonymous false\npassword_file {users}\n"):
        yield url, password


def test_a_user_and_password_reach_a_broker_that_asks_and_retain_keeps_the_last(
    worker, mosquitto_with_users, topic
):
    url, password = mosquitto_with_users
    auth = f"url = '{url}', user = 'app', password = '{password}'"
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR gen FROM datagen INTO nums WITH ('rows.total' = 20,
          fields = 'id BIGINT SEQUENCE, name STRING');
        CREATE SINK CONNECTOR mout TO mqtt FROM nums WITH ({auth}, topic = '{topic}/last',
          retain = true, qos = 1);
        """,
    )
    written = "SELECT rows_written FROM connectors WHERE name = 'mout'"
    wait_until(lambda: (worker.catalog.query(written)[1][0][0] or 0) >= 20, 120, what="the sink")
    got: list[bytes] = []
    late = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2)
    late.username_pw_set("app", password)
    late.on_message = lambda _c, _u, m: got.append(m.payload)
    host, port = url.removeprefix("mqtt://").split(":")
    late.connect(host, int(port))
    late.loop_start()
    late.subscribe(f"{topic}/last", 1)  # after the publishes: only the retained one comes
    try:
        wait_until(lambda: got, 30, what="the retained message")
    finally:
        late.disconnect()
        late.loop_stop()
    assert json.loads(got[0])["id"] in range(20) and len(got) == 1
    shown = str([r.rows for r in run(worker, "DESCRIBE CONNECTOR mout")])
    assert "app" in shown and password not in shown
    wrong = f"url = '{url}', user = 'app', password = 'nope-{password[:4]}'"
    with pytest.raises(ConnectQLError, match="refused the connection") as refused:
        run(
            worker,
            f"CREATE SOURCE CONNECTOR bad FROM mqtt INTO x WITH ({wrong}, topic = 't',"
            " format = 'text')",
        )
    assert f"nope-{password[:4]}" not in str(refused.value)


KILL_TOTAL = 6_000
KILL_SCRIPT = """
CREATE SOURCE CONNECTOR IF NOT EXISTS min FROM mqtt INTO msgs WITH (url = '{url}',
  topic = '{topic}', 'client.id' = '{client_id}', schema = 'id BIGINT, name STRING');
"""


@pytest.mark.scenario  # in CI's full run its first worker once met Spark's CANNOT_OPEN_SOCKET
def test_a_killed_worker_loses_no_message(tmp_path, private_mosquitto, topic):
    """Messages published before and after a `connectql run` worker is killed with SIGKILL and
    started again: each is in the stream at least once; duplicates are only of messages the
    broker sent again because their acknowledgement did not reach it."""
    url, client_id = private_mosquitto, f"cq-{uuid.uuid4().hex[:8]}"
    session(topic, client_id, url)
    home, logs = tmp_path / "home", tmp_path / "logs"
    logs.mkdir()
    script = tmp_path / "in.sql"
    script.write_text(KILL_SCRIPT.format(url=url, topic=topic, client_id=client_id))
    stream = home / "streams/msgs"

    def ids() -> list[int]:
        return [r[0] for r in read_parquet_rows(stream, "SELECT id FROM t") or []]

    # half published when the first worker starts, half once the second has: the kill always
    # lands before every message is in, and the second worker meets a backlog and live messages
    half = KILL_TOTAL // 2
    duplicated = kill_and_count(
        home, script, logs, ids, KILL_TOTAL, 1000,
        lambda: publish(topic, range(half), url), lambda: publish(topic, range(half, KILL_TOTAL), url),
    )  # fmt: skip
    assert duplicated <= 2_000  # at most what was in flight (received, not yet acknowledged)


class Mosquitto:
    """A Mosquitto of the test's own with persistence, stopped and started again on its port:
    sessions and their queued messages come back."""

    def __init__(self, folder):
        self.port, self.conf, self.proc = free_port(), folder / "mosquitto.conf", None
        self.conf.write_text(
            f"listener {self.port} 127.0.0.1\nuser root\nmax_queued_messages 0\n"
            f"allow_anonymous true\npersistence true\npersistence_location {folder}/\n"
        )
        self.url = f"mqtt://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["mosquitto", "-c", str(self.conf)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(self._up, 30, what="mosquitto")

    def _up(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            return True
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


def test_a_broker_that_goes_away_shows_and_the_source_resumes(worker, tmp_path, topic):
    """The source's broker stops: the connector shows RESTARTING naming it (paho alone would
    reconnect in silence); started again, the session's messages published meanwhile arrive."""
    broker = Mosquitto(tmp_path)
    broker.start()
    try:
        session(topic, "cq-outage", broker.url)  # the broker keeps messages for it from now
        publish(topic, range(50), broker.url)
        retry = "'errors.retry.backoff.ms' = 300, 'errors.retry.max' = 50"
        run(
            worker,
            f"""CREATE SOURCE CONNECTOR mgone FROM mqtt INTO gone WITH (url = '{broker.url}',
              topic = '{topic}', 'client.id' = 'cq-outage', schema = 'id BIGINT, name STRING',
              {retry})""",
        )
        ids = lambda: read_parquet_rows(worker.home / "streams/gone", "SELECT id FROM t") or []  # noqa: E731
        wait_until(
            lambda: len(ids()) >= 50, 120, what="the first messages",
            diagnose=lambda: (worker.catalog.get_connector("mgone"), ids()[:3]),
        )  # fmt: skip
        broker.stop()
        wait_until(
            lambda: worker.catalog.get_connector("mgone").state == "RESTARTING", 60,
            what="mgone RESTARTING",
        )  # fmt: skip
        assert f"127.0.0.1:{broker.port}" in worker.catalog.get_connector("mgone").last_error
        broker.start()
        publish(topic, range(50, 80), broker.url)
        wait_until(lambda: {i for (i,) in ids()} == set(range(80)), 120, what="every message")
        wait_until(lambda: worker.catalog.get_connector("mgone").state == "RUNNING", 60)
    finally:
        broker.stop()
