"""A MariaDB cdc source of table patterns against the real server, with a sink of the streams'
pattern: a table created while both run is found through the binlog's tables, snapshotted in
chunks between the log's batches while it changes, and followed; a snapshot asked over HTTP
(POST /connectors/{name}/snapshot, as ALTER ... SNAPSHOT TABLE) or by a row of the signal table
reads one again, ALTER ... SET (table = ...) changes the list, and a table dropped ends its stream's
changes without failing the connector."""

from __future__ import annotations

import json

import psycopg
from starlette.testclient import TestClient

from connectql.api.app import build
from connectql.api.routes import Routes
from connectql.connectors.relational import signals
from tests.helpers import read_parquet_rows, run, wait_until, while_changing
from tests.mariadbserver import mariadb_binlog  # noqa: F401 (fixture)
from tests.test_following import table_changes
from tests.test_mysql import binlog_db, pg_db, pg_rows  # noqa: F401 (fixtures)

SNAPSHOT_ROWS = "SELECT count(*) FROM t WHERE __op = 'r'"


def _rows(db, statement: str) -> list[tuple]:
    return [tuple(r) for r in db.sql(statement)]


def _equal(db, pg_info: str, table: str, columns: str, timeout: float = 120) -> None:
    query = f"SELECT {columns} FROM {table} ORDER BY 1"
    want = _rows(db, query)
    wait_until(
        lambda: [tuple(r) for r in pg_rows(pg_info, query) or []] == want,
        timeout=timeout,
        what=f"{table} equal in the target",
        diagnose=lambda: (len(pg_rows(pg_info, query) or []), len(want)),
    )


def test_tables_found_resnapshotted_retabled_and_dropped_on_mariadb(worker, binlog_db, pg_db):  # noqa: F811
    pg_name, pg_info = pg_db
    binlog_db.sql(signals.CREATE.format(name="cq_signals"))
    binlog_db.sql("CREATE TABLE n_a (id INT PRIMARY KEY, v VARCHAR(20))")
    binlog_db.sql("INSERT INTO n_a SELECT seq, CONCAT('a', seq) FROM seq_1_to_300")
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR msrc FROM mysql INTO mm WITH ({binlog_db.options()},
          table = 'n_*', 'batch.rows' = 700, 'signal.table' = 'cq_signals');
        CREATE SINK CONNECTOR mout TO postgres WITH (host = '127.0.0.1',
          database = '{pg_name}', streams = 'mm_*', table = '${{table}}');
        """,
    )
    wait_until(lambda: pg_rows(pg_info, "SELECT count(*) FROM n_a") == [(300,)], timeout=120)
    binlog_db.sql("CREATE TABLE n_b (id INT PRIMARY KEY, v VARCHAR(20), n INT)")
    binlog_db.sql("INSERT INTO n_b SELECT seq, CONCAT('b', seq), seq FROM seq_1_to_4000")
    joined = lambda: wait_until(  # noqa: E731
        lambda: "mm_n_b" in worker.catalog.get_connector("mout").streams,
        timeout=90,
        what="the new table's stream to join the sink",
    )
    while_changing(binlog_db.sql, table_changes, 120, joined)
    _equal(binlog_db, pg_info, "n_a", "id, v")
    _equal(binlog_db, pg_info, "n_b", "id, v, n")
    entry = worker.catalog.get_connector("msrc")
    assert entry.tables == ("n_a", "n_b") and entry.tables_added == ("n_b",), entry
    events = run(worker, "SELECT reason FROM connector_events WHERE connector = 'msrc'")[0].rows
    assert any("n_b found" in r for (r,) in events), events
    snapshotted = read_parquet_rows(worker.home / "streams/mm_n_b", SNAPSHOT_ROWS)[0][0]
    assert snapshotted > 0

    # POST .../snapshot (ALTER ... SNAPSHOT TABLE): rows lost in the target come back while n_b keeps changing
    with psycopg.connect(pg_info, autocommit=True) as c:
        c.execute("DELETE FROM n_b WHERE id % 3 = 0")
    api = TestClient(build(Routes(worker, "test"), None))  # as ALTER ... SNAPSHOT TABLE
    refused = api.post("/connectors/msrc/snapshot", json={"tables": "n_b"})
    assert refused.status_code == 400 and '{"tables": [' in refused.json()["message"]
    unknown = api.post("/connectors/msrc/snapshot", json={"tables": ["nosuch"]})
    assert unknown.status_code == 409 and "nosuch is not a table it reads" in unknown.text
    said = api.post("/connectors/msrc/snapshot", json={"tables": ["n_b"]})
    assert said.status_code == 202 and "snapshot of n_b asked" in said.json()["message"], said
    for i in range(20):
        binlog_db.sql(f"UPDATE n_b SET v = 'again{i}' WHERE id % 50 = {i}")
        binlog_db.sql(f"INSERT INTO n_b VALUES ({60000 + i}, 'late', {i})")
    _equal(binlog_db, pg_info, "n_b", "id, v, n")
    again = read_parquet_rows(worker.home / "streams/mm_n_b", SNAPSHOT_ROWS)[0][0]
    assert again >= snapshotted + 3000, (again, snapshotted)

    # a row in the signal table asks for the same, once, whatever ids were served before
    with psycopg.connect(pg_info, autocommit=True) as c:
        c.execute("DELETE FROM n_b WHERE id % 4 = 1")
    signal = json.dumps({"data-collections": [f"{binlog_db.name}.n_b"]})
    binlog_db.sql(f"INSERT INTO cq_signals VALUES ('s-1', 'execute-snapshot', '{signal}')")
    binlog_db.sql("UPDATE n_b SET v = 'signalled' WHERE id = 2")
    _equal(binlog_db, pg_info, "n_b", "id, v, n")
    thrice = read_parquet_rows(worker.home / "streams/mm_n_b", SNAPSHOT_ROWS)[0][0]
    assert thrice >= again + 3000, (thrice, again)

    # ALTER ... SET (table = ...): m_c added (read whole), n_a left out, n_b goes on as it was
    binlog_db.sql("CREATE TABLE m_c (k VARCHAR(10) PRIMARY KEY, n INT)")
    binlog_db.sql("INSERT INTO m_c SELECT CONCAT('k', seq), seq FROM seq_1_to_700")
    said = run(worker, "ALTER CONNECTOR msrc SET (table = 'n_b, m_c')")[0].message
    assert "m_c added" in said and "n_a no longer read" in said, said
    binlog_db.sql("INSERT INTO n_b VALUES (50000, 'after', 1)")
    binlog_db.sql("UPDATE n_a SET v = 'not read' WHERE id = 1")
    binlog_db.sql("UPDATE m_c SET n = -1 WHERE k = 'k7'")
    _equal(binlog_db, pg_info, "m_c", "k, n")
    after = "SELECT v FROM n_b WHERE id = 50000"
    wait_until(lambda: pg_rows(pg_info, after) == [("after",)], timeout=60, what="n_b goes on")
    assert pg_rows(pg_info, "SELECT v FROM n_a WHERE id = 1") != [("not read",)]

    # DROP TABLE: m_c's changes end, the connector and n_b go on
    binlog_db.sql("DROP TABLE m_c")
    binlog_db.sql("INSERT INTO n_b VALUES (50001, 'after drop', 1)")
    after = "SELECT v FROM n_b WHERE id = 50001"
    wait_until(lambda: pg_rows(pg_info, after) == [("after drop",)], timeout=60, what="n_b on")
    entry = worker.catalog.get_connector("msrc")
    assert entry.state == "RUNNING" and "m_c" in entry.tables_failed, entry
    dropped = "SELECT state, error FROM connector_tables WHERE connector = 'msrc'"
    rows = dict(run(worker, dropped + " AND \"table\" = 'm_c'")[0].rows)
    assert "dropped" in rows.get("stopped", ""), rows
