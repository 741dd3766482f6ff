"""Dead letters and shared streams with a real SparkSession: bad records go to the dead-letter
stream with their context and the connector goes on; counts reconcile; many writers per stream."""

from __future__ import annotations

import json

import pytest

from connectql.errors import PlanError
from tests.helpers import read_parquet_rows, run, wait_until

pytestmark = pytest.mark.spark


def json_inbox(tmp_path, lines):
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    (inbox / "a.json").write_text("\n".join(lines) + "\n")
    return inbox


def test_malformed_records_go_to_the_dead_letter_stream_and_counts_reconcile(worker, tmp_path):
    inbox = json_inbox(
        tmp_path,
        [
            '{"id": 1, "name": "a"}',
            '{"id": 2, "name": ',
            '{"id": 3, "name": "c"}',
            "not json at all",
        ],
    )
    run(
        worker,
        f"""CREATE SOURCE CONNECTOR j FROM file INTO people WITH (path = '{inbox}',
        format = json, schema = 'id BIGINT, name STRING', run = once,
        'errors.tolerance' = 'all', 'errors.deadletter.stream' = 'people_dlq')""",
    )
    worker.wait_for_once()
    assert worker.catalog.get_connector("j").state == "FINISHED"
    assert run(worker, "SELECT id, name FROM people ORDER BY id")[0].rows == [(1, "a"), (3, "c")]
    dead = run(
        worker,
        "SELECT connector, stage, source_offset, error_class, raw_record"
        " FROM people_dlq ORDER BY raw_record",
    )[0].rows
    assert sorted(d[4] for d in dead) == ["not json at all", '{"id": 2, "name": ']
    assert {d[:2] for d in dead} == {("j", "read")}
    assert all(json.loads(d[2])["file"].endswith("a.json") for d in dead)
    assert {d[3] for d in dead} == {"MALFORMED_RECORD"}
    counts = worker.catalog.query(
        "SELECT rows_total, rows_written, rows_dead_lettered,"
        " rows_filtered FROM connectors WHERE name = 'j'"
    )[1]
    assert counts == [(4, 2, 2, 0)]


def test_a_csv_value_that_does_not_fit_its_type_is_a_dead_letter(worker, tmp_path):
    inbox = tmp_path / "csv"
    inbox.mkdir()
    (inbox / "a.csv").write_text("id,qty\n1,5\n2,many\n3,7\n")
    run(
        worker,
        f"""CREATE SOURCE CONNECTOR c FROM file INTO q WITH (path = '{inbox}', format = csv,
        schema = 'id INT, qty INT', run = once, 'errors.tolerance' = 'all',
        'errors.deadletter.stream' = 'q_dlq')""",
    )
    worker.wait_for_once()
    assert run(worker, "SELECT id, qty FROM q ORDER BY id")[0].rows == [(1, 5), (3, 7)]
    assert run(worker, "SELECT raw_record FROM q_dlq")[0].rows == [("2,many",)]


def test_with_tolerance_none_a_malformed_record_fails_the_connector(worker, tmp_path):
    inbox = json_inbox(tmp_path, ['{"id": 1}', "{broken"])
    run(
        worker,
        f"""CREATE SOURCE CONNECTOR j FROM file INTO s WITH (path = '{inbox}',
        format = json, schema = 'id BIGINT', 'errors.retry.max' = 0)""",
    )
    wait_until(
        lambda: worker.catalog.get_connector("j").state == "FAILED", timeout=90, what="FAILED"
    )
    error = worker.catalog.get_connector("j").last_error
    assert "a.json" in error and "JsonParseException" in error
    assert read_parquet_rows(worker.home / "streams/s") is None  # nothing half-written


def test_tolerance_all_needs_a_dead_letter_stream(worker, tmp_path):
    with pytest.raises(PlanError, match="errors.tolerance = 'all' needs errors.deadletter.stream"):
        run(
            worker,
            f"CREATE SOURCE CONNECTOR j FROM file INTO s WITH (path = '{tmp_path}',"
            " format = json, schema = 'id BIGINT', 'errors.tolerance' = 'all')",
        )
    assert worker.catalog.streams() == []


def test_two_sources_share_a_stream_and_a_recreated_connector_writes_again(worker):
    run(
        worker,
        """
        CREATE SOURCE CONNECTOR a FROM datagen INTO s
          WITH ('rows.total' = 100, run = once, fields = 'id BIGINT SEQUENCE');
        CREATE SOURCE CONNECTOR b FROM datagen INTO s
          WITH ('rows.total' = 100, run = once, fields = 'id BIGINT SEQUENCE(1000)');""",
    )
    worker.wait_for_once()
    assert read_parquet_rows(worker.home / "streams/s") == [(200, 200)]
    run(
        worker,
        """DROP CONNECTOR a;
        CREATE SOURCE CONNECTOR a FROM datagen INTO s
          WITH ('rows.total' = 100, run = once, fields = 'id BIGINT SEQUENCE(5000)');""",
    )
    worker.wait_for_once()
    assert read_parquet_rows(worker.home / "streams/s") == [(300, 300)]


def test_a_sink_batchs_dead_letters_count_across_its_rounds_and_streams(tmp_path):
    """rows_dead_lettered of a sink's batch: its files of every round and, for a sink of
    several streams, of every stream's writer id; not another batch's or writer's."""
    from connectql.catalog.streams import append_table
    from connectql.runtime.deadletters import rejected_rows
    from connectql.toolkit.envelope import deadletter_name, sink_dead_letters
    from connectql.toolkit.routed import route_id

    wid = "abcdef123456"

    def letters(name: str, n: int) -> None:
        rows = [("{}", i, "E", "m") for i in range(n)]
        assert append_table(tmp_path, name, sink_dead_letters("s", 3, rows))

    letters(deadletter_name(wid, 3), 2)
    letters(deadletter_name(wid, 3) + "-1", 1)  # a later round
    letters(deadletter_name(route_id(wid, "shop_a"), 3), 4)  # one stream's writer
    letters(deadletter_name(wid, 33), 8)
    letters(deadletter_name("0123456789ab", 3), 16)
    assert rejected_rows(str(tmp_path), wid, 3) == 7
