"""Chaining (runtime/ride.py): a database sink whose stream one running source feeds writes
inside that source's micro-batches; every stream record reaches the target exactly once while
it rides, after a pause, after a failed ride, and once a second source feeding the stream hands
it over to a query of its own. The kill -9 tests of change capture run with chaining on too
(tests/test_postgres_crash.py, tests/test_mysql_crash.py)."""

from __future__ import annotations

import time
import uuid

import psycopg
import pytest

from connectql.catalog.streams import committed_files
from connectql.runtime.ride import Ride
from tests.helpers import lag_of, read_parquet_rows, run, wait_until
from tests.pgserver import create_database

pytestmark = pytest.mark.spark

FIELDS = "fields = 'id BIGINT SEQUENCE, v INT RANDOM(1, 9)', seed = {seed}"
# the stream's records as a multiset: a record delivered twice, or lost, changes it
TALLY = "SELECT count(*), coalesce(sum(id * 10 + v), 0) FROM {}"


@pytest.fixture
def target(pg_shared):
    """A fresh database: (connection options, conninfo)."""
    name = f"cq_{uuid.uuid4().hex[:8]}"
    info = create_database(pg_shared.conninfo(), name)
    s = pg_shared
    yield f"host = '{s.host}', port = {s.port}, user = '{s.user}', database = '{name}'", info
    with psycopg.connect(s.conninfo(), autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sql(info: str, statement: str):
    with psycopg.connect(info, autocommit=True) as c:
        cur = c.execute(statement)
        return cur.fetchall() if cur.description else None


def tallies(worker, info: str):
    """(the stream's tally, the target's), once the target exists."""
    stream = read_parquet_rows(worker.home / "streams/nums", TALLY.format("t"))
    try:
        return tuple(stream[0]) if stream else (0, 0), sql(info, TALLY.format("appended"))[0]
    except psycopg.errors.UndefinedTable:
        return None


def caught_up(worker, info: str, rows: int):
    t = tallies(worker, info)
    return t if t and t[0] == t[1] and t[0][0] == rows else None


def source(name: str, rows: int, seed: int, rate: int = 2000, batch: int = 300) -> str:
    return (
        f"CREATE SOURCE CONNECTOR {name} FROM datagen INTO nums WITH ('rows.total' = {rows},"
        f" 'rows.per.second' = {rate}, 'rows.per.batch' = {batch}, {FIELDS.format(seed=seed)});"
    )


def sink(conn: str, extra: str = "") -> str:
    return (
        f"CREATE SINK CONNECTOR out TO postgres FROM nums WITH ({conn}, table = 'appended'{extra});"
    )


def connector(worker, name: str):
    return worker.catalog.get_connector(name)


EVENTS = "SELECT reason FROM connector_events WHERE connector = ? ORDER BY time"


def runs_as(worker, name: str) -> str:
    rows = run(worker, f"DESCRIBE CONNECTOR {name}")[0].rows
    return dict(rows)["runs as"]


def rows_total(worker, name: str) -> int:
    return worker.catalog.query("SELECT rows_total FROM connectors WHERE name = ?", [name])[1][0][0]


def test_a_sink_rides_its_source_then_hands_over_to_a_query_of_its_own(worker, target):
    conn, info = target
    run(worker, source("gen1", 3000, 1, batch=200) + sink(conn))
    assert isinstance(worker.engine.queries["out"], Ride)
    assert runs_as(worker, "out").startswith("chained")
    assert runs_as(worker, "gen1") == "its own Spark query"
    got = wait_until(lambda: caught_up(worker, info, 3000), 60, what="the first 3000 rows")
    assert got[1][0] == 3000
    out = connector(worker, "out")
    assert (out.state, out.last_error) == ("RUNNING", None)
    # a ride's progress row is recorded just after its commit shows in the target
    metrics = wait_until(
        lambda: [
            m
            for m in worker.catalog.query(
                "SELECT count(*), sum(written_rows) FROM connector_metrics WHERE connector = 'out'"
            )[1]
            if m[1] == 3000
        ],
        10,
        what="the rides' progress rows",
    )[0]
    assert metrics[0] > 1 and metrics[1] == 3000
    assert rows_total(worker, "out") == 3000
    # retention merges the files rides delivered: a merged file holds only those
    run(worker, "SET stream.retention.check.interval = '1 s'")
    stream = worker.home / "streams/nums"
    wait_until(lambda: any("merged-" in f for f in committed_files(stream)), 30, what="a merge")
    # a second source into the stream: the sink's own query takes over, skipping what rode
    # and the files merged from it
    run(worker, source("gen2", 2000, 2))
    wait_until(lambda: not isinstance(worker.engine.queries.get("out"), Ride), 30, what="hand-over")
    assert runs_as(worker, "out") == "its own Spark query"
    told = [r[0] for r in worker.catalog.query(EVENTS, ["out"])[1]]
    assert told[-1] == "another writer feeds its stream: its own Spark query takes over", told
    assert "chained: writes the batches of its stream's source" in told[:-1], told
    wait_until(
        lambda: caught_up(worker, info, 5000),
        90,
        what="5000 rows",
        diagnose=lambda: tallies(worker, info),
    )
    assert connector(worker, "out").state == "RUNNING"


def test_a_paused_sink_catches_up_when_resumed_without_waiting_for_its_source(worker, target):
    conn, info = target
    run(worker, source("gen", 2000, 3, rate=1000, batch=100) + sink(conn))
    wait_until(lambda: (tallies(worker, info) or ((0, 0), (0, 0)))[1][0] > 0, 30, what="rows")
    run(worker, "PAUSE CONNECTOR out")
    wait_until(lambda: rows_total(worker, "gen") == 2000, 60, what="the source's 2000 rows")
    behind = tallies(worker, info)
    assert behind[1][0] < 2000  # the source went on while the sink was paused
    run(worker, "RESUME CONNECTOR out")
    assert isinstance(worker.engine.queries["out"], Ride)
    wait_until(lambda: caught_up(worker, info, 2000), 30, what="the backlog")
    # what rides delivered counts as read (the sink's measured lag), so retention merges the
    # stream's small files, and the merged files count as read too
    run(worker, "SET stream.retention.check.interval = '1 s'")
    stream = worker.home / "streams/nums"
    wait_until(lambda: any("merged-" in f for f in committed_files(stream)), 30, what="a merge")
    time.sleep(2)  # a retention pass after the merge
    wait_until(
        lambda: lag_of(worker, "out") == 0, 30, what="lag 0", diagnose=lambda: lag_of(worker, "out")
    )


def test_a_failed_ride_fails_the_sink_alone_and_it_recovers(worker, target):
    conn, info = target
    run(
        worker,
        source("gen", 100_000, 4, rate=300)
        + sink(conn, ", 'errors.retry.backoff.ms' = 300, 'errors.retry.max' = 1000"),
    )
    wait_until(lambda: (tallies(worker, info) or ((0, 0), (0, 0)))[1][0] > 0, 30, what="rows")
    sql(info, "ALTER TABLE appended ADD CONSTRAINT refused CHECK (v < 0) NOT VALID")
    wait_until(
        lambda: "refused" in (connector(worker, "out").last_error or ""), 30, what="the failure"
    )
    assert connector(worker, "out").state in ("RESTARTING", "STARTING", "RUNNING")
    assert connector(worker, "gen").state == "RUNNING"
    sql(info, "ALTER TABLE appended DROP CONSTRAINT refused")
    wait_until(
        lambda: (
            connector(worker, "out").state == "RUNNING"
            and isinstance(worker.engine.queries.get("out"), Ride)
        ),
        30,
        what="the sink riding again",
    )
    run(worker, "PAUSE CONNECTOR gen")
    rows = rows_total(worker, "gen")
    wait_until(lambda: caught_up(worker, info, rows), 30, what="every row once")


def test_set_sink_chaining_false_runs_a_query_per_sink(worker, target):
    conn, info = target
    said = run(worker, "SET sink.chaining = false;" + source("gen", 1000, 5) + sink(conn))
    assert said[0].message.endswith("sinks use it from their next start (RESTART CONNECTOR)")
    assert not isinstance(worker.engine.queries["out"], Ride)
    assert worker.engine.queries["out"].isActive
    wait_until(lambda: caught_up(worker, info, 1000), 60, what="1000 rows")


def test_a_source_paused_and_resumed_leaves_its_sink_riding_without_an_error(worker, target):
    conn, info = target
    run(worker, source("gen", 100_000, 6, rate=1500) + sink(conn))
    for _ in range(2):
        wait_until(lambda: rows_total(worker, "out") > 0, 30, what="rows")
        run(worker, "PAUSE CONNECTOR gen")  # may stop a ride under way: not the sink's error
        rows = rows_total(worker, "gen")
        wait_until(lambda r=rows: caught_up(worker, info, r), 30, what=f"{rows} rows once")
        out = connector(worker, "out")
        assert (out.state, out.last_error) == ("RUNNING", None)
        assert isinstance(worker.engine.queries["out"], Ride)
        run(worker, "RESUME CONNECTOR gen")


def test_a_sink_of_a_run_once_source_or_of_two_sources_runs_its_own_query(worker, target):
    conn, info = target
    once = source("gen", 500, 7).replace("'rows.total'", "run = 'once', 'rows.total'")
    run(worker, once + sink(conn))
    assert runs_as(worker, "out") == "its own Spark query"
    wait_until(lambda: caught_up(worker, info, 500), 60, what="500 rows")
    run(worker, "DROP CONNECTOR out; DROP CONNECTOR gen;" + source("g1", 300, 8))
    run(worker, source("g2", 300, 9) + sink(conn).replace("'appended'", "'two'"))
    assert runs_as(worker, "out") == "its own Spark query"
