"""A standby worker (`connectql server --standby`) on the active worker's home: it answers
/health as the standby, takes the lease over when the active is killed (kill -9) or paused
(SIGSTOP), and runs every connector from its checkpoint; a worker that lost its lease writes
nothing more, neither to a database sink (the epoch in the sink's progress row fences it) nor to
the catalog. Real processes, a private PostgreSQL with logical decoding."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import urllib.request
from dataclasses import replace

import psycopg
import pyarrow as pa
import pytest

from connectql.api.client import Remote, RemoteError
from connectql.connectors.postgres.sink import PgTarget
from connectql.connectors.relational.sink import PROGRESS_TABLE, Fenced
from tests.crash import (
    CONNECTQL,
    checkout_env,
    describe,
    kill_everything,
    server_process,
    session_members,
    start_connectql,
    stop_server,
)
from tests.helpers import wait_until
from tests.mariadbserver import mariadb_binlog  # noqa: F401 (fixture)
from tests.pgserver import items_checksum, pg_sql
from tests.servers import free_port
from tests.test_postgres_crash import PgWriter
from tests.test_sink_merge import target, write  # noqa: F401 (fixture)

pytestmark = pytest.mark.spark
ROW = [("id", pa.int64()), ("v", pa.string()), ("__op", pa.string()), ("__pos", pa.string())]


# ------------------------------------------------------------------ the sinks' fence


def test_a_sink_refuses_batches_from_an_older_epoch_in_their_transaction(target):  # noqa: F811
    old = target()
    old.s = replace(old.s, epoch=1)
    old.ensure_progress_row()
    write(old, 0, [[(1, "a", "c", "0")]])
    new = type(old)(replace(old.s, epoch=2), old.schema)
    new.tried = []
    new.ensure_progress_row()  # the new worker's sink starts: it owns the sink from now on
    with pytest.raises(Fenced, match="the worker of lease epoch 2 owns it, this one has epoch 1"):
        write(old, 1, [[(2, "b", "c", "1")]])
    insert = pa.RecordBatch.from_pylist(
        [{"id": 3, "v": "x", "__op": "c", "__pos": "2"}], schema=pa.schema(ROW)
    )
    if isinstance(old, PgTarget):  # its direct write (a task's insert straight into the
        old.DIRECT = True  # target, off by default for now) is fenced too
        with pytest.raises(Fenced, match="a direct write refused"):
            old.write(1, 0, iter([insert]))
    else:  # only staged: its commit is what the fence refuses
        old.write(1, 0, iter([insert]))
    assert target.rows() == [(1, "a")]
    with pytest.raises(Fenced, match="start refused"):
        old.ensure_progress_row()
    write(new, 1, [[(2, "b", "c", "1")]])
    assert target.rows() == [(1, "a"), (2, "b")]
    epochs = target.rows(f"SELECT batch_id, epoch FROM {PROGRESS_TABLE} WHERE epoch > 0")
    assert epochs == [(1, 2)]


def test_a_new_epochs_sink_ends_the_sessions_an_older_one_left_open(target):  # noqa: F811
    """A paused worker's open transaction (mid-COPY the server never times it out) must not
    hold the progress row against its successor: the newer epoch's start ends it."""
    old = target()
    if not isinstance(old, PgTarget):
        pytest.skip("MariaDB sessions carry no name by which to find an older epoch's")
    old.s = replace(old.s, epoch=1)
    old.ensure_progress_row()
    held = old.connect(autocommit=False)
    held.execute("SET idle_in_transaction_session_timeout = 0")  # as if busy in a COPY
    old.committed(held, lock=True)  # the progress row locked, as in a batch's commit
    new = type(old)(replace(old.s, epoch=2), old.schema)
    new.ensure_progress_row()  # without ending the old session: a lock timeout after 1 min
    with pytest.raises(psycopg.OperationalError):
        held.execute("SELECT 1")
    held.close()
    epochs = target.rows(f"SELECT epoch FROM {PROGRESS_TABLE}")
    assert epochs == [(2,)]


def test_a_sinks_session_idle_inside_a_transaction_is_ended_by_the_server(target):  # noqa: F811
    """A worker frozen mid-batch must not hold the progress row's lock against its successor."""
    t = target()
    conn = t.connect(autocommit=False)
    try:
        if isinstance(t, PgTarget):
            shown = t.execute(conn, "SHOW idle_in_transaction_session_timeout")
        else:
            shown = t.execute(conn, "SELECT @@session.idle_transaction_timeout")
        assert [str(v) for (v,) in shown] in (["10s"], ["10"])
    finally:
        conn.close()


# ------------------------------------------------------------------ processes


def health(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url + "/health", timeout=5) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError):
        return None


@pytest.fixture
def pair(tmp_path):
    """start() -> (active process, its url, standby process, its url) on one home;
    standby(active_url, tag) -> (process, url) of one more standby once it stands by; all
    stopped afterwards, nothing of them left."""
    home, logs = tmp_path / "home", tmp_path / "logs"
    procs = []

    def standby(active_url: str, tag: str):
        port = free_port()
        proc = start_connectql(home, ["server", "--standby", "--port", str(port)], logs, tag)
        procs.append((proc, None))
        url = f"http://127.0.0.1:{port}"

        def standing_by():
            assert proc.poll() is None, describe(logs, home, tag)
            h = health(url)
            return h and h["role"] == "standby" and h["active"] == active_url

        wait_until(standing_by, 120, 0.5, f"the {tag}'s /health")
        return proc, url

    def start():
        active = server_process(home, logs, "active")
        proc, url = active.__enter__()
        procs.append((proc, active))
        return (proc, url, *standby(url, "standby"))

    start.home, start.logs, start.standby = home, logs, standby
    yield start
    for proc, _context in reversed(procs):
        for pid in session_members(proc.pid):  # a paused one cannot stop
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        stop_server(proc)


def took_over(standby, url: str, logs, home, epoch: int):
    def active():
        assert standby.poll() is None, describe(logs, home, "standby")
        h = health(url)
        return h and h["role"] == "active" and h["epoch"] == epoch and h

    return active


def running(url: str, names: set[str]):
    def check():
        _, body = Remote(url).request("GET", "/connectors?expand=status")
        return {
            n for n, c in body.items() if c["status"]["connector"]["state"] == "RUNNING"
        } >= names

    return check


CDC = """
CREATE SOURCE CONNECTOR src FROM postgres INTO changes WITH (host = '{host}', port = {port},
  user = 'postgres', database = '{src}', table = 'items', 'slot.name' = '{slot}');
CREATE SINK CONNECTOR dst TO postgres FROM changes WITH (host = '{host}', port = {port},
  user = 'postgres', database = '{dst}', table = 'items');
"""


def test_kill_9_of_the_active_worker_the_standby_takes_over_and_loses_nothing(
    pg_logical, cdc_databases, pair
):
    names, infos = cdc_databases
    pg_sql(
        infos["src"],
        "CREATE TABLE items (id bigint PRIMARY KEY, name text, qty int, price numeric(12,2), updated timestamptz)",
    )
    pg_sql(
        infos["src"],
        "INSERT INTO items SELECT g, 'item ' || g, g % 7, g * 0.25, now() FROM generate_series(1, 2000) g",
    )
    active, url, standby, standby_url = pair()
    assert health(url)["role"] == "active" and health(url)["epoch"] == 1
    list(Remote(url).run(CDC.format(host=pg_logical.host, port=pg_logical.port, **names)))
    wait_until(
        lambda: items_checksum(infos["dst"]) == items_checksum(infos["src"]),
        120,
        0.5,
        "the snapshot",
    )
    writer = PgWriter(infos["src"], range(1, 2001), 100_000, 3)
    try:
        writer.run(per_second=20)
        wait_until(lambda: len(writer.committed) > 40, 30, 0.2, "changes")
        kill_everything(active)
        wait_until(took_over(standby, standby_url, pair.logs, pair.home, 2), 60, 0.2, "takeover")
        wait_until(running(standby_url, {"src", "dst"}), 60, 0.5, "connectors RUNNING")
        wait_until(lambda: len(writer.committed) > 120, 30, 0.2, "changes after the takeover")
    finally:
        writer.stop()
    source = items_checksum(infos["src"])
    wait_until(lambda: items_checksum(infos["dst"]) == source, 120, 0.5, "target equal to source")
    progress = pg_sql(infos["dst"], f"SELECT epoch FROM {PROGRESS_TABLE}")
    assert progress == [(2,)]
    # the CLI finds the worker that is active now through the home
    assert health(url) is None
    r = subprocess.run(
        [*CONNECTQL, "--home", str(pair.home), "--format", "json", "status"],
        capture_output=True,
        text=True,
        timeout=120,
        env=checkout_env(),
    )
    assert {row["name"]: row["state"] for row in json.loads(r.stdout)} == {
        "src": "RUNNING",
        "dst": "RUNNING",
    }, r.stderr
    # a new standby may start on the home: it stands by, naming the worker active now
    second, second_url = pair.standby(standby_url, "second standby")
    assert health(standby_url)["role"] == "active" and health(standby_url)["epoch"] == 2
    with pytest.raises(RemoteError) as refused:  # it runs nothing, answers nothing but /health
        Remote(second_url).request("GET", "/connectors")
    assert refused.value.status == 503 and standby_url in str(refused.value)
    assert running(standby_url, {"src", "dst"})()


DATAGEN = """
CREATE SOURCE CONNECTOR gen FROM datagen INTO nums WITH ('rows.per.second' = 40,
  fields = 'id BIGINT SEQUENCE, v INT RANDOM(1, 9)');
CREATE SINK CONNECTOR out TO postgres FROM nums WITH (host = '{host}', port = {port},
  user = 'postgres', database = '{dst}', table = 'nums');
"""


@pytest.mark.scenario
def test_a_paused_active_that_comes_back_writes_nothing_to_a_target_or_the_catalog(
    pg_logical, cdc_databases, pair
):
    names, infos = cdc_databases
    active, url, standby, standby_url = pair()
    list(Remote(url).run(DATAGEN.format(host=pg_logical.host, port=pg_logical.port, **names)))
    count = "SELECT count(*), count(DISTINCT id), max(id) FROM nums"
    wait_until(lambda: _rows(infos["dst"]) > 100, 120, 0.5, "rows in the target")
    frozen = []
    for pid in session_members(active.pid):  # the whole worker: Python, JVM, Spark's workers
        with contextlib.suppress(ProcessLookupError):  # a Spark Python worker may just have ended
            os.kill(pid, signal.SIGSTOP)
            frozen.append(pid)
    assert active.pid in frozen
    wait_until(took_over(standby, standby_url, pair.logs, pair.home, 2), 60, 0.2, "takeover")
    wait_until(running(standby_url, {"gen", "out"}), 60, 0.5, "connectors RUNNING")
    at_takeover = _rows(infos["dst"])
    wait_until(lambda: _rows(infos["dst"]) > at_takeover + 100, 60, 0.5, "rows from the new worker")
    events_before = _events(standby_url)
    for pid in frozen:
        with contextlib.suppress(ProcessLookupError):  # a Spark Python worker may be gone
            os.kill(pid, signal.SIGCONT)
    assert active.wait(timeout=60) == 3, describe(pair.logs, pair.home, "active")
    assert "lost the lease" in (pair.home / "worker.log").read_text()
    # the old worker's catalog, held while it was paused, is removed once it has exited
    wait_until(lambda: not (pair.home / "catalog.duckdb").exists(), 30, 0.5, "the old catalog gone")
    assert sorted(p.name for p in pair.home.glob("catalog*.duckdb")) == ["catalog-e2.duckdb"]
    wait_until(lambda: _rows(infos["dst"]) > at_takeover + 200, 60, 0.5, "rows after the resume")
    total, distinct, _ = pg_sql(infos["dst"], count)[0]
    assert total == distinct  # no batch twice: the old worker's commit was refused or never came
    assert pg_sql(infos["dst"], f"SELECT epoch FROM {PROGRESS_TABLE}") == [(2,)]
    # the catalog the active reads has no word from the old worker, and both still run
    events = _events(standby_url)
    assert events[: len(events_before)] == events_before
    assert not [e for e in events if "shut down" in e[2]], events
    assert running(standby_url, {"gen", "out"})()


def _rows(info: str) -> int:
    try:
        return pg_sql(info, "SELECT count(*) FROM nums")[0][0]
    except psycopg.errors.UndefinedTable:
        return 0


def _events(url: str) -> list:
    _, body = Remote(url).request(
        "POST",
        "/sql",
        {
            "sql": "SELECT connector, to_state, reason FROM connector_events ORDER BY time, connector"
        },
    )
    return [tuple(r) for r in body["results"][-1]["rows"]]
