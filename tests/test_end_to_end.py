"""End to end with a real SparkSession: SQL in, rows out, checkpoints honoured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from connectql.catalog.store import Catalog
from connectql.errors import ConnectQLError, ParseError, PlanError, ValidationError
from connectql.worker.worker import Worker
from tests.helpers import lag_of, read_parquet_rows, run, wait_until

pytestmark = pytest.mark.spark


def state(worker, name):
    return worker.catalog.get_connector(name).state


def test_batch_script_moves_every_row_through_stream_and_transform(worker, tmp_path):
    out = tmp_path / "out"
    results = run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR gen FROM datagen INTO orders WITH (
          'rows.total' = 5000, 'tasks.max' = 3, run = 'once', seed = 7,
          fields = "id BIGINT SEQUENCE, qty INT RANDOM(1, 20), status STRING CHOICE('a', 'b')");
        CREATE SINK CONNECTOR big TO file
          AS SELECT id, qty * 2 AS double_qty FROM orders WHERE qty > 10
          WITH (path = '{out}', format = 'parquet', run = 'once');
        SELECT count(*), count(DISTINCT id), min(id), max(id) FROM orders;
        SELECT name, state, rows_total FROM connectors ORDER BY name;
    """,
    )
    assert results[2].rows == [(5000, 5000, 0, 4999)]
    assert results[3].rows == [("big", "FINISHED", 5000), ("gen", "FINISHED", 5000)]
    expected = read_parquet_rows(
        worker.home / "streams/orders", "SELECT count(*), sum(qty * 2) FROM t WHERE qty > 10"
    )
    got = read_parquet_rows(out, "SELECT count(*), sum(double_qty) FROM t")
    assert got == expected and got[0][0] > 0
    assert read_parquet_rows(out, "SELECT min(double_qty) FROM t")[0][0] > 20
    counts = worker.catalog.query(
        "SELECT name, rows_total, rows_written, rows_filtered, rows_dead_lettered"
        " FROM connectors ORDER BY name"
    )[1]
    assert counts == [("big", 5000, got[0][0], 5000 - got[0][0], 0), ("gen", 5000, 5000, 0, 0)]
    per_batch = worker.catalog.query(
        "SELECT sum(input_rows), sum(written_rows + filtered_rows + dead_lettered_rows)"
        " FROM connector_metrics WHERE connector = 'big'"
    )[1]
    assert per_batch == [(5000, 5000)]


def test_a_restarted_worker_resumes_from_the_checkpoint_without_gaps_or_duplicates(spark, home):
    first = Worker(home)
    run(
        first,
        """CREATE SOURCE CONNECTOR gen FROM datagen INTO s
                  WITH ('rows.total' = 5000, 'rows.per.second' = 500, 'tasks.max' = 2)""",
    )
    wait_until(
        lambda: (read_parquet_rows(home / "streams/s") or [(0,)])[0][0] > 0,
        what="first rows in the stream",
    )
    first.close(stop_spark=False)
    partial = read_parquet_rows(home / "streams/s")[0][0]
    assert 0 < partial < 5000
    assert first_state(home) == "STOPPED"

    second = Worker(home)
    try:
        assert second.resume_all() == ["gen"]
        wait_until(lambda: read_parquet_rows(home / "streams/s")[0][0] >= 5000, what="5000 rows")
        assert read_parquet_rows(home / "streams/s") == [(5000, 5000)]

        def committed_seq():  # reported by the listener once the batch is done: may lag
            offsets = second.catalog.query("SELECT committed_offset FROM connector_offsets")[1]
            return json.loads(offsets[0][0])["seq"]

        wait_until(lambda: committed_seq() == 5000, 30, what="the offset 5000 recorded")
    finally:
        second.close(stop_spark=False)


def _gen_to_file(home, tmp_path, once: bool) -> Worker:
    """A worker whose retention pass is an hour away, running 3,000 generated rows into a
    file sink (both run = 'once' when `once`)."""
    first = Worker(home)
    run(first, "SET stream.retention.check.interval = '1 h'")
    first.close(stop_spark=False)
    w = Worker(home)
    until = ", run = 'once'" if once else ""
    run(
        w,
        f"""CREATE SOURCE CONNECTOR gen FROM datagen INTO s
            WITH ('rows.total' = 3000, 'rows.per.batch' = 1000{until});
        CREATE SINK CONNECTOR out TO file FROM s
            WITH (path = '{tmp_path / "out"}', format = 'parquet'{until});""",
    )
    return w


def test_a_finished_run_once_sink_shows_no_lag(spark, home, tmp_path):
    w = _gen_to_file(home, tmp_path, once=True)  # no pass: the lag is measured as it finishes
    try:
        w.wait_for_once()
        assert [lag_of(w, "out"), w.catalog.get_connector("out").state] == [0, "FINISHED"]
    finally:
        w.close(stop_spark=False)


def test_a_running_sink_that_caught_up_shows_no_lag_before_the_next_retention_pass(
    spark, home, tmp_path
):
    """Status truth (issue 49): a continuous sink's lag is measured again after its batches,
    not only by the retention pass (here an hour away), so once it has read every record it
    shows 0 while it runs on."""
    w = _gen_to_file(home, tmp_path, once=False)
    try:
        read = "SELECT rows_total FROM connectors WHERE name = 'out'"
        wait_until(lambda: run(w, read)[0].rows == [(3000,)], 60, what="every record read")
        wait_until(lambda: lag_of(w, "out") == 0, 15, what="the sink's lag measured as 0")
        assert w.catalog.get_connector("out").state == "RUNNING"
    finally:
        w.close(stop_spark=False)


def first_state(home):
    cat = Catalog(Path(home) / "catalog.duckdb")
    try:
        return cat.get_connector("gen").state
    finally:
        cat.close()


def test_running_the_same_batch_script_twice_keeps_exactly_rows_total(spark, home):
    script = """CREATE SOURCE CONNECTOR IF NOT EXISTS gen FROM datagen INTO s
                WITH ('rows.total' = 2000, run = 'once');
                SELECT count(*), count(DISTINCT id) FROM s;"""
    for _ in range(2):
        w = Worker(home)
        w.resume_all()
        assert run(w, script)[-1].rows == [(2000, 2000)]
        w.close(stop_spark=False)


def test_file_source_infers_the_schema_and_picks_up_new_files(worker, tmp_path):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.json").write_text('{"id": 1, "name": "x"}\n{"id": 2, "name": "y"}\n')
    run(
        worker,
        f"SET 'stream.retention.check.interval' = '1 s';"
        f" CREATE SOURCE CONNECTOR files FROM file INTO people"
        f" WITH (path = '{inbox}', format = 'json')",
    )
    stream = worker.home / "streams/people"
    wait_until(lambda: read_parquet_rows(stream) == [(2, 2)], what="first file")
    (inbox / "b.json").write_text('{"id": 3, "name": "z"}\n')
    wait_until(lambda: read_parquet_rows(stream) == [(3, 3)], what="the new file")
    assert state(worker, "files") == "RUNNING"
    assert worker.catalog.get_stream("people").schema == "`id` BIGINT, `name` STRING"
    # its lag: the files it has not read (a paused source reads none)
    wait_until(lambda: lag_of(worker, "files") == 0, what="lag 0")
    run(worker, "PAUSE CONNECTOR files")
    (inbox / "c.json").write_text('{"id": 4, "name": "w"}\n')
    (inbox / "_skipped.json").write_text("not data to Spark's file source\n")
    wait_until(lambda: lag_of(worker, "files") == 1, what="lag 1 while paused")
    run(worker, "RESUME CONNECTOR files")
    wait_until(lambda: read_parquet_rows(stream) == [(4, 4)], what="the file after RESUME")
    wait_until(lambda: lag_of(worker, "files") == 0, what="lag 0 again")


def test_csv_file_source_to_csv_sink_keeps_empty_strings(worker, tmp_path):
    inbox, out = tmp_path / "in", tmp_path / "out"
    inbox.mkdir()
    (inbox / "a.csv").write_text('id,note\n1,""\n2,hello\n')
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR csvin FROM file INTO notes
          WITH (path = '{inbox}', format = csv, schema = 'id INT, note STRING', run = once);
        CREATE SINK CONNECTOR csvout TO file FROM notes
          WITH (path = '{out}', format = json, run = once);
    """,
    )
    worker.wait_for_once()
    lines = sorted(
        (json.loads(line) for f in out.glob("part-*.json") for line in f.read_text().splitlines()),
        key=lambda r: r["id"],
    )
    assert lines == [{"id": 1, "note": ""}, {"id": 2, "note": "hello"}]


def test_a_second_source_with_another_schema_is_refused_and_leaves_nothing(worker):
    run(
        worker,
        "CREATE SOURCE CONNECTOR a FROM datagen INTO s"
        " WITH ('rows.total' = 10, run = once, fields = 'id BIGINT SEQUENCE, x INT')",
    )
    with pytest.raises(
        PlanError,
        match=r"different schema into stream 's': only in the stream: x;"
        r" only in the new source: y; id is long in the stream"
        r" but integer in the new source",
    ):
        run(
            worker,
            "CREATE SOURCE CONNECTOR b FROM datagen INTO s"
            " WITH (fields = 'id INT SEQUENCE, y STRING')",
        )
    assert not worker.catalog.has_connector("b")
    assert not (worker.home / "checkpoints/b").exists()


@pytest.mark.parametrize(
    "sql, error, match",
    [
        (
            "CREATE SOURCE CONNECTOR bad FROM file INTO t WITH (path = '/nonexistent/dir', format = json)",
            PlanError,
            "cannot determine the schema of json data at /nonexistent/dir",
        ),
        (
            "CREATE SOURCE CONNECTOR bad FROM datagen INTO t WITH (fields = 'id BIGINT SEQENCE')",
            ValidationError,
            "column 'id'",
        ),
        (
            "CREATE SOURCE CONNECTOR bad FROM datagen INTO t WITH (run = once)",
            ValidationError,
            "needs rows.total",
        ),
        (
            "CREATE SOURCE CONNECTOR bad FROM mysql INTO t WITH (host = 'h')",
            ValidationError,
            "database",
        ),
        (
            "CREATE SINK CONNECTOR bad TO file AS SELECT nope FROM t WITH (path = '/tmp/x')",
            PlanError,
            "does not exist",
        ),
    ],
)
def test_a_creation_that_fails_leaves_no_entry_checkpoint_or_stream(worker, sql, error, match):
    with pytest.raises(error, match=match):
        run(worker, sql)
    assert worker.catalog.connectors() == []
    assert worker.catalog.streams() == []
    assert not (worker.home / "checkpoints/bad").exists()
    assert not (worker.home / "streams/t").exists()


def test_sink_transform_with_an_unknown_column_names_it(worker):
    run(worker, "CREATE SOURCE CONNECTOR a FROM datagen INTO s WITH ('rows.total' = 5, run = once)")
    with pytest.raises(PlanError, match="unknown column 'nope' in stream 's'"):
        run(
            worker,
            "CREATE SINK CONNECTOR b TO file AS SELECT id, nope FROM s WITH (path = '/tmp/x')",
        )
    assert [c.name for c in worker.catalog.connectors()] == ["a"]


def test_explain_show_describe_and_drop(worker):
    plan = run(
        worker,
        "EXPLAIN CREATE SOURCE CONNECTOR g FROM datagen INTO s"
        " WITH ('rows.total' = 10, 'tasks.max' = 2)",
    )[0]
    assert dict(plan.rows)["read"].startswith("format connectql_toolkit")
    assert worker.catalog.connectors() == [] and worker.catalog.streams() == []

    run(
        worker,
        "CREATE SECRET pw AS 'hunter2-secret';"
        "CREATE SOURCE CONNECTOR g FROM datagen INTO s WITH ('rows.total' = 10, run = once,"
        " fields = 'id BIGINT SEQUENCE');"
        "CREATE SINK CONNECTOR k TO file FROM s"
        " WITH (path = '/tmp/cql-k', run = once)",
    )
    worker.wait_for_once()
    shown = run(worker, "SHOW CONNECTORS LIKE 'g%'")[0]
    assert [r[0] for r in shown.rows] == ["g"]
    described = dict(run(worker, "DESCRIBE CONNECTOR g")[0].rows)
    assert described["state"] == "FINISHED" and described["option rows.total"] == "10"
    plugin = run(worker, "DESCRIBE PLUGIN datagen")[0]
    assert {"rows.total", "fields", "tasks.max"} <= {r[1] for r in plugin.rows}
    assert run(worker, "SHOW SECRETS")[0].rows == [("pw",)]
    assert "hunter2" not in str([r.rows for r in run(worker, "SHOW SECRETS; SHOW CONNECTORS")])

    with pytest.raises(ConnectQLError, match="used by connectors g, k"):
        run(worker, "DROP STREAM s")
    run(worker, "DROP CONNECTOR k; DROP CONNECTOR g; DROP STREAM s; DROP STREAM IF EXISTS s")
    assert worker.catalog.connectors() == [] and worker.catalog.streams() == []
    assert not (worker.home / "checkpoints/g").exists()
    events = worker.catalog.query(
        "SELECT to_state FROM connector_events WHERE connector = 'g' ORDER BY time"
    )[1]
    assert [e[0] for e in events][-1] == "DROPPED"


def test_a_script_with_a_syntax_error_runs_nothing(worker):
    with pytest.raises(ParseError) as err:
        run(worker, "CREATE STREAM a;\nCREATE STREAM b;\nCREAT STREAM c;")
    assert (err.value.line, err.value.column) == (3, 1)
    assert worker.catalog.streams() == []


def test_a_script_stops_at_its_first_failing_statement_and_names_it(worker):
    with pytest.raises(ConnectQLError, match=r"^script.sql:2: .*no stream: write INTO stream"):
        list(
            worker.run_script(
                "CREATE STREAM a;\nCREATE SOURCE CONNECTOR x FROM datagen WITH ();"
                "\nCREATE STREAM c;",
                "script.sql",
            )
        )
    assert [s.name for s in worker.catalog.streams()] == ["a"]


def test_a_sink_that_cannot_start_is_not_created_and_says_why(worker, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the sink wants a directory")
    run(
        worker, "CREATE SOURCE CONNECTOR g FROM datagen INTO s WITH ('rows.total' = 10, run = once)"
    )
    with pytest.raises(
        ConnectQLError, match=r"connector 'k' failed to start: \w+(Exception|Error): "
    ):
        run(worker, f"CREATE SINK CONNECTOR k TO file FROM s WITH (path = '{blocker}/out')")
    assert not worker.catalog.has_connector("k")
    assert not (worker.home / "checkpoints/k").exists()


def test_a_select_waits_for_the_once_connectors_of_its_own_script_only(worker):
    """A batch script reads its once-connectors' results in order; a SELECT sent on its own
    (the shell's prompt, POST /sql) answers at once with their state."""
    slow = (
        "CREATE SOURCE CONNECTOR {} FROM datagen INTO {} WITH ('rows.total' = 400,"
        " 'rows.per.second' = 100, 'rows.per.batch' = 50, run = 'once');"
    )
    shown = "SELECT state FROM connectors WHERE name = '{}'"
    waited = run(worker, slow.format("g1", "s1") + shown.format("g1"))[-1]
    assert waited.rows == [("FINISHED",)]
    run(worker, slow.format("g2", "s2"))
    alone = run(worker, shown.format("g2"))[0]
    assert alone.rows in ([("RUNNING",)], [("STARTING",)])
    worker.wait_for_once()
    assert run(worker, shown.format("g2"))[0].rows == [("FINISHED",)]
