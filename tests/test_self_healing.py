"""A worker heals itself through the database faults of a normal day, under a running cdc
pipeline with changes committing all along: a PostgreSQL restart (`pg_ctl restart -m fast`),
every worker connection to PostgreSQL terminated (`pg_terminate_backend`, replication
included), and a MariaDB stop and start. Each time the worker stays up, the affected connectors
retry with backoff and say so (RESTARTING with the error, an event), come back to RUNNING by
themselves, and the target ends equal to the source with no change taken twice. A connector
whose retries run out is FAILED, and RESTART CONNECTOR starts it again."""

from __future__ import annotations

import random
import threading
import time

import psycopg
import pytest

from tests.helpers import read_parquet_rows, run, wait_until
from tests.mariadbserver import PrivateMariaDB
from tests.mariadbserver import create_database as create_mariadb
from tests.pgserver import create_database, pg_sql

pytestmark = pytest.mark.spark

RETRY = "'errors.retry.backoff.ms' = 300, 'errors.retry.max' = 50"
PG_SUM = "SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY id), '')) FROM items t"
MY_SUM = (
    "SELECT count(*), md5(coalesce(group_concat(concat_ws(',', id, qty, note)"
    " ORDER BY id SEPARATOR '|'), '')) FROM items"
)
PG_TARGET_SUM = (
    "SELECT count(*), md5(coalesce(string_agg(concat_ws(',', id, qty, note), '|' ORDER BY id),"
    " '')) FROM items"
)


class Churn:
    """Inserts, updates and deletes on the source table from a thread until stopped, riding
    out the fault (a failed statement is retried on a new connection)."""

    def __init__(self, connect, placeholder: str = "%s"):
        self.connect, self.p = connect, placeholder
        self.stop_event = threading.Event()
        self.done = 0
        self.last_error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="churn")

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_event.set()
        self.thread.join(60)

    def _run(self) -> None:
        rnd, next_id, conn = random.Random(7), 10_001, None
        while not self.stop_event.is_set():
            next_id += 1  # a new id each try: a failed try may have committed its insert
            try:
                conn = conn or self.connect()
                with conn.cursor() as cur:
                    for sql, args in self._changes(rnd, next_id):
                        cur.execute(sql.replace("%s", self.p), args)
                self.done += 1
            except Exception as e:  # the fault: connection lost, server down
                self.last_error = e
                conn = _closed(conn)
                time.sleep(0.2)
            time.sleep(0.02)
        _closed(conn)

    @staticmethod
    def _changes(rnd: random.Random, next_id: int):
        yield "INSERT INTO items VALUES (%s, %s, %s)", (next_id, rnd.randint(1, 99), "n")
        yield "UPDATE items SET qty = qty + 1, note = %s WHERE id = %s", ("u", rnd.randint(1, 500))
        if next_id % 5 == 0:
            yield "DELETE FROM items WHERE id = %s", (rnd.randint(1, next_id),)


def _closed(conn):
    if conn is not None:
        try:
            conn.close()
        except Exception:
            pass
    return None


def events_of(worker, name: str) -> list[tuple[str, str | None]]:
    return [
        (state, error)
        for state, error in worker.catalog.query(
            "SELECT to_state, error FROM connector_events WHERE connector = ? ORDER BY time", [name]
        )[1]
    ]


def running(worker, *names: str) -> bool:
    return all(worker.catalog.get_connector(n).state == "RUNNING" for n in names)


def no_change_twice(worker, stream: str) -> None:
    dupes = read_parquet_rows(
        worker.home / f"streams/{stream}",
        "SELECT count(*) FROM (SELECT __pos, __op, id FROM t WHERE __op <> 'r'"
        " GROUP BY ALL HAVING count(*) > 1)",
    )
    assert dupes == [(0,)], dupes


def pg_pipeline(worker, server) -> tuple[str, str]:
    src = create_database(server.conninfo(), "src")
    dst = create_database(server.conninfo(), "dst")
    pg_sql(src, "CREATE TABLE items (id int PRIMARY KEY, qty int, note text)")
    pg_sql(src, "INSERT INTO items SELECT g, g % 100, 'r' FROM generate_series(1, 500) g")
    conn = f"host = '127.0.0.1', port = {server.port}, user = 'postgres'"
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR src FROM postgres INTO items_s WITH ({conn}, database = 'src',
          table = 'items', {RETRY});
        CREATE SINK CONNECTOR dst TO postgres FROM items_s WITH ({conn}, database = 'dst',
          table = 'items', {RETRY});
        """,
    )
    wait_until(lambda: pg_sql(dst, PG_SUM) == pg_sql(src, PG_SUM), 120, what="the first copy")
    return src, dst


def heal(worker, faulted: str, fault, same, stream: str, churn: Churn) -> None:
    """Apply `fault` under churn; the `faulted` connector shows RESTARTING with an error, then
    everything is RUNNING again and the target equals the source."""
    with churn:
        wait_until(lambda: churn.done > 20, 60, what="changes committing")
        fault()
        wait_until(
            lambda: any(s == "RESTARTING" and e for s, e in events_of(worker, faulted)),
            90,
            what=f"{faulted} RESTARTING with its error",
            diagnose=lambda: events_of(worker, faulted)[-3:],
        )
        seen = churn.done
        wait_until(
            lambda: churn.done > seen + 20,
            90,
            what="changes committing after the fault",
            diagnose=lambda: f"{churn.done - seen} changes, last error {churn.last_error!r}",
        )
    wait_until(same, 180, what="target equal to source after the fault")
    wait_until(lambda: running(worker, "src", "dst"), 90, what="both RUNNING again")
    no_change_twice(worker, stream)


def test_postgres_restart_under_changes(worker, pg_own):
    src, dst = pg_pipeline(worker, pg_own)

    def restart():
        pg_own.halt(graceful=True)  # pg_ctl stop -m fast, then start on the same port
        pg_own.resume()

    churn = Churn(lambda: psycopg.connect(src, autocommit=True, connect_timeout=5))
    heal(
        worker, "src", restart, lambda: pg_sql(dst, PG_SUM) == pg_sql(src, PG_SUM), "items_s", churn
    )


def test_postgres_connections_terminated_under_changes(worker, pg_own):
    src, dst = pg_pipeline(worker, pg_own)

    def terminate():
        killed = pg_sql(
            pg_own.conninfo(),
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE pid <> pg_backend_pid() AND backend_type IN ('client backend', 'walsender')",
        )
        assert killed[0][0] >= 1

    churn = Churn(lambda: psycopg.connect(src, autocommit=True, connect_timeout=5))
    heal(
        worker,
        "src",
        terminate,
        lambda: pg_sql(dst, PG_SUM) == pg_sql(src, PG_SUM),
        "items_s",
        churn,
    )


def test_mariadb_restart_under_changes(worker, pg_own):
    maria = PrivateMariaDB().start()  # its own server: this test stops it
    try:
        create_mariadb(maria, "shop")
        with maria.connect("shop") as c, c.cursor() as cur:
            cur.execute("CREATE TABLE items (id int PRIMARY KEY, qty int, note varchar(8))")
            cur.execute("INSERT INTO items SELECT seq, seq % 100, 'r' FROM seq_1_to_500")
        dst = create_database(pg_own.conninfo(), "dst")
        run(
            worker,
            f"""
            CREATE SOURCE CONNECTOR src FROM mysql INTO items_s WITH (host = '127.0.0.1',
              port = {maria.port}, user = 'root', database = 'shop', table = 'items', {RETRY});
            CREATE SINK CONNECTOR dst TO postgres FROM items_s WITH (host = '127.0.0.1',
              port = {pg_own.port}, user = 'postgres', database = 'dst', table = 'items', {RETRY});
            """,
        )

        def same():
            with maria.connect("shop") as c, c.cursor() as cur:
                cur.execute(MY_SUM)
                source = cur.fetchall()
            return [tuple(r) for r in pg_sql(dst, PG_TARGET_SUM)] == [tuple(r) for r in source]

        wait_until(same, 120, what="the first copy")

        def restart():
            maria.halt(graceful=True)
            time.sleep(1)
            maria.resume()

        churn = Churn(lambda: maria.connect("shop"))
        heal(worker, "src", restart, same, "items_s", churn)
    finally:
        maria.stop()


def test_failed_after_its_retries_and_restart_starts_it_again(worker, pg_own):
    src = create_database(pg_own.conninfo(), "src")
    pg_sql(src, "CREATE TABLE items (id int PRIMARY KEY, qty int)")
    pg_sql(src, "INSERT INTO items SELECT g, g FROM generate_series(1, 50) g")
    run(
        worker,
        f"""CREATE SOURCE CONNECTOR src FROM postgres INTO few WITH (host = '127.0.0.1',
          port = {pg_own.port}, user = 'postgres', database = 'src', table = 'items',
          'errors.retry.backoff.ms' = 100, 'errors.retry.max' = 2)""",
    )
    wait_until(lambda: read_parquet_rows(worker.home / "streams/few") == [(50, 50)], 90)
    pg_own.halt()
    wait_until(lambda: worker.catalog.get_connector("src").state == "FAILED", 90, what="FAILED")
    assert [s for s, _e in events_of(worker, "src")].count("RESTARTING") == 2
    assert worker.catalog.get_connector("src").last_error
    pg_own.resume()
    pg_sql(src, "INSERT INTO items VALUES (51, 51)")
    run(worker, "RESTART CONNECTOR src")
    wait_until(lambda: running(worker, "src"), 90, what="RUNNING after RESTART")
    wait_until(lambda: read_parquet_rows(worker.home / "streams/few") == [(51, 51)], 90)
