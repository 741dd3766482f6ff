"""A database that hangs (every process of its private server suspended with SIGSTOP, as a
frozen VM or a network black hole looks to a client): the connectors waiting on it leave
RUNNING within seconds with what they wait on (STALLED, then RESTARTING when the bounded call
gives up), a PAUSE of a connector stuck in a call completes at once, the API and the other
connectors go on, and after SIGCONT they heal by themselves, the target equal to the source.
The bounds are set small through the options so that each phase takes seconds."""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.error
import urllib.request
import uuid

import psycopg
import pymysql
import pytest

from connectql.api.routes import Routes
from connectql.api.serve import ApiServer
from connectql.connectors.mysql.client import connect_kwargs as my_connect_kwargs
from connectql.connectors.options import validate
from connectql.connectors.postgres.client import connect_kwargs as pg_connect_kwargs
from connectql.connectors.relational import arrowread
from connectql.errors import PlanError
from tests.helpers import run, wait_until
from tests.mariadbserver import PrivateMariaDB
from tests.mariadbserver import create_database as create_my_database
from tests.pgserver import PrivatePostgres, create_database

pytestmark = pytest.mark.spark

STALL_S = 3
# the bounds of the connectors that heal by themselves
BOUNDS = (
    f"'stall.timeout.ms' = {STALL_S * 1000}, 'read.timeout.ms' = 8000,"
    " 'connect.timeout.ms' = 3000, 'errors.retry.backoff.ms' = 500, 'errors.retry.max' = 100"
)
# a connector stuck in its call for longer than the test waits: paused while stuck
STUCK = f"'stall.timeout.ms' = {STALL_S * 1000}, 'read.timeout.ms' = 120000"
PG_CHECKSUM = (
    "SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY id), '')) FROM items t"
)
BOUNDED = "-c statement_timeout=30000"  # the test's own queries never wait forever either
MY_CHECKSUM = "SELECT count(*), sum(crc32(concat(id, ':', qty))) FROM items"


# ------------------------------------------------------------------ the API, asked throughout


@pytest.fixture
def api(worker):
    """The worker's HTTP API on a free port, in this process."""
    httpd = ApiServer(("127.0.0.1", 0), Routes(worker, "test"), None)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()
    thread.join(10)


def call(url: str, method: str = "GET", body: str | None = None) -> tuple[int, object]:
    req = urllib.request.Request(url, body.encode() if body else None, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode()


class Prober:
    """Asks the API every 0.2 s while inside: a connector's status, the metrics and a SELECT of
    the status table in turn; keeps how long each answer took and any that was not 200."""

    def __init__(self, url: str, name: str):
        self.url, self.name = url, name
        self.took: list[float] = []
        self.failures: list[tuple[str, int]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asks = [
            ("GET", f"/connectors/{self.name}/status", None),
            ("GET", "/metrics", None),
            ("POST", "/sql", "SELECT name, state, last_error FROM connectors"),
        ]
        i = 0
        while not self._done.wait(0.2):
            method, path, body = asks[i % len(asks)]
            start = time.monotonic()
            status, _ = call(self.url + path, method, body)
            self.took.append(time.monotonic() - start)
            if status != 200:
                self.failures.append((path, status))
            i += 1

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join(60)

    def p99(self) -> float:
        ordered = sorted(self.took)
        return ordered[int(len(ordered) * 0.99)]


# ------------------------------------------------------------------ what the worker shows


def state(worker, name: str) -> str:
    return worker.catalog.get_connector(name).state


def left_running(worker, name: str) -> str | None:
    """Why the connector is not RUNNING (a STALLED reason, a RESTARTING error); None while it
    is."""
    entry = worker.catalog.get_connector(name)
    if entry.state in ("RUNNING", "STARTING"):
        return None
    return f"{entry.state}: {entry.last_error}"


def events(worker, name: str) -> list[tuple[str, str, str | None]]:
    rows = worker.catalog.query(
        "SELECT to_state, reason, error FROM connector_events WHERE connector = ? ORDER BY time",
        [name],
    )[1]
    return [tuple(r) for r in rows]


def rows_total(worker, name: str) -> int:
    return worker.catalog.query("SELECT rows_total FROM connectors WHERE name = ?", [name])[1][0][0]


def diagnose(worker) -> list[tuple]:
    return worker.catalog.query("SELECT name, state, rows_total, last_error FROM connectors")[1]


def pause_quickly(api: str, worker, name: str) -> float:
    """PAUSE through the API; how long it took (the connector is PAUSED after)."""
    start = time.monotonic()
    status, body = call(f"{api}/connectors/{name}/pause", "PUT")
    took = time.monotonic() - start
    assert status == 202, body
    assert state(worker, name) == "PAUSED"
    return took


def drop_quickly(api: str, name: str) -> tuple[float, str]:
    """DROP through the API; how long it took and what it said."""
    start = time.monotonic()
    status, body = call(f"{api}/connectors/{name}", "DELETE")
    took = time.monotonic() - start
    assert status == 200, body
    return took, body["message"]


def shows_stalled(api: str, worker, name: str, place: str) -> None:
    """`name` is STALLED waiting on `place`, and so say its HTTP status and the metrics."""
    wait_until(lambda: state(worker, name) == "STALLED", 30, what=f"{name} STALLED")
    _, body = call(f"{api}/connectors/{name}/status")
    assert body["connector"]["state"] == "STALLED", body
    assert place in body["connector"]["trace"], body
    _, metrics = call(f"{api}/metrics")
    sample = rf'connectql_connector_state{{connector="{name}",[^}}]*state="STALLED"[^}}]*}} 1\.0'
    assert re.search(sample, metrics), [m for m in metrics.splitlines() if name in m]


def a_source_hangs(worker, api, server, db, same) -> list[tuple]:
    """Suspend the source's server: `src` leaves RUNNING with the reason and heals by itself
    after SIGCONT; `src_p`, stuck in its call, is STALLED (the HTTP status and the metrics say
    so), paused at once and then dropped at once (a postgres cdc source's slot cleanup cannot
    reach the server: it says so). `db` changes the source table; `same()` compares target and
    source. Returns src's events from the hang on."""
    place = f"127.0.0.1:{server.port}"
    seen = len(events(worker, "src"))
    with Prober(api, "src") as probe:
        with server.suspended():
            hung = time.monotonic()
            why = wait_until(lambda: left_running(worker, "src"), 90, what="src not RUNNING")
            left_in = time.monotonic() - hung
            assert place in why, why
            why = wait_until(lambda: left_running(worker, "src_p"), 90, what="src_p not RUNNING")
            assert place in why, why
            shows_stalled(api, worker, "src_p", place)
            paused_in = pause_quickly(api, worker, "src_p")
            assert paused_in < 10
            dropped_in, said = drop_quickly(api, "src_p")
            assert dropped_in < 10, said
            # the bounded call gives up: retried with backoff, the error kept
            wait_until(lambda: state(worker, "src") == "RESTARTING", 60, what="src RESTARTING")
        db.insert(301, 400)
        db.sql("UPDATE items SET qty = qty * 10 WHERE id % 7 = 0")
        db.sql("DELETE FROM items WHERE id % 11 = 0")
        wait_until(same, 120, what="target equal to source after the source hung")
        wait_until(lambda: state(worker, "src") == "RUNNING", 60, what="src RUNNING by itself")
    print(f"source hang: src left RUNNING in {left_in:.1f} s, src_p paused in {paused_in:.1f} s,"
          f" dropped in {dropped_in:.1f} s ({said}),"
          f" API p99 {probe.p99():.3f} s over {len(probe.took)} requests")  # fmt: skip
    assert left_in < 90
    assert probe.failures == [] and probe.p99() < 1.0, (probe.failures, sorted(probe.took)[-5:])
    assert "RESTARTING" in [e[0] for e in events(worker, "src")[seen:]]
    return events(worker, "src")[seen:]


def a_target_hangs(worker, api, server, db, same) -> None:
    """Suspend the target's server while the source has news: `dst` leaves RUNNING naming the
    target, the source goes on, and `dst` heals by itself after SIGCONT; `dst_p`, stuck in its
    write, is STALLED and paused at once."""
    place = f"127.0.0.1:{server.port}"
    with Prober(api, "dst") as probe:
        with server.suspended():
            before = rows_total(worker, "src")
            db.insert(401, 500)
            hung = time.monotonic()
            why = wait_until(lambda: left_running(worker, "dst"), 90, what="dst not RUNNING")
            left_in = time.monotonic() - hung
            assert place in why, why
            shows_stalled(api, worker, "dst_p", place)
            paused_in = pause_quickly(api, worker, "dst_p")
            assert paused_in < 10
            wait_until(lambda: rows_total(worker, "src") >= before + 100, 60, what="src going on")
        wait_until(same, 120, what="target equal to source after the target hung")
        wait_until(
            lambda: state(worker, "dst") == "RUNNING",
            60,
            what="dst RUNNING by itself",
            diagnose=lambda: (state(worker, "dst"), events(worker, "dst")[-4:]),
        )
    print(f"target hang: dst left RUNNING in {left_in:.1f} s ({why}),"
          f" dst_p paused in {paused_in:.1f} s, API p99 {probe.p99():.3f} s over {len(probe.took)} requests")  # fmt: skip
    assert left_in < 90
    assert probe.failures == [] and probe.p99() < 1.0, (probe.failures, sorted(probe.took)[-5:])


# ------------------------------------------------------------------ PostgreSQL


@pytest.fixture
def two_pg():
    """A source and a target server of their own: these tests suspend them."""
    with PrivatePostgres() as a, PrivatePostgres() as b:
        yield a, b


class Pg:
    """The source or target database `info` (a conninfo) on a private PostgreSQL."""

    def __init__(self, info: str):
        self.info = info

    def sql(self, statement: str):
        with psycopg.connect(self.info, autocommit=True, connect_timeout=10, options=BOUNDED) as c:
            cur = c.execute(statement)
            return cur.fetchall() if cur.description else None

    def insert(self, lo: int, hi: int) -> None:
        self.sql(f"INSERT INTO items SELECT g, g FROM generate_series({lo}, {hi}) g")


def pg_pipeline(worker, a, b, stuck: bool = True, sink: str = "") -> tuple[Pg, Pg, object]:
    """src (and src_p and dst_p, unless not `stuck`) from a's table items, dst into b's;
    returns both databases and a check that they are equal."""
    src = Pg(create_database(a.conninfo(), "src"))
    dst = Pg(create_database(b.conninfo(), "dst"))
    src.sql("CREATE TABLE items (id int PRIMARY KEY, qty int)")
    src.insert(1, 300)
    at = "host = '127.0.0.1', user = 'postgres', port = "
    paused = f"""CREATE SOURCE CONNECTOR src_p FROM postgres INTO items_p WITH ({at}{a.port},
          database = 'src', table = 'items', {STUCK});
        CREATE SINK CONNECTOR dst_p TO postgres FROM items_s WITH ({at}{b.port},
          database = 'dst', table = 'items_p', {STUCK});"""
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR src FROM postgres INTO items_s WITH ({at}{a.port},
          database = 'src', table = 'items', {BOUNDS});
        {paused if stuck else ""}
        CREATE SINK CONNECTOR dst TO postgres FROM items_s WITH ({at}{b.port},
          database = 'dst', table = 'items', {BOUNDS}{sink});
        """,
    )
    same = lambda: dst.sql(PG_CHECKSUM) == src.sql(PG_CHECKSUM)  # noqa: E731
    wait_until(same, 120, what="the first copy", diagnose=lambda: diagnose(worker))
    return src, dst, same


def test_postgres_that_hangs_as_source_and_as_target(two_pg, worker, api):
    a, b = two_pg
    src, _dst, same = pg_pipeline(worker, a, b)
    during = a_source_hangs(worker, api, a, src, same)
    # the source streams the log in a thread of its own (walstream), not in a batch: that
    # thread fails on the silent server, naming it: its idle check, or its connect when the
    # hang began as the thread (re)connected (the last stop's CI met that order)
    left = [e for s, _r, e in during if s in ("STALLED", "RESTARTING") and e]
    assert left and f"127.0.0.1:{a.port}" in left[0], during
    assert "postgres change log stream: " in left[0], during
    a_target_hangs(worker, api, b, src, same)


def test_a_locked_target_table_stalls_the_sink_until_the_lock_goes(two_pg, worker):
    a, b = two_pg
    src, dst, same = pg_pipeline(worker, a, b, stuck=False, sink=", 'lock.timeout.ms' = 6000")
    with psycopg.connect(dst.info) as locker:  # a transaction holding the lock until it ends
        locker.execute("LOCK TABLE items IN ACCESS EXCLUSIVE MODE")
        src.insert(301, 400)
        wait_until(lambda: state(worker, "dst") == "STALLED", 60, what="dst STALLED")
        reason = events(worker, "dst")[-1][1]
        assert f"127.0.0.1:{b.port} (target write)" in reason, reason
        wait_until(lambda: state(worker, "dst") == "RESTARTING", 60, what="lock wait gave up")
        assert "lock timeout" in worker.catalog.get_connector("dst").last_error
    wait_until(same, 120, what="target equal to source once the lock went")
    wait_until(lambda: state(worker, "dst") == "RUNNING", 60, what="dst RUNNING by itself")


# a bulk copy whose read is slow (50 ms a row) in connectorx's sessions only: the worker's own
# (psycopg's, application_name connectql) read it at once
SLOW_QUERY = (
    "SELECT id, qty FROM items WHERE CASE WHEN current_setting(''application_name'') ="
    " ''connectql'' THEN true ELSE length(pg_sleep(0.05)::text) = 0 END"
)
CONNECTORX_READING = (
    "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid()"
    " AND application_name <> 'connectql' AND query LIKE '%pg_sleep%'"
)


def test_a_connectorx_read_from_a_suspended_server_gives_up_and_heals(worker):
    """connectorx (a bulk copy's or snapshot chunk's range read) holds the GIL while it waits
    and its drivers have no read timeout: suspended mid-read, the read still ends after
    read.timeout.ms (its watchdog ends the Python worker), the connector is retried while the
    server is still suspended, and heals after SIGCONT."""
    with PrivatePostgres() as a:
        src = Pg(create_database(a.conninfo(), "src"))
        src.sql("CREATE TABLE items (id int PRIMARY KEY, qty int)")
        src.insert(1, 100)
        run(
            worker,
            f"""CREATE SOURCE CONNECTOR src FROM postgres INTO items_s WITH (host = '127.0.0.1',
              port = {a.port}, user = 'postgres', database = 'src', mode = 'bulk',
              query = '{SLOW_QUERY}', 'poll.interval.ms' = 1000, {BOUNDS});""",
        )
        wait_until(lambda: rows_total(worker, "src") >= 100, 120, what="the first copy")
        wait_until(lambda: src.sql(CONNECTORX_READING)[0][0] > 0, 60, what="a connectorx read")
        seen = len(events(worker, "src"))
        with a.suspended():
            hung = time.monotonic()
            restarted = lambda: [e for e in events(worker, "src")[seen:] if e[0] == "RESTARTING"]  # noqa: E731
            error = wait_until(restarted, 60, what="the read gave up")[0][2]
            gave_up_in = time.monotonic() - hung
        before = rows_total(worker, "src")
        wait_until(lambda: state(worker, "src") == "RUNNING", 60, what="src RUNNING by itself")
        wait_until(lambda: rows_total(worker, "src") >= before + 100, 60, what="copies again")
    print(f"connectorx read gave up in {gave_up_in:.1f} s: {error}")
    assert gave_up_in < 8 + arrowread.GRACE_S + 10, error  # read.timeout.ms + grace + a retry
    assert "crashed" in error or "exited" in error, error


@pytest.fixture
def shared_db(pg_shared):
    """A fresh database on the shared server: (name, Pg); dropped after the worker closed."""
    name = f"cq_{uuid.uuid4().hex[:8]}"
    yield name, Pg(create_database(pg_shared.conninfo(), name))
    with psycopg.connect(pg_shared.conninfo(), autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_the_workers_stall_timeout_applies_to_a_hung_batch(shared_db, worker):
    """SET stall.timeout.ms reaches the hang check, not only the lag check: a sink whose batch
    waits on a locked target table is STALLED after the worker's 2 s, not the default 60 s
    (by which time its lock wait would have given up)."""
    name, dst = shared_db
    dst.sql("CREATE TABLE items (id bigint)")
    run(
        worker,
        f"""
        SET stall.timeout.ms = 2000;
        CREATE SOURCE CONNECTOR g FROM datagen INTO s WITH ('rows.total' = 10,
          fields = 'id BIGINT SEQUENCE', 'initial.state' = 'paused');
        CREATE SINK CONNECTOR dst TO postgres FROM s WITH (host = '127.0.0.1', port = 5432,
          user = 'postgres', database = '{name}', table = 'items');
        """,
    )
    wait_until(lambda: state(worker, "dst") == "RUNNING", 60, what="dst RUNNING")
    with psycopg.connect(dst.info) as locker:  # a transaction holding the lock until it ends
        locker.execute("LOCK TABLE items IN ACCESS EXCLUSIVE MODE")
        run(worker, "RESUME CONNECTOR g")
        wait_until(lambda: state(worker, "dst") == "STALLED", 40, what="dst STALLED")
        reason = events(worker, "dst")[-1][1]
        assert reason.startswith("batch 0 waiting") and "(target write)" in reason, reason
    wait_until(lambda: dst.sql("SELECT count(*) FROM items") == [(10,)], 60, what="the rows")


# ------------------------------------------------------------------ MariaDB


@pytest.fixture
def two_mariadb():
    with PrivateMariaDB() as a, PrivateMariaDB() as b:
        yield a, b


class My:
    """The database shop on a private MariaDB."""

    def __init__(self, server):
        self.server = server

    def sql(self, statement: str):
        conn = self.server.connect("shop", connect_timeout=10, read_timeout=30)
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
                return cur.fetchall()
        finally:
            conn.close()

    def insert(self, lo: int, hi: int) -> None:
        self.sql(f"INSERT INTO items SELECT seq, seq FROM seq_{lo}_to_{hi}")


def test_mariadb_that_hangs_as_source_and_as_target(two_mariadb, worker, api):
    a, b = two_mariadb
    for server in (a, b):
        create_my_database(server, "shop")
    src, dst = My(a), My(b)
    src.sql("CREATE TABLE items (id INT PRIMARY KEY, qty INT)")
    src.insert(1, 300)
    at = "host = '127.0.0.1', user = 'root', database = 'shop', table = 'items', port = "
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR src FROM mysql INTO items_s WITH ({at}{a.port}, {BOUNDS});
        CREATE SOURCE CONNECTOR src_p FROM mysql INTO items_p WITH ({at}{a.port}, {STUCK});
        CREATE SINK CONNECTOR dst TO mysql FROM items_s WITH ({at}{b.port}, {BOUNDS});
        CREATE SINK CONNECTOR dst_p TO mysql FROM items_s WITH (host = '127.0.0.1', user = 'root',
          database = 'shop', table = 'items_p', port = {b.port}, {STUCK});
        """,
    )
    same = lambda: dst.sql(MY_CHECKSUM) == src.sql(MY_CHECKSUM)  # noqa: E731
    wait_until(same, 120, what="the first copy", diagnose=lambda: diagnose(worker))
    a_source_hangs(worker, api, a, src, same)
    a_target_hangs(worker, api, b, src, same)


# ------------------------------------------------------------------ the bounds themselves

BOUND_KEYS = {"connect.timeout.ms", "read.timeout.ms", "lock.timeout.ms", "keepalive.ms"}


def test_every_database_connector_declares_the_bounds_and_refuses_bad_ones():
    from connectql.connectors import registry

    for type_ in ("postgres", "mysql"):
        for kind in ("source", "sink"):
            specs = registry.lookup(type_, kind).options_for(kind)
            assert BOUND_KEYS <= set(specs), (type_, kind)
            opts = validate(specs, {"database": "d", "table": "t", "read.timeout.ms": -1}, "x")
            plan = registry.lookup(type_, kind).plan_source if kind == "source" else None
            with pytest.raises(PlanError, match=r"read.timeout.ms must be 0 or more, not -1"):
                plan(opts) if plan else registry.lookup(type_, kind).plan_sink(opts, None)
    pg_kw = pg_connect_kwargs({"read.timeout.ms": 8000, "lock.timeout.ms": 2500})
    assert "statement_timeout=8000" in pg_kw["options"] and "lock_timeout=2500" in pg_kw["options"]
    assert (pg_kw["keepalives_idle"], pg_kw["keepalives_count"], pg_kw["connect_timeout"]) == (
        10,
        3,
        10,
    )
    my_kw = my_connect_kwargs({"read.timeout.ms": 8000, "lock.timeout.ms": 2500})
    assert my_kw["read_timeout"] == 8.0 and "innodb_lock_wait_timeout = 3" in my_kw["init_command"]
    off = pg_connect_kwargs({"read.timeout.ms": 0, "keepalive.ms": 0})
    assert "statement_timeout" not in off["options"] and "keepalives" not in off


def test_a_call_on_a_suspended_server_gives_up_after_read_timeout():
    """psycopg and pymysql connections (and a followed binlog stream) fail instead of waiting
    forever on a server that is there but does not answer."""
    from connectql.connectors.mysql.client import connect as my_connect
    from connectql.connectors.mysql.client import query
    from connectql.connectors.postgres.client import connect as pg_connect

    bounds = {"host": "127.0.0.1", "read.timeout.ms": 2000, "connect.timeout.ms": 2000}
    with PrivatePostgres() as server:
        conn = pg_connect({**bounds, "port": server.port, "user": "postgres"}, autocommit=True)
        with server.suspended():
            start = time.monotonic()
            with pytest.raises(psycopg.OperationalError, match=r"no answer from postgres at"):
                conn.execute("SELECT 1")
            assert 1.5 < time.monotonic() - start < 10
            with pytest.raises(PlanError, match=r"no answer within 2 s \(connect.timeout.ms\)"):
                pg_connect({**bounds, "port": server.port, "user": "postgres"})
        conn.close()
    with PrivateMariaDB() as server:
        conn = my_connect({**bounds, "port": server.port})
        with server.suspended():
            start = time.monotonic()
            with pytest.raises(pymysql.err.OperationalError, match="timed out"):
                query(conn, "SELECT 1")
            assert 1.5 < time.monotonic() - start < 10
        conn.close()


def test_ctrl_c_stops_a_worker_whose_source_hangs(tmp_path):
    """`connectql run` with a source stuck in a call on a suspended server: Ctrl-C still stops
    the worker within seconds (the stuck query is left to end in the background)."""
    import signal

    from tests.crash import kill_everything, start_worker
    from tests.helpers import read_parquet_rows

    server = PrivatePostgres().start()
    try:
        src = create_database(server.conninfo(), "src")
        with psycopg.connect(src, autocommit=True) as c:
            c.execute("CREATE TABLE items (id int PRIMARY KEY, qty int)")
            c.execute("INSERT INTO items SELECT g, g FROM generate_series(1, 100) g")
        script = tmp_path / "hang.sql"
        script.write_text(
            f"CREATE SOURCE CONNECTOR src FROM postgres INTO items WITH (host = '127.0.0.1',"
            f" port = {server.port}, user = 'postgres', database = 'src', table = 'items',"
            f" {STUCK});"
        )
        home, logs = tmp_path / "home", tmp_path / "logs"
        logs.mkdir()
        proc = start_worker(home, script, logs, "run")
        try:
            stream = home / "streams/items"
            wait_until(lambda: read_parquet_rows(stream) == [(100, 100)], 180, what="the snapshot")
            with server.suspended():
                time.sleep(STALL_S + 2)  # the source's calls now wait on a server that is gone
                proc.send_signal(signal.SIGINT)
                started = time.monotonic()
                code = proc.wait(timeout=60)
                took = time.monotonic() - started
            assert code == 0, (logs / "run.err").read_text()[-2000:]
            assert took < 30, f"Ctrl-C took {took:.0f} s"
        finally:
            kill_everything(proc)
    finally:
        server.stop()
