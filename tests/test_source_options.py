"""Database source options whose effect shows only on the server: the postgres slot's name and
heartbeat, the mysql binlog client's server id and heartbeat, and polling by a timestamp
column: each is set, and its effect observed where the server shows it."""

from __future__ import annotations

import json

import psycopg
import pytest

from tests.helpers import read_parquet_rows, run, wait_until
from tests.mariadbserver import create_database as create_mariadb
from tests.mariadbserver import mariadb_binlog  # noqa: F401 (a fixture)
from tests.pgserver import create_database

pytestmark = pytest.mark.spark


def pg(info: str, statement: str):
    with psycopg.connect(info, autocommit=True) as c:
        cur = c.execute(statement)
        return cur.fetchall() if cur.description else None


def offset(worker, name: str) -> dict:
    rows = worker.catalog.query(
        "SELECT committed_offset FROM connector_offsets WHERE connector = ?", [name]
    )[1]
    return json.loads(rows[0][0]) if rows and rows[0][0] else {}


def test_postgres_slot_name_and_heartbeat(worker, pg_logical):
    src = create_database(pg_logical.conninfo(), "cq_opt_src")
    pg(src, "CREATE TABLE quiet (id int PRIMARY KEY); INSERT INTO quiet VALUES (1)")
    pg(src, "CREATE TABLE busy (id serial PRIMARY KEY, v text)")
    slot = "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'cq_named'"
    run(
        worker,
        f"""CREATE SOURCE CONNECTOR q FROM postgres INTO q WITH (host = '127.0.0.1',
          port = {pg_logical.port}, user = 'postgres', database = 'cq_opt_src', table = 'quiet',
          'slot.name' = 'cq_named', 'heartbeat.interval.ms' = 1000)""",
    )
    try:
        wait_until(lambda: read_parquet_rows(worker.home / "streams/q") == [(1, 1)], 120)
        assert pg(src, slot), "the slot is named by slot.name"
        # WAL of a table the connector does not capture: only the heartbeat moves the slot on
        pg(src, "INSERT INTO busy (v) SELECT repeat('x', 100) FROM generate_series(1, 2000)")
        written = pg(src, "SELECT pg_current_wal_lsn()")[0][0]
        moved = f"SELECT confirmed_flush_lsn >= '{written}' FROM pg_replication_slots"
        wait_until(lambda: pg(src, moved + " WHERE slot_name = 'cq_named'")[0][0], 60)
    finally:
        run(worker, "DROP CONNECTOR q")
    assert not pg(src, slot), "DROP CONNECTOR drops the named slot"


def test_mysql_timestamp_column_server_id_and_heartbeat(worker, mariadb_binlog):  # noqa: F811
    db = create_mariadb(mariadb_binlog, "cq_opt")
    with mariadb_binlog.connect(db) as c, c.cursor() as cur:
        cur.execute("CREATE TABLE t (id int PRIMARY KEY, v text, at datetime(6))")
        cur.execute("INSERT INTO t VALUES (1, 'a', '2024-01-01'), (2, 'b', '2024-01-01')")
        cur.execute("CREATE TABLE quiet (id int PRIMARY KEY)")
        cur.execute("CREATE TABLE busy (id int AUTO_INCREMENT PRIMARY KEY, v text)")
    conn = f"host = '127.0.0.1', port = {mariadb_binlog.port}, user = 'root', database = '{db}'"
    run(
        worker,
        f"""CREATE SOURCE CONNECTOR ts FROM mysql INTO ts WITH ({conn}, table = 't',
          mode = 'incremental', 'timestamp.column' = 'at', 'poll.interval.ms' = 200);
        CREATE SOURCE CONNECTOR hb FROM mysql INTO hb WITH ({conn}, table = 'quiet',
          'server.id' = 4711, 'heartbeat.interval.ms' = 1000)""",
    )
    stream = worker.home / "streams/ts"
    wait_until(lambda: read_parquet_rows(stream) == [(2, 2)], 120, what="the first poll")
    with mariadb_binlog.connect(db) as c, c.cursor() as cur:
        cur.execute("UPDATE t SET v = 'b2', at = '2024-01-02' WHERE id = 2")
        cur.execute("UPDATE t SET v = 'a2' WHERE id = 1")  # the same time: not picked up
    rows = "SELECT id, v FROM t ORDER BY id, v"
    wait_until(lambda: len(read_parquet_rows(stream, rows)) == 3, 60, what="the newer row")
    assert read_parquet_rows(stream, rows) == [(1, "a"), (2, "b"), (2, "b2")]

    wait_until(lambda: offset(worker, "hb").get("binlog"), 120, what="the binlog source's offset")
    with mariadb_binlog.connect() as c, c.cursor() as cur:
        cur.execute("SHOW PROCESSLIST")
        dumps = [r for r in cur.fetchall() if r[4] == "Binlog Dump"]
        cur.execute(f"INSERT INTO {db}.busy (v) VALUES ('x'), ('y')")
        cur.execute("SHOW MASTER STATUS")
        log_file, log_pos = cur.fetchone()[:2]
    assert dumps, "the binlog source follows the log"
    with mariadb_binlog.connect() as c, c.cursor() as cur:
        cur.execute("SHOW SLAVE HOSTS")
        hosts = {(r[0], r[1]) for r in cur.fetchall()}
        assert (4711, "connectql hb") in hosts, f"the client registers as server.id: {hosts}"

    def past_busy():
        at = offset(worker, "hb").get("binlog") or {}
        return (at.get("file"), at.get("pos", 0)) >= (log_file, log_pos)

    wait_until(past_busy, 60, what="the heartbeat moving the offset past other tables' writes")
