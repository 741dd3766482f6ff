"""Catalog: versioned schema, connector/stream records, redaction, lifecycle transitions."""

from __future__ import annotations

import gc
import json
import os
import signal
import threading
import time
from datetime import datetime, timedelta

import duckdb
import pytest

from connectql.catalog import schema, states
from connectql.catalog.query import rewrite, run_select
from connectql.catalog.redact import statement_text
from connectql.catalog.secrets import SecretStore
from connectql.catalog.store import ENTRY_SQL, Catalog, ConnectorEntry, StreamEntry
from connectql.catalog.streams import committed_files
from connectql.errors import CatalogError, StateError, ValidationError
from connectql.grammar.ast import SecretRef
from connectql.grammar.parser import parse_script


@pytest.fixture
def cat(tmp_path):
    c = Catalog(tmp_path / "c.duckdb")
    yield c
    c.close()


def test_migrations_run_once_and_record_the_version(tmp_path):
    path = tmp_path / "c.duckdb"
    Catalog(path).close()
    again = Catalog(path)  # an existing home: no migration re-runs (it would fail on CREATE)
    rows = again.query("SELECT version FROM schema_version ORDER BY 1")[1]
    assert rows == [(v,) for v, _doc, _sql in schema.MIGRATIONS]
    again.close()


def test_a_new_migration_is_applied_to_an_existing_home(tmp_path, monkeypatch):
    path = tmp_path / "c.duckdb"
    Catalog(path).close()
    extra = (schema.LATEST + 1, "test column", ["ALTER TABLE connectors ADD COLUMN note VARCHAR"])
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, extra])
    c = Catalog(path)
    assert "note" in c.query("SELECT * FROM connectors")[0]
    assert max(r[0] for r in c.query("SELECT version FROM schema_version")[1]) == schema.LATEST + 1
    c.close()


def test_options_are_stored_as_given_but_shown_redacted(cat):
    opts = {
        "password": "hunter2",
        "ssl.key": "k3y",
        "host": "db",
        "token": SecretRef("tok"),
        "user": "${env:DB_USER}",
        "db.password": "${env:PW}",
        "x.password": "${not-a-reference",
        "y.password": "${env:PW}-and-more",
        "z.password": "${env:PW:-demo-pw}",
        "port": "${env:PORT:-5432}",
    }
    cat.add_connector(ConnectorEntry("c1", "source", "datagen", "s", opts))
    assert cat.get_connector("c1").options == opts
    shown = json.loads(cat.query("SELECT options FROM connectors")[1][0][0])
    assert shown == {
        "password": "****",
        "ssl.key": "****",
        "host": "db",
        "token": "SECRET tok",
        "user": "${env:DB_USER}",
        "db.password": "${env:PW}",
        "x.password": "****",
        "y.password": "****",
        "z.password": "${env:PW:-****}",  # a default written into a reference is a value
        "port": "${env:PORT:-5432}",
    }


def test_a_statement_is_echoed_with_the_secret_values_written_into_it_masked():
    script = (
        "CREATE SECRET pw AS 'it''s-hunter2';\n"
        'EXPLAIN CREATE SINK CONNECTOR c TO postgres FROM s WITH (password = "hunter3",'
        " 'ssl.key' = 'k3y', user = 'hunter', token = SECRET pw, p = '${env:PW}',"
        " 'a.password' = ${env:A:-d3mo-pw});\n"
        "SET 'spark.hadoop.fs.s3a.secret.key' = 's3cr3t'"
    )
    assert [statement_text(s) for s in parse_script(script)] == [
        "CREATE SECRET pw AS '****'",
        'EXPLAIN CREATE SINK CONNECTOR c TO postgres FROM s WITH (password = "****",'
        " 'ssl.key' = '****', user = 'hunter', token = SECRET pw, p = '${env:PW}',"
        " 'a.password' = ${env:A:-****})",
        "SET 'spark.hadoop.fs.s3a.secret.key' = '****'",
    ]


def test_only_the_owner_may_read_the_catalog_file(tmp_path):
    path = tmp_path / "c.duckdb"
    Catalog(path).close()
    assert path.stat().st_mode & 0o777 == 0o600
    path.chmod(0o644)  # a home from before, or copied
    Catalog(path).close()
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_select_duckdb_refuses_is_the_users_error_not_the_servers(cat):
    for sql, said in [
        ("select", "SELECT clause without selection list"),
        ("SELECT nope FROM connectors", "nope"),
    ]:
        with pytest.raises(ValidationError, match=f"SELECT failed: .*{said}"):
            run_select(cat, sql)


def test_user_select_cannot_read_private_tables(cat):
    cat.add_connector(ConnectorEntry("c1", "source", "datagen", "s", {"password": "hunter2"}))
    for sql in [
        "SELECT * FROM connector_config",
        "SELECT * FROM settings",
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM main.connector_config",
        "SELECT * FROM nowhere",
    ]:
        with pytest.raises(ValidationError):
            run_select(cat, sql)
    cols, rows = run_select(cat, "SELECT name, options FROM connectors")
    assert "hunter2" not in str(rows) and rows[0][0] == "c1"


def test_unknown_table_error_names_it_and_lists_known(cat):
    with pytest.raises(ValidationError, match=r"unknown table or stream 'nope'.*connectors"):
        rewrite(cat, "SELECT * FROM nope")


def test_states_are_enforced_and_every_transition_is_an_event(cat):
    cat.add_connector(ConnectorEntry("c1", "source", "datagen", "s", {}))
    cat.set_state("c1", states.STARTING, "start")
    cat.set_state("c1", states.RUNNING, "started")
    cat.set_state("c1", states.FAILED, "boom", error="ValueError: bad")
    with pytest.raises(StateError, match="connector 'c1' is FAILED: it cannot become RUNNING"):
        cat.set_state("c1", states.RUNNING, "nope")
    events = cat.query("SELECT from_state, to_state, reason FROM connector_events ORDER BY time")[1]
    assert events == [
        (None, "CREATED", "created"),
        ("CREATED", "STARTING", "start"),
        ("STARTING", "RUNNING", "started"),
        ("RUNNING", "FAILED", "boom"),
    ]
    assert cat.get_connector("c1").last_error == "ValueError: bad"


def test_missing_connector_error_lists_known_names(cat):
    cat.add_connector(ConnectorEntry("alpha", "source", "datagen", "s", {}))
    with pytest.raises(CatalogError, match=r"no connector named 'beta' \(known: alpha\)"):
        cat.get_connector("beta")


def test_progress_updates_totals_metrics_and_offsets(cat):
    cat.add_connector(ConnectorEntry("c1", "source", "datagen", "s", {}))
    row = {
        "batch_id": 0,
        "started_at": None,
        "duration_ms": 5,
        "input_rows": 10,
        "input_rows_per_sec": 1.0,
        "processed_rows_per_sec": 2.0,
        "written_rows": 8,
        "filtered_rows": 2,
        "dead_lettered_rows": 0,
        "end_offset": '{"seq":10}',
        "latest_offset": '{"seq":30}',
        "lag": 20,
    }
    cat.record_progress("c1", row)
    cat.record_progress("c1", {**row, "batch_id": 1, "end_offset": '{"seq":20}', "lag": 10})
    assert cat.query("SELECT rows_total, lag FROM connectors")[1] == [(20, 10)]
    counts = "SELECT rows_written, rows_filtered, rows_dead_lettered FROM connectors"
    assert cat.query(counts)[1] == [(16, 4, 0)]
    assert cat.query("SELECT count(*) FROM connector_metrics")[1] == [(2,)]
    assert cat.query("SELECT committed_offset FROM connector_offsets")[1] == [('{"seq":20}',)]
    # batch 2's empty progress (a trigger without data, then a stop), then batch 2 for real
    empty = {**row, "batch_id": 2, "input_rows": 0, "written_rows": 0, "filtered_rows": 0}
    cat.record_progress("c1", empty)
    cat.record_progress("c1", {**row, "batch_id": 2})
    batches = "SELECT batch_id, input_rows FROM connector_metrics ORDER BY batch_id"
    assert cat.query(batches)[1] == [(0, 10), (1, 10), (2, 10)]
    rate = "SELECT rows_per_sec FROM connectors"
    assert cat.query(rate)[1] == [(0,)]  # CREATED: no query runs, whatever a late batch says
    cat.set_state("c1", "STARTING", "t")
    cat.set_state("c1", "RUNNING", "t")
    cat.record_progress("c1", {**row, "batch_id": 3})
    assert cat.query(rate)[1] == [(2.0,)]
    cat.set_state("c1", "PAUSED", "t")
    assert cat.query(rate)[1] == [(0,)]  # not the last batch's stale rate
    cat.record_progress("c1", {**row, "batch_id": 3})  # a batch reported after the pause
    assert cat.query(rate)[1] == [(0,)]


def test_committed_files_follow_the_metadata_log_not_the_directory(tmp_path):
    meta = tmp_path / "_spark_metadata"
    meta.mkdir()
    good = tmp_path / "part-0.parquet"
    duckdb.sql(f"COPY (SELECT 1 AS x) TO '{good}' (FORMAT parquet)")
    (tmp_path / "part-1.parquet").write_bytes(b"")  # what a killed batch leaves behind
    entry = {"path": f"file://{good}", "size": 1, "isDir": False, "action": "add"}
    (meta / "0").write_text("v1\n" + json.dumps(entry) + "\n")
    assert committed_files(tmp_path) == [str(good)]


def test_compacted_metadata_log_is_read_with_later_batches(tmp_path):
    meta = tmp_path / "_spark_metadata"
    meta.mkdir()
    entry = '{"path":"file:///d/%s","action":"add"}'
    (meta / "0").write_text("v1\n" + entry % "a")
    (meta / "9.compact").write_text("v1\n" + entry % "a" + "\n" + entry % "b")
    (meta / "10").write_text("v1\n" + entry % "c")
    assert committed_files(tmp_path) == ["/d/a", "/d/b", "/d/c"]


def test_streams_round_trip(cat):
    cat.add_stream(StreamEntry("s", "/x/s", "`id` BIGINT", '{"fields":[]}', created_by="c"))
    assert cat.get_stream("s").schema == "`id` BIGINT"
    with pytest.raises(CatalogError, match="no stream named 'zz'"):
        cat.get_stream("zz")


def test_secret_store_is_owner_only(tmp_path):
    store = SecretStore(tmp_path / "secrets.json")
    store.put("pg", "s3cret")
    assert store.get("pg") == "s3cret" and store.names() == ["pg"]
    assert (tmp_path / "secrets.json").stat().st_mode & 0o777 == 0o600
    with pytest.raises(CatalogError, match="no secret named 'nope'"):
        store.get("nope")


def test_ctrl_c_during_a_catalog_query_is_a_keyboard_interrupt(tmp_path):
    """DuckDB reports Ctrl-C as RuntimeError('Query interrupted'); `connectql run` must see the
    KeyboardInterrupt that stops it gracefully, not a failure."""
    cat = Catalog(tmp_path / "c.duckdb")
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        # a second or more of work (DuckDB may notice the signal only when it ends)
        cat.query("SELECT sum(a.range * b.range) FROM range(100000000) a, range(10) b")
    timer.join()
    assert cat.query("SELECT 42") == (["42"], [(42,)])  # the catalog is still usable
    cat.close()


def test_memoised_reads_follow_every_write(cat):
    """Catalog.read answers from its memo until a statement may have changed what it read: a
    batch's figures leave the connectors' definitions memoised but not the status figures, and
    a read inside an open transaction is never kept for other threads."""
    cat.add_connector(ConnectorEntry("a", "source", "datagen", "s", {}))
    status = "SELECT name, rows_total FROM connectors"
    assert cat.read(status, figures=True)[1] == [("a", 0)]
    entries = cat.connectors()
    cat.add_rows_lost("a", 3)  # a figure: the definitions read stays good
    mark, _cols, _rows = cat._memo[(ENTRY_SQL + " ORDER BY c.name", (), False)]
    assert mark == cat._mark(figures=False) and cat.connectors() == entries
    assert cat._memo[(status, (), True)][0] != cat._mark(figures=True)
    cat.execute("UPDATE connectors SET rows_total = 7")
    assert cat.read(status, figures=True)[1] == [("a", 7)]
    cat.set_state("a", states.STARTING, "test")
    assert [e.state for e in cat.connectors()] == [states.STARTING]
    with cat.lock:
        cat.con.execute("BEGIN TRANSACTION")
        cat.con.execute("UPDATE connectors SET rows_total = 8")
        assert cat.read(status, figures=True)[1] == [("a", 8)]  # its own write, seen
        cat.con.execute("ROLLBACK")
    assert cat.read(status, figures=True)[1] == [("a", 7)]
    cat.fence("another worker took over")
    with pytest.raises(CatalogError, match="closed to this worker"):
        cat.read(status, figures=True)


def test_reads_do_not_wait_for_a_statement_under_way(cat):
    """A read from another thread sees what is committed, while a statement holds the lock
    with its transaction open; the statement's own thread sees its writes."""
    cat.add_connector(ConnectorEntry("a", "source", "datagen", "s", {}))
    status = "SELECT rows_total FROM connectors"
    seen = []
    with cat.lock:
        cat.con.execute("BEGIN TRANSACTION")
        cat.con.execute("UPDATE connectors SET rows_total = 5")
        reader = threading.Thread(target=lambda: seen.append(cat.read(status, figures=True)[1]))
        reader.start()
        reader.join(10)
        assert not reader.is_alive() and seen == [[(0,)]]
        assert cat.read(status, figures=True)[1] == [(5,)]
        cat.con.execute("COMMIT")
    assert cat.read(status, figures=True)[1] == [(5,)]


def test_a_threads_cursor_goes_with_the_thread(cat):
    cat.add_connector(ConnectorEntry("a", "source", "datagen", "s", {}))
    for _ in range(3):
        reader = threading.Thread(target=lambda: cat.read("SELECT 1", memo=False))
        reader.start()
        reader.join()
    gc.collect()
    assert len(cat._cursors) == 0


def test_close_interrupts_a_read_another_thread_is_making(tmp_path):
    """An API request reading the catalog while the worker closes it: the read is interrupted
    and the close goes through (DuckDB refuses to close a cursor that is busy)."""
    cat = Catalog(tmp_path / "catalog.duckdb")
    started, ended = threading.Event(), []

    def long_read():
        started.set()
        try:
            cat.read("SELECT count(*) FROM range(100000000000) a", memo=False)
            ended.append("finished")
        except BaseException as e:  # interrupted: DuckDB's error, or KeyboardInterrupt
            ended.append(type(e).__name__)

    reader = threading.Thread(target=long_read)
    reader.start()
    started.wait(5)
    time.sleep(0.5)  # the read is under way in DuckDB
    cat.close()
    reader.join(10)
    assert not reader.is_alive() and ended and ended != ["finished"], ended


def test_rows_per_sec_is_the_flow_over_the_last_seconds_not_a_batch_s_speed(cat):
    """A source trickling 100 records/s in small quick batches (40 rows every 0.4 s, an empty
    batch between, each taking 20 ms) shows about 100/s: not 2,000/s (a batch's rows over its
    duration), nor 0 after an empty batch; a lone long batch shows its rows over its time."""
    cat.add_connector(ConnectorEntry("t", "source", "datagen", "s", {}))
    cat.set_state("t", "STARTING", "t")
    cat.set_state("t", "RUNNING", "t")
    start = datetime(2026, 12, 7, 12, 0, 0)
    for b in range(60):
        cat.record_progress("t", {
            "batch_id": b, "started_at": start + timedelta(seconds=0.2 * b), "duration_ms": 20,
            "input_rows": 40 if b % 2 == 0 else 0, "input_rows_per_sec": 0.0,
            "processed_rows_per_sec": 2000.0 if b % 2 == 0 else 0.0, "written_rows": 40 if b % 2 == 0 else 0,
            "filtered_rows": 0, "dead_lettered_rows": 0, "end_offset": None, "latest_offset": None,
        })  # fmt: skip
        if b >= 55:
            (rate,) = cat.query("SELECT rows_per_sec FROM connectors")[1][0]
            assert 90 <= rate <= 110, (b, rate)  # 40 rows every 0.4 s: 100/s
    cat.add_connector(ConnectorEntry("bulk", "source", "datagen", "s2", {}))
    cat.set_state("bulk", "STARTING", "t")
    cat.set_state("bulk", "RUNNING", "t")
    one = {"batch_id": 0, "started_at": start, "duration_ms": 7000, "input_rows": 1_000_000,
           "input_rows_per_sec": 0.0, "processed_rows_per_sec": 142857.0, "written_rows": 1_000_000,
           "filtered_rows": 0, "dead_lettered_rows": 0, "end_offset": None, "latest_offset": None}  # fmt: skip
    cat.record_progress("bulk", one)
    rate = cat.query("SELECT rows_per_sec FROM connectors WHERE name = 'bulk'")[1][0][0]
    assert round(rate) == 142857


def test_connector_tables_says_where_each_table_and_stream_is(cat):
    """A cdc source of three tables mid-snapshot (one stopped), then following the log; a
    sink of two streams, one stopped: a row each, in connector_tables."""
    cat.add_connector(
        ConnectorEntry("shop", "source", "postgres", "shop", {}, tables=("a", "b", "s.c", "d"))
    )
    cat.add_connector(
        ConnectorEntry("out", "sink", "postgres", None, {}, tables=("shop_a", "shop_b"))
    )
    cat.fail_table("shop", "s.c", "a value it cannot read")
    cat.fail_table("out", "shop_b", "the target refuses a row")
    view = 'SELECT "table", stream, state, snapshot_after, error FROM connector_tables'
    shop = f"{view} WHERE connector = 'shop' ORDER BY stream"
    assert [r[2] for r in cat.query(shop)[1]] == ["waiting", "waiting", "waiting", "stopped"]
    row = {
        "batch_id": 0, "started_at": None, "duration_ms": 5, "input_rows": 10,
        "input_rows_per_sec": 1.0, "processed_rows_per_sec": 2.0, "written_rows": 10,
        "filtered_rows": 0, "dead_lettered_rows": 0, "latest_offset": None,
        "end_offset": json.dumps(
            {"phase": "snapshot", "table": "b", "after": ["7"], "read": 7, "estimate": 20}
        ),
    }  # fmt: skip
    cat.record_progress("shop", row)
    assert cat.query(shop)[1] == [
        ("a", "shop_a", "snapshotted", None, None),
        ("b", "shop_b", "snapshotting", '["7"]', None),
        ("d", "shop_d", "waiting", None, None),
        ("s.c", "shop_s_c", "stopped", None, "a value it cannot read"),
    ]
    reads = "SELECT rows_read, rows_estimate FROM connector_tables WHERE \"table\" = 'b'"
    assert cat.query(reads)[1] == [(7, 20)]
    cat.record_progress("shop", {**row, "batch_id": 1, "end_offset": '{"phase": "stream"}'})
    assert [r[2] for r in cat.query(shop)[1]] == ["streaming"] * 3 + ["stopped"]
    # b read again while the log flows (added, or ALTER ... SNAPSHOT TABLE)
    again = {"phase": "stream", "tables": ["a", "d"], "catchup": ["b", ["7"], ["9"], 1]}
    cat.record_progress("shop", {**row, "batch_id": 2, "end_offset": json.dumps(again)})
    assert [r[2:4] for r in cat.query(shop)[1]][:2] == [
        ("streaming", None),
        ("snapshotting", '["7"]'),
    ]
    assert cat.query(reads)[1] == [(None, None)]  # an offset of before the progress fields
    again["catchup"] += [40, 90]
    cat.record_progress("shop", {**row, "batch_id": 3, "end_offset": json.dumps(again)})
    assert cat.query(reads)[1] == [(40, 90)]
    out = f"{view} WHERE connector = 'out' ORDER BY stream"
    assert cat.query(out)[1] == [
        ("shop_a", "shop_a", "writing", None, None),
        ("shop_b", "shop_b", "stopped", None, "the target refuses a row"),
    ]
    assert run_select(cat, "SELECT count(*) FROM connector_tables")[1] == [(6,)]
