"""Every option and statement does what it says, or is refused (issue 28), and the audit
(AUDIT below) that keeps each declared option tied to a test observing its effect."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import duckdb
import pytest

from connectql.catalog.store import Catalog
from connectql.catalog.streams import committed_files
from connectql.errors import ConnectQLError
from connectql.worker.worker import Worker
from tests.helpers import interrupt, read_parquet_rows, run, wait_until
from tests.test_cli import CONNECTQL, ROOT, connectql

pytestmark = pytest.mark.spark


def parquet(path, sql):
    duckdb.sql(f"COPY ({sql}) TO '{path}' (FORMAT parquet)")


def inbox_with(tmp_path, files: dict[str, str]) -> Path:
    """A directory `inbox` holding the given text files."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    for name, text in files.items():
        (inbox / name).write_text(text)
    return inbox


def catalog_rows(home, sql):
    cat = Catalog(home / "catalog.duckdb")
    try:
        return cat.query(sql)[1]
    finally:
        cat.close()


@pytest.mark.scenario
def test_connectql_run_stays_up_through_a_restart_loop(tmp_path):
    """The worker used to exit ~10 s into a restart loop: between a timer's end and its query's
    start it saw neither, and `connectql run` took that for 'nothing runs any more'."""
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    parquet(inbox / "a.parquet", "SELECT 'x' || range AS id FROM range(3)")  # id is not an INT
    script = tmp_path / "loop.sql"
    script.write_text(
        f"CREATE SOURCE CONNECTOR p FROM file INTO s WITH (path = '{inbox}', format = parquet,"
        " schema = 'id INT', 'errors.retry.max' = 100, 'errors.retry.backoff.ms' = 200);"
    )
    home = tmp_path / "h"
    proc = subprocess.Popen(
        [*CONNECTQL, "--home", str(home), "run", str(script)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        log = home / "worker.log"
        restarts = lambda: re.findall(r"connector p: restart (\d+) of 100", _text(log))  # noqa: E731
        wait_until(lambda: len(restarts()) >= 3, timeout=150, what="three restarts")
        started = time.monotonic()
        seen = len(restarts())
        # the loop goes on past its backoffs (200, 400, 800, then 1600 and 3200 ms) and each
        # restart's launch, with the worker up throughout
        wait_until(lambda: len(restarts()) >= seen + 2, timeout=120, what="two more restarts")
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() - started > 1.6
    finally:
        out, err = interrupt(proc, sig=signal.SIGTERM)
    assert proc.returncode == 0, err
    events = catalog_rows(
        home,
        "SELECT to_state, reason FROM connector_events WHERE connector = 'p' ORDER BY time",
    )
    reasons = [r for s, r in events if s == "RESTARTING"]
    assert reasons[:3] == [
        "restart 1 of 100 in 200 ms",
        "restart 2 of 100 in 400 ms",
        "restart 3 of 100 in 800 ms",
    ]
    assert events[-1] == ("STOPPED", "worker shut down")  # not left RESTARTING
    state = catalog_rows(home, "SELECT state, desired_state FROM connectors WHERE name = 'p'")
    assert state == [("STOPPED", "running")]


def flat(text: str) -> str:
    """Output with rich's line wrapping undone."""
    return " ".join(text.split())


def _text(path):
    return path.read_text() if path.exists() else ""


def restart_reasons(worker, name):
    return [
        r
        for s, r in worker.catalog.query(
            "SELECT to_state, reason FROM connector_events WHERE connector = ? ORDER BY time",
            [name],
        )[1]
        if s in ("RESTARTING", "FAILED") and r.startswith(("restart ", "gave up"))
    ]


def unstartable_sink(home, tmp_path, options: str):
    """A file sink whose path has become a plain file: every start fails at once (Spark cannot
    make its _spark_metadata), before any query runs."""
    out = tmp_path / "out"
    w = Worker(home)
    try:
        run(
            w,
            "CREATE SOURCE CONNECTOR g FROM datagen INTO s WITH ('rows.total' = 10, run = 'once');"
            f" CREATE SINK CONNECTOR f TO file FROM s WITH (path = '{out}'{options})",
        )
    finally:
        w.close(stop_spark=False)
    shutil.rmtree(out)
    out.write_text("not a directory")


def test_retry_options_hold_when_a_start_fails_at_once_and_after_alter(spark, home, tmp_path):
    unstartable_sink(home, tmp_path, ", 'errors.retry.max' = 1, 'errors.retry.backoff.ms' = 100")
    w = Worker(home)
    try:
        w.resume_all()  # a new worker: no plan of f has ever run in it
        wait_until(lambda: w.catalog.state_of("f") == "FAILED", timeout=90, what="FAILED")
        assert restart_reasons(w, "f") == ["restart 1 of 1 in 100 ms", "gave up after 1 restarts"]
        run(w, "ALTER CONNECTOR f SET ('errors.retry.max' = 2, 'errors.retry.backoff.ms' = 50)")
        run(w, "RESTART CONNECTOR f")
        wait_until(
            lambda: len(restart_reasons(w, "f")) == 5, timeout=90, what="the altered restarts"
        )
        assert restart_reasons(w, "f")[2:] == [
            "restart 1 of 2 in 50 ms",
            "restart 2 of 2 in 100 ms",
            "gave up after 2 restarts",
        ]
    finally:
        w.close(stop_spark=False)


def test_worker_settings_are_the_default_of_connectors_that_do_not_set_them(spark, home, tmp_path):
    unstartable_sink(home, tmp_path, "")
    w = Worker(home)
    try:
        run(w, "SET errors.retry.max = 1; SET 'errors.retry.backoff.ms' = 70")
        run(w, "SET stall.timeout.ms = 1234")
        # what the lag and hang checks read; test_hangs.py observes a batch STALLED by it
        assert w.options_of("f")["stall.timeout.ms"] == 1234
        assert w.options_of("g")["errors.retry.max"] == 1
        w.resume_all()
        wait_until(lambda: w.catalog.state_of("f") == "FAILED", timeout=90, what="FAILED")
        assert restart_reasons(w, "f") == ["restart 1 of 1 in 70 ms", "gave up after 1 restarts"]
    finally:
        w.close(stop_spark=False)


def test_set_takes_the_worker_settings_and_spark_keys_and_refuses_the_rest(tmp_path):
    home = tmp_path / "h"
    r = connectql("sql", "SET foo.bar = 1", home=home)
    assert r.returncode == 1
    assert "unknown setting 'foo.bar'" in flat(r.stderr) and "stall.timeout.ms" in flat(r.stderr)
    r = connectql("sql", "SET stall.timeout.msec = 5", home=home)
    assert r.returncode == 1 and "did you mean 'stall.timeout.ms'?" in flat(r.stderr)
    r = connectql("sql", "SET errors.retry.max = 'many'", home=home)
    assert r.returncode == 1 and "'errors.retry.max' must be int, got 'many'" in flat(r.stderr)
    r = connectql(
        "sql", "SET stall.timeout.ms = 5000; SET spark.sql.shuffle.partitions = 3", home=home
    )
    assert r.returncode == 0, r.stderr
    r = connectql("sql", "SHOW SETTINGS", home=home, env={**os.environ, "COLUMNS": "300"})
    assert r.returncode == 0, r.stderr
    lines = {line.split("│")[1].strip(): line for line in r.stdout.splitlines() if "│" in line}
    assert "5000" in lines["stall.timeout.ms"] and "60000" in lines["stall.timeout.ms"]
    assert " 10 " in lines["errors.retry.max"]
    assert " 3 " in lines["spark.sql.shuffle.partitions"]
    assert "foo.bar" not in r.stdout


@pytest.mark.parametrize(
    "statement, error",
    [
        (
            "CREATE SOURCE CONNECTOR g FROM datagen INTO s WITH ('errors.tolerance' = 'all',"
            " 'errors.deadletter.stream' = 'dl')",
            "datagen refuses errors.tolerance = 'all': it makes every row itself",
        ),
        (
            "CREATE SOURCE CONNECTOR g FROM datagen INTO s WITH ('errors.deadletter.stream' = 'dl')",
            "errors.deadletter.stream = 'dl' needs errors.tolerance = 'all'",
        ),
        (
            "CREATE SOURCE CONNECTOR f FROM file INTO s WITH (path = '/tmp', 'tasks.max' = 2)",
            "file source: tasks.max = 2 is refused: Spark's file source splits files",
        ),
        (
            "CREATE SOURCE CONNECTOR f FROM file INTO s WITH (path = '/tmp', format = text,"
            " schema = 'id INT')",
            "schema must be 'value STRING' (or absent), not 'id INT'",
        ),
    ],
)
def test_combinations_that_cannot_be_honoured_are_refused_and_change_nothing(
    tmp_path, statement, error
):
    home = tmp_path / "h"
    r = connectql("sql", statement, home=home)
    assert r.returncode == 1 and error in flat(r.stderr), r.stderr
    assert catalog_rows(home, "SELECT count(*) FROM connectors") == [(0,)]
    assert catalog_rows(home, "SELECT count(*) FROM streams") == [(0,)]


def test_text_source_takes_its_one_column_schema_spelled_any_way(worker, tmp_path):
    inbox = inbox_with(tmp_path, {"a.txt": "one\ntwo\n"})
    run(
        worker,
        f"CREATE SOURCE CONNECTOR t FROM file INTO s WITH (path = '{inbox}', format = text,"
        " schema = '`VALUE`  string', run = 'once')",
    )
    worker.wait_for_once()
    assert sorted(run(worker, "SELECT value FROM s")[0].rows) == [("one",), ("two",)]


def test_sink_refusals_and_alter_initial_state(worker, tmp_path):
    run(
        worker,
        "CREATE SOURCE CONNECTOR g FROM datagen INTO s WITH ('rows.total' = 10,"
        " 'initial.state' = 'paused', fields = 'id BIGINT SEQUENCE')",
    )
    with pytest.raises(ConnectQLError, match="file sink refuses errors.tolerance = 'all'"):
        run(
            worker,
            f"CREATE SINK CONNECTOR f TO file FROM s WITH (path = '{tmp_path / 'o'}',"
            " 'errors.tolerance' = 'all', 'errors.deadletter.stream' = 'dl')",
        )
    # s3's is a toolkit sink that rejects no row: nothing would become a dead letter
    with pytest.raises(ConnectQLError, match="s3 sink 'o' refuses errors.tolerance = 'all'"):
        run(
            worker,
            "CREATE SINK CONNECTOR o TO s3 FROM s WITH (bucket = 'b', 'errors.tolerance' = 'all',"
            " 'errors.deadletter.stream' = 'dl')",
        )
    with pytest.raises(ConnectQLError, match="delete.enabled = true needs mode = 'upsert'"):
        run(
            worker,
            "CREATE SINK CONNECTOR p TO postgres FROM s WITH (database = 'x', table = 't',"
            " mode = 'append', 'delete.enabled' = true)",
        )
    with pytest.raises(ConnectQLError, match="delete.enabled = true needs mode = 'upsert'"):
        run(
            worker,
            "CREATE SINK CONNECTOR m TO mysql FROM s WITH (database = 'x', table = 't',"
            " 'primary.key' = 'id', mode = 'append', 'delete.enabled' = true)",
        )
    with pytest.raises(ConnectQLError, match="initial.state only says how CREATE leaves"):
        run(worker, "ALTER CONNECTOR g SET ('initial.state' = 'running')")
    assert worker.catalog.get_connector("g").state == "PAUSED"
    run(worker, f"CREATE SINK CONNECTOR f TO file FROM s WITH (path = '{tmp_path / 'o'}')")
    with pytest.raises(ConnectQLError, match="file sink refuses errors.tolerance = 'all'"):
        run(
            worker,
            "ALTER CONNECTOR f SET ('errors.tolerance' = 'all', 'errors.deadletter.stream' = 'dl')",
        )
    assert [e.name for e in worker.catalog.connectors()] == ["f", "g"]
    assert [s.name for s in worker.catalog.streams()] == ["s"]


def test_a_sinks_tasks_max_caps_its_writers(worker, tmp_path):
    """Two stream files per batch: without tasks.max the file sink writes one file per task
    (two); with tasks.max = 1 one task writes them all."""
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR g FROM datagen INTO s WITH ('rows.total' = 1000, run = 'once',
          'tasks.max' = 2, fields = 'id BIGINT SEQUENCE');
        CREATE SINK CONNECTOR free TO file FROM s WITH (path = '{tmp_path / "free"}', run = 'once');
        CREATE SINK CONNECTOR one TO file FROM s WITH (path = '{tmp_path / "one"}', run = 'once',
          'tasks.max' = 1);
        """,
    )
    worker.wait_for_once()
    assert len(committed_files(worker.home / "streams/s")) == 2
    assert len(committed_files(tmp_path / "free")) == 2
    assert len(committed_files(tmp_path / "one")) == 1
    assert read_parquet_rows(tmp_path / "one") == [(1000, 1000)]


def test_alter_to_a_dead_letter_stream_registers_it(worker, tmp_path):
    inbox = inbox_with(tmp_path, {"a.csv": "id,name\n1,a\nx,b\n3,c\n"})
    run(
        worker,
        f"CREATE SOURCE CONNECTOR c FROM file INTO s WITH (path = '{inbox}',"
        " schema = 'id INT, name STRING', 'errors.retry.max' = 0)",
    )
    wait_until(lambda: worker.catalog.state_of("c") == "FAILED", timeout=90, what="FAILED")
    run(
        worker,
        "ALTER CONNECTOR c SET ('errors.tolerance' = 'all', 'errors.deadletter.stream' = 'dl1')",
    )
    assert "dl1" in [r[0] for r in run(worker, "SHOW STREAMS")[0].rows]
    run(worker, "RESTART CONNECTOR c")
    wait_until(
        lambda: run(worker, "SELECT count(*) FROM dl1")[0].rows == [(1,)],
        timeout=90,
        what="the dead letter",
    )
    assert run(worker, "SELECT raw_record, stage FROM dl1")[0].rows == [("x,b", "read")]
    assert sorted(run(worker, "SELECT id FROM s")[0].rows) == [(1,), (3,)]


def test_unreadable_parquet_and_text_files_are_dead_letters(worker, tmp_path):
    pq_in, txt_in = tmp_path / "pq", tmp_path / "txt"
    pq_in.mkdir()
    txt_in.mkdir()
    parquet(pq_in / "good.parquet", "SELECT range::INT AS id FROM range(3)")
    parquet(pq_in / "empty.parquet", "SELECT range::INT AS id FROM range(0)")
    parquet(pq_in / "strings.parquet", "SELECT 'x' || range AS id FROM range(2)")
    (pq_in / "garbage.parquet").write_text("not parquet at all\n")
    (txt_in / "a.txt").write_text("one\ntwo\n")
    (txt_in / "b.txt.gz").write_bytes(b"not gzip at all\n")  # Spark cannot decompress it
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR p FROM file INTO nums WITH (path = '{pq_in}', format = parquet,
          schema = 'id INT', run = 'once', 'errors.tolerance' = 'all',
          'errors.deadletter.stream' = 'dl');
        CREATE SOURCE CONNECTOR t FROM file INTO lines WITH (path = '{txt_in}', format = text,
          run = 'once', 'errors.tolerance' = 'all', 'errors.deadletter.stream' = 'dl');
        """,
    )
    worker.wait_for_once()
    assert {worker.catalog.state_of("p"), worker.catalog.state_of("t")} == {"FINISHED"}
    assert sorted(run(worker, "SELECT id FROM nums")[0].rows) == [(0,), (1,), (2,)]
    assert sorted(run(worker, "SELECT value FROM lines")[0].rows) == [("one",), ("two",)]
    letters = run(
        worker,
        "SELECT connector, stage, error_class, source_offset, error_message FROM dl ORDER BY 4",
    )[0].rows
    files = [(c, json.loads(o)["file"].rsplit("/", 1)[1]) for c, _s, _e, o, _m in letters]
    assert files == [("p", "garbage.parquet"), ("p", "strings.parquet"), ("t", "b.txt.gz")]
    assert {(s, e) for _c, s, e, _o, _m in letters} == {("read", "UNREADABLE_FILE")}
    assert "not a readable parquet file" in letters[0][4]
    assert letters[1][4] == "its columns (id string) do not fit the schema (`id` INT)"
    assert letters[2][4] == "Spark could not read the file"
    counts = worker.catalog.query(
        "SELECT name, rows_total, rows_written, rows_dead_lettered FROM connectors ORDER BY 1"
    )[1]
    assert counts == [("p", 3, 3, 0), ("t", 2, 2, 0)]  # an unread file is no input row


def test_file_header_and_files_per_trigger(worker, tmp_path):
    # no header line: every line is a row
    inbox = inbox_with(tmp_path, {"a.csv": "1,a\n2,b\n", "b.csv": "3,c\n4,d\n"})
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR c FROM file INTO s WITH (path = '{inbox}', header = false,
          schema = 'id INT, name STRING', 'files.max.per.trigger' = 1, run = 'once');
        CREATE SINK CONNECTOR plain TO file FROM s WITH (path = '{tmp_path / "plain"}',
          format = csv, header = false, run = 'once');
        CREATE SINK CONNECTOR titled TO file FROM s WITH (path = '{tmp_path / "titled"}',
          format = csv, run = 'once');
        """,
    )
    worker.wait_for_once()
    assert sorted(run(worker, "SELECT id, name FROM s")[0].rows) == [
        (1, "a"),
        (2, "b"),
        (3, "c"),
        (4, "d"),
    ]
    batches = worker.catalog.query(
        "SELECT input_rows FROM connector_metrics WHERE connector = 'c' AND input_rows > 0"
    )[1]
    assert batches == [(2,), (2,)]  # one file per micro-batch

    def lines(path):
        return sorted(
            line for f in committed_files(path) for line in Path(f).read_text().splitlines()
        )

    assert lines(tmp_path / "plain") == ["1,a", "2,b", "3,c", "4,d"]
    assert [x for x in lines(tmp_path / "titled") if x == "id,name"] and len(
        lines(tmp_path / "titled")
    ) > 4


# ---- the audit: every declared option has a test that changes it and observes its effect ------
# Keys: "<option>" for the options every connector has (connectors/common.py), "<type> <kind>
# <option>" for a connector's own (or a common one it declares otherwise, e.g. a sink's
# tasks.max), "SET <key>" for a worker setting. A new option needs a row here, naming
# "test_file.py::test_name"; test_every_option_has_a_test_that_observes_it checks that.
AUDIT = {
    "call.timeout.ms": "test_plugins.py::test_a_plugin_call_that_hangs_fails_its_statement_and_nothing_else",
    "connector": "test_planner.py::test_type_and_stream_may_come_from_with",
    "stream": "test_planner.py::test_type_and_stream_may_come_from_with",
    "tasks.max": "test_options.py::test_a_sinks_tasks_max_caps_its_writers",
    "batch.max.bytes": "test_datagen.py::test_batch_max_bytes_cuts_the_batches_of_a_connector",
    "trigger.interval": "test_supervision.py::test_a_connector_without_progress_while_behind_is_stalled",
    "run": "test_end_to_end.py::test_batch_script_moves_every_row_through_stream_and_transform",
    "errors.tolerance": "test_deadletters.py::test_malformed_records_go_to_the_dead_letter_stream_and_counts_reconcile",
    "errors.deadletter.stream": "test_options.py::test_alter_to_a_dead_letter_stream_registers_it",
    "errors.retry.max": "test_options.py::test_retry_options_hold_when_a_start_fails_at_once_and_after_alter",
    "errors.retry.backoff.ms": "test_options.py::test_retry_options_hold_when_a_start_fails_at_once_and_after_alter",
    "stall.timeout.ms": "test_supervision.py::test_a_connector_without_progress_while_behind_is_stalled",
    "initial.state": "test_supervision.py::test_initial_state_paused_creates_without_starting",
    "SET errors.retry.max": "test_options.py::test_worker_settings_are_the_default_of_connectors_that_do_not_set_them",
    "SET errors.retry.backoff.ms": "test_options.py::test_worker_settings_are_the_default_of_connectors_that_do_not_set_them",
    "SET stall.timeout.ms": "test_hangs.py::test_the_workers_stall_timeout_applies_to_a_hung_batch",
    "datagen source rows.total": "test_supervision.py::test_pause_keeps_the_offset_and_resume_delivers_the_rest",
    "datagen source rows.per.second": "test_datagen.py::test_pacing_by_wall_clock",
    "datagen source batch.max.records": "test_datagen.py::test_batch_max_records_and_rows_per_batch_both_cap_a_batch",
    "datagen source rows.per.batch": "test_supervision.py::test_a_connector_without_progress_while_behind_is_stalled",
    "datagen source fields": "test_datagen.py::test_spec_keywords_case_defaults_and_quotes",
    "datagen source seed": "test_datagen.py::test_seed_changes_random_columns_only",
    "file source path": "test_end_to_end.py::test_file_source_infers_the_schema_and_picks_up_new_files",
    "file source format": "test_options.py::test_unreadable_parquet_and_text_files_are_dead_letters",
    "file source schema": "test_options.py::test_text_source_takes_its_one_column_schema_spelled_any_way",
    "file source header": "test_options.py::test_file_header_and_files_per_trigger",
    "file source files.max.per.trigger": "test_options.py::test_file_header_and_files_per_trigger",
    "file sink tasks.max": "test_options.py::test_a_sinks_tasks_max_caps_its_writers",
    "file sink path": "test_end_to_end.py::test_batch_script_moves_every_row_through_stream_and_transform",
    "file sink format": "test_end_to_end.py::test_csv_file_source_to_csv_sink_keeps_empty_strings",
    "file sink header": "test_options.py::test_file_header_and_files_per_trigger",
    "s3 source endpoint": "test_s3_source.py::test_objects_in_key_order_exactly_once_across_batches_ending_mid_object",
    "s3 source region": "test_s3_source.py::test_objects_in_key_order_exactly_once_across_batches_ending_mid_object",
    "s3 source bucket": "test_s3_source.py::test_objects_in_key_order_exactly_once_across_batches_ending_mid_object",
    "s3 source access.key": "test_s3_source.py::test_schema_is_inferred_from_the_first_object_at_create",
    "s3 source secret.key": "test_s3_source.py::test_schema_is_inferred_from_the_first_object_at_create",
    "s3 source prefix": "test_s3_source.py::test_objects_in_key_order_exactly_once_across_batches_ending_mid_object",
    "s3 source pattern": "test_s3_io.py::test_listing_is_in_key_order_with_prefix_and_pattern",
    "s3 source pattern.type": "test_s3_io.py::test_listing_is_in_key_order_with_prefix_and_pattern",
    "s3 source format": "test_s3_io.py::test_each_format_reads_from_record_n_and_counts",
    "s3 source schema": "test_s3_source.py::test_schema_is_inferred_from_the_first_object_at_create",
    "s3 source csv.header": "test_s3_io.py::test_csv_without_header_and_with_another_delimiter",
    "s3 source csv.delimiter": "test_s3_io.py::test_csv_without_header_and_with_another_delimiter",
    "s3 source poll.interval.ms": "test_s3_source.py::test_objects_in_key_order_exactly_once_across_batches_ending_mid_object",
    "s3 source batch.max.records": "test_s3_crash.py::test_a_killed_worker_resumes_inside_an_object_and_emits_each_record_once",
    "s3 sink endpoint": "test_s3_sink.py::test_objects_named_by_template_roll_by_records_and_hold_every_row",
    "s3 sink region": "test_s3_sink.py::test_objects_named_by_template_roll_by_records_and_hold_every_row",
    "s3 sink bucket": "test_s3_sink.py::test_objects_named_by_template_roll_by_records_and_hold_every_row",
    "s3 sink access.key": "test_s3_sink.py::test_objects_named_by_template_roll_by_records_and_hold_every_row",
    "s3 sink secret.key": "test_s3_sink.py::test_objects_named_by_template_roll_by_records_and_hold_every_row",
    "s3 sink prefix": "test_s3_sink.py::test_a_replayed_batch_writes_the_same_names_and_content",
    "s3 sink format": "test_s3_sink.py::test_each_format_reads_back_as_written",
    "s3 sink compression": "test_s3_sink.py::test_each_format_reads_back_as_written",
    "s3 sink file.name.template": "test_s3_sink.py::test_a_bad_template_or_compression_is_refused_at_create",
    "s3 sink file.max.records": "test_s3_sink.py::test_objects_named_by_template_roll_by_records_and_hold_every_row",
    "s3 sink file.flush.interval.ms": "test_s3_sink.py::test_file_flush_interval_rolls_objects_by_time",
    "s3 sink tasks.max": "test_options.py::test_a_sinks_tasks_max_caps_its_writers",
    "s3 sink streams": "test_s3_sink.py::test_a_sink_of_several_streams_puts_each_streams_objects_under_its_own_name",
    "postgres source host": "test_postgres.py::test_cdc_errors_name_the_problem",
    "postgres source port": "test_postgres.py::test_cdc_errors_name_the_problem",
    "postgres source user": "test_postgres.py::test_cdc_errors_name_the_problem",
    "postgres source password": "test_postgres.py::test_error_texts_are_scrubbed_of_passwords_given_by_reference",
    "postgres source database": "test_postgres.py::test_cdc_errors_name_the_problem",
    "postgres source schema": "test_multitable.py::test_a_table_list_that_matches_nothing_or_spans_schemas_changes_nothing",
    "postgres source table": "test_postgres.py::test_cdc_round_trip_with_changes_during_and_after_the_snapshot",
    "postgres source query": "test_postgres.py::test_bulk_source_copies_a_query_every_run",
    "postgres source mode": "test_postgres.py::test_incremental_source_picks_up_new_rows_while_running",
    "postgres source snapshot": "test_postgres.py::test_cdc_round_trip_with_changes_during_and_after_the_snapshot",
    "postgres source incrementing.column": "test_postgres.py::test_incremental_source_picks_up_new_rows_while_running",
    "postgres source timestamp.column": "test_postgres.py::test_source_errors_are_named_at_create",
    "postgres source poll.interval.ms": "test_postgres.py::test_incremental_source_picks_up_new_rows_while_running",
    "postgres source batch.rows": "test_postgres.py::test_cdc_round_trip_with_changes_during_and_after_the_snapshot",
    "postgres source schema.change": "test_postgres.py::test_cdc_schema_change_evolve_fail_and_ignore",
    "postgres source signal.table": "test_following.py::test_a_table_created_while_running_is_snapshotted_under_changes_and_followed",
    "postgres sink tasks.max": "test_postgres.py::test_rows_the_target_rejects_go_to_the_dead_letter_stream",
    "postgres sink host": "test_postgres.py::test_sink_errors_are_named_at_create",
    "postgres sink port": "test_postgres.py::test_sink_errors_are_named_at_create",
    "postgres sink user": "test_postgres.py::test_cdc_errors_name_the_problem",
    "postgres sink password": "test_postgres.py::test_error_texts_are_scrubbed_of_passwords_given_by_reference",
    "postgres sink database": "test_postgres.py::test_sink_errors_are_named_at_create",
    "postgres sink schema": "test_multitable.py::test_a_table_list_that_matches_nothing_or_spans_schemas_changes_nothing",
    "postgres sink table": "test_postgres.py::test_datagen_rows_reach_postgres_appended_and_upserted",
    "postgres sink mode": "test_postgres.py::test_datagen_rows_reach_postgres_appended_and_upserted",
    "postgres sink primary.key": "test_postgres.py::test_datagen_rows_reach_postgres_appended_and_upserted",
    "postgres sink auto.create": "test_postgres.py::test_sink_errors_are_named_at_create",
    "postgres sink auto.evolve": "test_postgres.py::test_sink_errors_are_named_at_create",
    "postgres sink delete.enabled": "test_options.py::test_sink_refusals_and_alter_initial_state",
    "mysql source host": "test_mysql.py::test_bad_input_is_named_and_changes_nothing",
    "mysql source port": "test_mysql.py::test_bad_input_is_named_and_changes_nothing",
    "mysql source user": "test_mysql.py::test_bad_input_is_named_and_changes_nothing",
    "mysql source password": "test_mysql.py::test_bad_input_is_named_and_changes_nothing",
    "mysql source database": "test_mysql.py::test_bad_input_is_named_and_changes_nothing",
    "mysql source table": "test_mysql.py::test_cdc_keeps_a_target_table_equal_under_concurrent_changes",
    "mysql source query": "test_mysql.py::test_incremental_and_bulk_on_a_server_without_a_binary_log",
    "mysql source mode": "test_mysql.py::test_incremental_and_bulk_on_a_server_without_a_binary_log",
    "mysql source snapshot": "test_mysql.py::test_cdc_keeps_a_target_table_equal_under_concurrent_changes",
    "mysql source incrementing.column": "test_mysql.py::test_incremental_and_bulk_on_a_server_without_a_binary_log",
    "mysql source poll.interval.ms": "test_mysql.py::test_incremental_and_bulk_on_a_server_without_a_binary_log",
    "mysql source batch.rows": "test_mysql.py::test_cdc_keeps_a_target_table_equal_under_concurrent_changes",
    "mysql source schema.change": "test_mysql.py::test_schema_change_modes_while_streaming",
    "mysql source signal.table": "test_mysql_following.py::test_tables_found_resnapshotted_retabled_and_dropped_on_mariadb",
    "mysql sink tasks.max": "test_mysql_sink.py::test_rows_the_target_rejects_go_to_the_dead_letter_stream",
    "mysql sink host": "test_mysql_sink.py::test_sink_errors_are_named_at_create",
    "mysql sink port": "test_mysql_sink.py::test_sink_errors_are_named_at_create",
    "mysql sink user": "test_mysql_sink.py::test_sink_errors_are_named_at_create",
    "mysql sink password": "test_mysql_sink.py::test_sink_errors_are_named_at_create",
    "mysql sink database": "test_mysql_sink.py::test_sink_errors_are_named_at_create",
    "mysql sink table": "test_mysql_sink.py::test_datagen_rows_reach_mysql_appended_and_upserted",
    "mysql sink mode": "test_mysql_sink.py::test_datagen_rows_reach_mysql_appended_and_upserted",
    "mysql sink primary.key": "test_mysql_sink.py::test_upsert_applies_the_last_change_per_key_by_pos_and_deletes",
    "mysql sink auto.create": "test_mysql_sink.py::test_sink_errors_are_named_at_create",
    "mysql sink auto.evolve": "test_mysql_sink.py::test_sink_errors_are_named_at_create",
    "mysql sink delete.enabled": "test_options.py::test_sink_refusals_and_alter_initial_state",
    "postgres sink streams": "test_multitable.py::test_one_sink_writes_each_stream_of_a_multi_table_source_into_its_own_table",
    "mysql sink streams": "test_multitable.py::test_one_mysql_sink_of_several_streams",
}
_REDIS = "test_redis.py::"
_REDIS_READ = _REDIS + "test_a_source_reads_each_entry_once_across_stops_and_a_replay"
_REDIS_FIELDS = _REDIS + "test_a_source_with_its_own_fields_reads_text_or_bytes_values"
_REDIS_ROUTES = _REDIS + "test_a_sink_routes_rows_by_a_column_trims_and_writes_text"
_REDIS_ACL = _REDIS + "test_a_user_and_password_reach_an_acl_server_and_stay_secret"
AUDIT |= {
    "redis source url": _REDIS_READ,
    "redis source user": _REDIS_ACL,
    "redis source password": _REDIS_ACL,
    "redis source key": _REDIS_READ,
    "redis source start": _REDIS + "test_a_source_starting_at_latest_reads_only_later_entries",
    "redis source value.field": _REDIS_FIELDS,
    "redis source key.field": _REDIS_FIELDS,
    "redis source format": _REDIS_FIELDS,
    "redis source schema": _REDIS + "test_a_source_starting_at_latest_reads_only_later_entries",
    "redis source poll.interval.ms": _REDIS_ACL,
    "redis source batch.max.records": _REDIS + "test_a_killed_worker_copies_every_entry_once",
    "redis sink url": _REDIS + "test_a_sink_adds_each_row_once_across_a_replay",
    "redis sink user": _REDIS_ACL,
    "redis sink password": _REDIS_ACL,
    "redis sink key": _REDIS + "test_a_sink_adds_each_row_once_across_a_replay",
    "redis sink key.column": _REDIS_ROUTES,
    "redis sink value.field": _REDIS_ROUTES,
    "redis sink key.field": _REDIS_ROUTES,
    "redis sink format": _REDIS_ROUTES,
    "redis sink maxlen": _REDIS_ROUTES,
    "redis sink tasks.max": "test_options.py::test_a_sinks_tasks_max_caps_its_writers",
}
_NATS = "test_nats.py::"
_NATS_READ = _NATS + "test_a_source_reads_each_message_once_across_stops_and_a_replay"
_NATS_LATEST = _NATS + "test_a_source_starting_at_latest_reads_only_later_messages_as_text"
_NATS_AUTH = _NATS + "test_a_user_and_password_reach_a_server_that_asks_and_stay_secret"
_NATS_ROUTES = _NATS + "test_a_sink_routes_rows_by_a_column_and_writes_bytes"
_NATS_CORE = _NATS + "test_core_nats_through_sql_each_message_once_while_running"
AUDIT |= {
    "nats source url": _NATS_AUTH,
    "nats source user": _NATS_AUTH,
    "nats source password": _NATS_AUTH,
    "nats source subject": _NATS_READ,
    "nats source start": _NATS_LATEST,
    "nats source format": _NATS_LATEST,
    "nats source schema": _NATS
    + "test_nats_to_redis_in_a_killed_worker_delivers_every_message_once",
    "nats source poll.interval.ms": _NATS + "test_nats_to_nats_through_sql_with_dead_letters",
    "nats source batch.max.records": _NATS_READ,
    "nats source mode": _NATS_CORE,
    "nats sink url": _NATS_AUTH,
    "nats sink user": _NATS_AUTH,
    "nats sink password": _NATS_AUTH,
    "nats sink subject": _NATS + "test_an_idempotent_sink_publishes_each_row_once_across_replays",
    "nats sink subject.column": _NATS_ROUTES,
    "nats sink format": _NATS_ROUTES,
    "nats sink mode": _NATS_CORE,
    "nats sink tasks.max": "test_options.py::test_a_sinks_tasks_max_caps_its_writers",
}
_MQTT = "test_mqtt.py::"
_MQTT_SPOOL = _MQTT + "test_a_source_spools_each_message_once_across_stops_and_a_replay"
_MQTT_AUTH = _MQTT + "test_a_user_and_password_reach_a_broker_that_asks_and_retain_keeps_the_last"
_MQTT_TEXT = _MQTT + "test_a_sink_publishes_text_by_topic_column"
AUDIT |= {
    "mqtt source url": _MQTT_SPOOL,
    "mqtt source user": _MQTT_AUTH,
    "mqtt source password": _MQTT_AUTH,
    "mqtt source qos": _MQTT_SPOOL,
    "mqtt source topic": _MQTT_SPOOL,
    "mqtt source client.id": _MQTT_SPOOL,
    "mqtt source format": _MQTT_AUTH,
    "mqtt source schema": _MQTT_SPOOL,
    "mqtt source batch.max.records": _MQTT_SPOOL,
    "mqtt sink url": _MQTT_AUTH,
    "mqtt sink user": _MQTT_AUTH,
    "mqtt sink password": _MQTT_AUTH,
    "mqtt sink qos": _MQTT_TEXT,
    "mqtt sink retain": _MQTT_AUTH,
    "mqtt sink topic": _MQTT_AUTH,
    "mqtt sink topic.column": _MQTT_TEXT,
    "mqtt sink format": _MQTT_TEXT,
    "mqtt sink tasks.max": "test_options.py::test_a_sinks_tasks_max_caps_its_writers",
}
_RABBIT = "test_rabbitmq.py::"
_RABBIT_SQL = _RABBIT + "test_rabbitmq_to_rabbitmq_through_sql_with_dead_letters"
_RABBIT_SPOOL = _RABBIT + "test_a_source_spools_each_message_once_across_stops_and_a_replay"
_RABBIT_SINK = _RABBIT + "test_a_sink_publishes_persistent_messages_with_ids"
_RABBIT_STREAM = _RABBIT + "test_a_stream_queue_is_read_by_offset_once_across_stops_and_a_replay"
AUDIT |= {
    "rabbitmq source url": _RABBIT_SQL,
    "rabbitmq source user": _RABBIT_SQL,
    "rabbitmq source password": _RABBIT_SQL,
    "rabbitmq source queue": _RABBIT_SPOOL,
    "rabbitmq source queue.type": _RABBIT_STREAM,
    "rabbitmq source stream.offset": _RABBIT
    + "test_a_stream_queue_starts_where_stream_offset_says",
    "rabbitmq source prefetch": _RABBIT
    + "test_a_killed_worker_loses_no_message_and_repeats_none_of_a_stream",
    "rabbitmq source format": _RABBIT_SQL,
    "rabbitmq source schema": _RABBIT_SPOOL,
    "rabbitmq source batch.max.records": _RABBIT_SPOOL,
    "rabbitmq sink url": _RABBIT_SQL,
    "rabbitmq sink user": _RABBIT_SQL,
    "rabbitmq sink password": _RABBIT_SQL,
    "rabbitmq sink exchange": _RABBIT_SQL,
    "rabbitmq sink routing.key": _RABBIT_SQL,
    "rabbitmq sink routing.key.column": _RABBIT_SINK,
    "rabbitmq sink format": _RABBIT_SINK,
    "rabbitmq sink tasks.max": "test_options.py::test_a_sinks_tasks_max_caps_its_writers",
}
_DELTA = "test_delta.py::"
_S3 = ("endpoint", "region", "access.key", "secret.key")  # a lake's S3 server
AUDIT |= {
    "delta sink path": _DELTA + "test_append_writes_each_row_once_across_a_replay",
    "delta sink partition.by": _DELTA + "test_append_writes_each_row_once_across_a_replay",
    "delta sink key": _DELTA + "test_upsert_applies_each_keys_last_change",
    "delta sink mode": _DELTA + "test_postgres_cdc_into_a_delta_table",
    "delta sink streams": _DELTA + "test_a_sink_of_several_streams_writes_a_table_each",
    "delta sink tasks.max": "test_options.py::test_a_sinks_tasks_max_caps_its_writers",
    **{
        f"delta source {o}": _DELTA + "test_a_source_reads_the_table_then_each_append_once"
        for o in ("path", "starting.position", "batch.max.records")
    },
    **{f"delta source {o}": _DELTA + "test_upsert_into_a_table_on_s3" for o in _S3},
    **{
        f"delta source {o}": _DELTA + "test_a_change_data_feed_is_read_as_a_change_stream"
        for o in ("change.feed", "key")
    },
    "delta sink compact.every": _DELTA + "test_append_writes_each_row_once_across_a_replay",
    "delta sink commit.interval.ms": _DELTA + "test_a_sink_of_several_streams_writes_a_table_each",
    **{f"delta sink {o}": _DELTA + "test_upsert_into_a_table_on_s3" for o in _S3},  # fmt: skip
}
_ICE = "test_iceberg.py::"
AUDIT |= {
    "iceberg sink catalog.uri": _ICE + "test_postgres_cdc_into_an_iceberg_table",
    "iceberg sink catalog.name": _ICE + "test_append_writes_each_row_once_across_a_replay",
    "iceberg sink warehouse": _ICE + "test_postgres_cdc_into_an_iceberg_table",
    "iceberg sink table": _ICE + "test_a_sink_of_several_streams_writes_a_table_each",
    "iceberg sink mode": _ICE + "test_postgres_cdc_into_an_iceberg_table",
    "iceberg sink key": _ICE + "test_upsert_applies_each_keys_last_change",
    "iceberg sink streams": _ICE + "test_a_sink_of_several_streams_writes_a_table_each",
    "iceberg sink tasks.max": "test_options.py::test_a_sinks_tasks_max_caps_its_writers",
    **{
        f"iceberg source {o}": _ICE + "test_a_source_reads_the_table_then_each_append_once"
        for o in (
            "catalog.uri",
            "catalog.name",
            "warehouse",
            "table",
            "starting.position",
            "batch.max.records",
        )
    },
    **{
        f"iceberg {kind} {o}": _ICE + "test_upsert_through_a_rest_catalog_on_s3"
        for kind in ("source", "sink")
        for o in (*_S3, "catalog.type", "catalog.credential", "catalog.token")
    },
    "iceberg sink compact.every": _ICE + "test_append_writes_each_row_once_across_a_replay",
    "iceberg sink commit.interval.ms": _ICE + "test_a_sink_of_several_streams_writes_a_table_each",
}
_KAFKA = "test_kafka.py::"
_KAFKA_READ = _KAFKA + "test_a_source_reads_each_record_once_across_stops_and_a_replay"
_KAFKA_SQL = _KAFKA + "test_kafka_to_kafka_through_sql_with_dead_letters"
_KAFKA_SINK = _KAFKA + "test_the_sink_writes_each_row_once_across_a_replay"
_KAFKA_ROUTES = (
    _KAFKA + "test_a_sink_routes_rows_by_a_column_with_its_batches_marked_in_a_topic_of_their_own"
)
_KAFKA_GROUP = _KAFKA + "test_a_source_commits_its_positions_to_a_consumer_group_when_asked"
_KAFKA_SETTINGS = _KAFKA + "test_kafka_settings_reach_the_client"
AUDIT |= {
    "kafka source bootstrap.servers": _KAFKA_READ,
    "kafka source kafka.*": _KAFKA_SETTINGS,
    "kafka source topic": _KAFKA_READ,
    "kafka source topic.pattern": _KAFKA
    + "test_a_pattern_source_picks_up_a_topic_created_while_running",
    "kafka source starting.offsets": _KAFKA
    + "test_a_source_starting_at_latest_reads_only_later_records",
    "kafka source format": _KAFKA + "test_a_source_starting_at_latest_reads_only_later_records",
    "kafka source schema": _KAFKA_READ,
    "kafka source key": _KAFKA_SQL,
    "kafka source commit.offsets": _KAFKA_GROUP,
    "kafka source group.id": _KAFKA_GROUP,
    "kafka source poll.interval.ms": _KAFKA_SQL,
    "kafka source batch.max.records": _KAFKA_READ,
    "kafka sink bootstrap.servers": _KAFKA_SINK,
    "kafka sink kafka.*": _KAFKA_SETTINGS,
    "kafka sink topic": _KAFKA_SINK,
    "kafka sink topic.column": _KAFKA_ROUTES,
    "kafka sink key": _KAFKA_SINK,
    "kafka sink format": _KAFKA_SETTINGS,
    "kafka sink delivery": _KAFKA_SINK,
    "kafka sink auto.create": _KAFKA_SQL,
    "kafka sink topic.partitions": _KAFKA_SINK,
    "kafka sink topic.replication": _KAFKA_SETTINGS,
    "kafka sink marker.topic": _KAFKA_ROUTES,
    "kafka sink streams": _KAFKA + "test_a_sink_of_several_streams_writes_each_to_its_own_topic",
    "kafka sink tasks.max": "test_options.py::test_a_sinks_tasks_max_caps_its_writers",
}
# format = 'avro' (toolkit/messages.py): through real brokers for kafka and redis, and for each
# broker connector its declared options reaching the toolkit's format
_AVRO_KAFKA = _KAFKA + "test_avro_kafka_to_kafka_through_sql_by_value_with_dead_letters"
_AVRO_REDIS = _REDIS + "test_a_redis_source_reads_avro_values_with_the_toolkits_format"
_AVRO_EACH = "test_messages.py::test_each_broker_source_and_sink_reads_and_writes_avro_values"
AUDIT |= {
    f"{broker} {key}": _AVRO_EACH
    for broker in ("nats", "mqtt", "rabbitmq", "redis")
    for key in ("source avro.schema", "source avro.confluent.header", "sink avro.schema")
}
AUDIT |= {
    "kafka source avro.schema": _AVRO_KAFKA,
    "kafka source avro.confluent.header": _AVRO_KAFKA,
    "kafka sink avro.schema": _AVRO_KAFKA,
    "redis source avro.schema": _AVRO_REDIS,
    "redis source avro.confluent.header": _AVRO_REDIS,
}
_RETENTION = "test_retention.py::"
AUDIT |= {
    "SET stream.retention": _RETENTION + "test_worker_defaults_apply_to_streams_that_set_none",
    "SET stream.retention.bytes": _RETENTION
    + "test_worker_defaults_apply_to_streams_that_set_none",
    "SET stream.retention.policy": _RETENTION
    + "test_worker_defaults_apply_to_streams_that_set_none",
    "SET stream.retention.check.interval": _RETENTION
    + "test_expired_files_leave_log_and_disk_and_the_sink_gets_every_record_once",
    "SET stream.merge.target.bytes": "test_stream_merge.py::test_stream_merge_option_is_checked",
    "SET stream.cleanup": "test_compaction.py::test_compaction_options_are_checked",
    "SET sink.chaining": "test_chaining.py::test_set_sink_chaining_false_runs_a_query_per_sink",
    "SET stream.delete.retention": "test_compaction.py::test_compaction_options_are_checked",
}
_SOURCES = "test_source_options.py::"
AUDIT |= {
    "postgres source slot.name": _SOURCES + "test_postgres_slot_name_and_heartbeat",
    "postgres source keyless": "test_postgres_keyless.py::"
    + "test_keyless_inserts_captures_their_inserts_and_the_application_writes_on",
    "postgres source heartbeat.interval.ms": _SOURCES + "test_postgres_slot_name_and_heartbeat",
    **{
        f"mysql source {key}": _SOURCES + "test_mysql_timestamp_column_server_id_and_heartbeat"
        for key in ("timestamp.column", "server.id", "heartbeat.interval.ms")
    },
}
# the connection bounds every database connector declares (connectors/relational/bounds.py)
_HANGS = "test_hangs.py::"
AUDIT |= {
    f"{db} {kind} {key}": _HANGS + test
    for db, kind in [(d, k) for d in ("postgres", "mysql") for k in ("source", "sink")]
    for key, test in {
        "connect.timeout.ms": "test_a_call_on_a_suspended_server_gives_up_after_read_timeout",
        "read.timeout.ms": "test_a_call_on_a_suspended_server_gives_up_after_read_timeout",
        "lock.timeout.ms": "test_a_locked_target_table_stalls_the_sink_until_the_lock_goes"
        if db == "postgres"
        else "test_every_database_connector_declares_the_bounds_and_refuses_bad_ones",
        "keepalive.ms": "test_every_database_connector_declares_the_bounds_and_refuses_bad_ones",
    }.items()
}

NOT_YET: dict[str, str] = {}  # "<key>": why no test observes it yet


def declared_options() -> set[str]:
    from connectql.connectors import registry
    from connectql.connectors.adapter import MAX_BYTES
    from connectql.connectors.common import SOURCE_COMMON
    from connectql.worker.settings import WORKER_SETTINGS

    # batch.max.bytes becomes a record limit in the toolkit, for every source that honours
    # batch.max.records (each audited on its own): one row
    common = {**SOURCE_COMMON, MAX_BYTES.name: MAX_BYTES}
    keys = set(common) | {f"SET {k}" for k in WORKER_SETTINGS}
    for plugin in registry.builtins():  # a plugin package's options are audited by its tests
        for kind in plugin.kinds:
            for name, option in plugin.options_for(kind).items():
                if common.get(name) != option:
                    keys.add(f"{plugin.type} {kind} {name}")
    return keys


def test_every_option_has_a_test_that_observes_it():
    declared = declared_options()
    missing = sorted(declared - set(AUDIT) - set(NOT_YET))
    assert not missing, f"options without a row in tests/test_options.py AUDIT: {missing}"
    stale = sorted((set(AUDIT) | set(NOT_YET)) - declared)
    assert not stale, f"AUDIT rows for options no longer declared: {stale}"
    assert not set(AUDIT) & set(NOT_YET)
    tests = {}
    for named in set(AUDIT.values()):
        file, name = named.split("::")
        if file not in tests:
            tree = ast.parse((ROOT / "tests" / file).read_text())
            tests[file] = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert name in tests[file], f"AUDIT names {named}, which does not exist"


def test_the_sql_reference_lists_every_worker_setting():
    """Generated from the declarations (test_cli checks the region is not stale)."""
    from connectql.worker.settings import WORKER_SETTINGS

    readme = (ROOT / "docs/sql.md").read_text()
    assert "<!-- generated: settings -->" in readme
    for key, option in WORKER_SETTINGS.items():
        assert f"| `{key}` | {option.describe_type()} |" in readme, key
