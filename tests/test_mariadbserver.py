"""Self-test of the private MariaDB fixture: ROW binary logging is on, row changes can be read
back from the binlog with mysql-replication, and halt()/resume() make an outage."""

from __future__ import annotations

import pymysql
import pytest

from tests.mariadbserver import create_database, mariadb_binlog  # noqa: F401 (fixture)

DB = "connectql_mariadbserver_selftest"


def _variables(conn, *names: str) -> dict[str, str]:
    with conn.cursor() as cur:
        placeholders = ", ".join(["%s"] * len(names))
        cur.execute(f"SHOW GLOBAL VARIABLES WHERE Variable_name IN ({placeholders})", names)
        return dict(cur.fetchall())


def test_binary_logging_is_row_based(mariadb_binlog):  # noqa: F811
    conn = mariadb_binlog.connect()
    try:
        v = _variables(conn, "log_bin", "binlog_format", "binlog_row_image", "server_id")
        assert v == {
            "log_bin": "ON",
            "binlog_format": "ROW",
            "binlog_row_image": "FULL",
            "server_id": "1",
        }
        with conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS")
            log_file, log_pos = cur.fetchone()[:2]
        assert log_file.startswith("binlog.") and log_pos >= 4
    finally:
        conn.close()


def test_row_changes_read_back_from_binlog(mariadb_binlog):  # noqa: F811
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    create_database(mariadb_binlog, DB)
    conn = mariadb_binlog.connect(DB)
    try:
        with conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20))")
            cur.execute("SHOW MASTER STATUS")
            log_file, log_pos = cur.fetchone()[:2]
            cur.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
            cur.execute("UPDATE t SET name = 'bb' WHERE id = 2")
            cur.execute("DELETE FROM t WHERE id = 1")
    finally:
        conn.close()

    stream = BinLogStreamReader(
        connection_settings=mariadb_binlog.connection_settings(),
        server_id=4242,
        log_file=log_file,
        log_pos=log_pos,
        resume_stream=True,
        blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        only_schemas=[DB],
    )
    try:
        # binlog_row_metadata is NO_LOG (the default): names are UNKNOWN_COLn, compare values
        changes = []
        for event in stream:
            assert (event.schema, event.table) == (DB, "t")
            for row in event.rows:
                if isinstance(event, UpdateRowsEvent):
                    before = tuple(row["before_values"].values())
                    after = tuple(row["after_values"].values())
                    changes.append(("update", before, after))
                elif isinstance(event, WriteRowsEvent):
                    changes.append(("insert", tuple(row["values"].values())))
                else:
                    changes.append(("delete", tuple(row["values"].values())))
    finally:
        stream.close()
    assert changes == [
        ("insert", (1, "a")),
        ("insert", (2, "b")),
        ("update", (2, "b"), (2, "bb")),
        ("delete", (1, "a")),
    ]


def test_halt_and_resume(mariadb_binlog):  # noqa: F811
    create_database(mariadb_binlog, DB)
    conn = mariadb_binlog.connect(DB)
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE kept (id INT PRIMARY KEY)")
        cur.execute("INSERT INTO kept VALUES (7)")
    port = mariadb_binlog.port

    mariadb_binlog.halt()
    try:
        with pytest.raises(pymysql.err.OperationalError):
            with conn.cursor() as cur:
                cur.execute("SELECT 1")
        with pytest.raises(pymysql.err.OperationalError):
            mariadb_binlog.connect(connect_timeout=2)
    finally:
        conn.close()
        mariadb_binlog.resume()

    assert mariadb_binlog.port == port
    conn = mariadb_binlog.connect(DB)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id FROM kept")
            assert cur.fetchall() == ((7,),)
            cur.execute("SHOW GLOBAL VARIABLES LIKE 'log_bin'")
            assert cur.fetchone() == ("log_bin", "ON")
    finally:
        conn.close()
