"""The server's pieces that need no Spark: Kafka Connect bodies as statements, config validation,
Prometheus text, the home's lock and address file."""

from __future__ import annotations

import json
import os
from datetime import datetime

import pytest

from connectql.api import kafkaconnect, metrics
from connectql.api.errors import match
from connectql.api.routes import ApiError
from connectql.catalog.store import Catalog, ConnectorEntry
from connectql.errors import ConnectQLError, PlanError, ValidationError
from connectql.grammar import ast
from connectql.worker.home import HomeLock, read_address, write_address


def test_kafka_connect_body_is_the_create_statement_it_stands_for():
    stmt = kafkaconnect.statement(
        {"name": "g", "config": {"connector.class": "datagen", "stream": "s", "rows.total": "5"}}
    )
    assert stmt == ast.CreateSourceConnector(
        "g", "datagen", None, {"stream": "s", "rows.total": "5"}
    )
    sink = kafkaconnect.statement(
        {"name": "p", "config": {"connector.class": "io.x.PostgresSinkConnector", "topics": "s"}}
    )
    assert sink == ast.CreateSinkConnector("p", "postgres", None, {"stream": "s"})
    # a type that is both a source and a sink: `topics` says sink
    assert isinstance(
        kafkaconnect.statement({"name": "f", "config": {"connector.class": "file", "topics": "s"}}),
        ast.CreateSinkConnector,
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([1, 2], "must be a CREATE statement or"),
        ({"name": "x"}, "must be a CREATE statement or"),
        ({"name": "x y", "config": {"connector.class": "datagen"}}, "must be a word"),
        ({"name": "x", "config": {}}, "needs connector.class"),
        ({"name": "x", "config": {"connector.class": "file"}}, "'file-source' or 'file-sink'"),
        ({"name": "x", "config": {"connector.class": "datagen", "a": {"b": 1}}}, "'a' must be"),
        ({"name": "x", "config": {"connector.class": "p-sink", "topics": "a,b"}}, "unknown"),
        ({"name": "x", "config": {"connector.class": "file-sink", "topics": "a,b"}}, "several"),
    ],
)
def test_a_bad_kafka_connect_body_is_named(body, message):
    with pytest.raises((ValidationError, PlanError), match=message):
        kafkaconnect.statement(body)


def test_validate_reports_each_option_and_names_the_bad_ones():
    good = kafkaconnect.validate("datagen", {"connector.class": "datagen", "rows.total": "10"})
    assert good["error_count"] == 0 and good["type"] == "source"
    values = {c["value"]["name"]: c["value"] for c in good["configs"]}
    assert values["rows.total"]["value"] == "10" and values["rows.total"]["errors"] == []
    bad = kafkaconnect.validate("datagen", {"rows.totl": 5, "rows.per.second": "fast"})
    errors = {
        c["value"]["name"]: c["value"]["errors"] for c in bad["configs"] if c["value"]["errors"]
    }
    assert bad["error_count"] == 2
    assert "did you mean 'rows.total'" in errors["rows.totl"][0]
    assert "must be float" in errors["rows.per.second"][0]
    pg = kafkaconnect.validate("postgres-sink", {"password": "hunter2-x", "topics": "s"})
    shown = {c["value"]["name"]: c["value"]["value"] for c in pg["configs"]}
    assert shown["password"] == "****" and pg["type"] == "sink"
    with pytest.raises(ValidationError, match="does not match"):
        kafkaconnect.validate("datagen", {"connector.class": "file"})


def test_routes_match_paths_and_say_which_methods_a_path_takes():
    assert match("GET", "/connectors/a%20b/status") == ("get_status", {"name": "a b"})
    assert match("PUT", "/connector-plugins/datagen/config/validate")[0] == "validate_config"
    with pytest.raises(ApiError) as e:
        match("POST", "/connectors/x/pause")
    assert e.value.status == 405 and "use PUT" in str(e.value)
    with pytest.raises(ApiError) as e:
        match("GET", "/nothing")
    assert e.value.status == 404


def progress(batch_id: int, duration_ms: int) -> dict:
    """A batch's progress as the engine reports it (runtime/engine.progress_row), no rows."""
    counts = ("input_rows", "written_rows", "filtered_rows", "dead_lettered_rows")
    return {
        "batch_id": batch_id,
        "started_at": datetime(2026, 1, 1),
        "duration_ms": duration_ms,
        "input_rows_per_sec": 0.0,
        "processed_rows_per_sec": 0.0,
        "end_offset": None,
        **dict.fromkeys(counts, 0),
    }


def test_metrics_are_prometheus_text_per_connector(tmp_path):
    cat = Catalog(tmp_path / "c.duckdb")
    cat.add_connector(ConnectorEntry('we"ird', "source", "datagen", "s", {}))
    for batch, ms in ((1, 900), (2, 250)):  # the last batch's duration is the one shown
        cat.record_progress('we"ird', progress(batch, ms))
    cat.execute("UPDATE connectors SET rows_total = 42, state = 'RUNNING', rows_per_sec = 1.5")
    text = metrics.exposition(cat)
    labels = '{connector="we\\"ird",kind="source",type="datagen"'
    assert f"connectql_connector_rows_total{labels}}} 42.0\n" in text
    assert f"connectql_connector_rows_per_second{labels}}} 1.5\n" in text
    assert f"connectql_connector_batch_duration_seconds{labels}}} 0.25\n" in text
    state = '{connector="we\\"ird",kind="source",state="%s",type="datagen"}'  # labels sorted
    assert f"connectql_connector_state{state % 'RUNNING'} 1.0\n" in text
    assert f"connectql_connector_state{state % 'FAILED'} 0.0\n" in text
    assert "# TYPE connectql_connector_rows_total counter" in text
    assert "connectql_connector_lag{" not in text  # no lag known: no sample
    cat.close()


def test_one_worker_per_home_and_a_stale_address_is_ignored(tmp_path):
    lock = HomeLock(tmp_path)
    url = write_address(tmp_path, "127.0.0.1", 8099)
    assert read_address(tmp_path)["url"] == url == "http://127.0.0.1:8099"
    with pytest.raises(ConnectQLError) as e:
        HomeLock(tmp_path)
    assert f"pid {os.getpid()}, serving http://127.0.0.1:8099" in str(e.value)
    lock.release()
    assert not (tmp_path / "server.json").exists()
    # an address left by a server killed with -9: nobody holds the lock, so it is not used
    (tmp_path / "server.json").write_text(json.dumps({"pid": 1, "url": "http://127.0.0.1:1"}))
    assert read_address(tmp_path) is None
    HomeLock(tmp_path).release()


def test_config_shows_what_was_written_and_with_resolved_the_values_in_use(monkeypatch):
    """GET /connectors/{name}/config: as written; ?resolved=true: a non-secret reference as
    the worker resolves it now, secrets masked either way."""
    monkeypatch.setenv("CQ_TEST_HOST", "db.internal")
    monkeypatch.setenv("CQ_TEST_PW", "hunter22")
    opts = {
        "host": "${env:CQ_TEST_HOST:-127.0.0.1}",
        "port": "${env:CQ_TEST_PORT:-3306}",
        "user": "${env:CQ_TEST_MISSING}",
        "password": "${env:CQ_TEST_PW}",
        "table": "orders",
    }
    entry = ConnectorEntry("m", "source", "mysql", "orders", opts)
    written = kafkaconnect.config(entry)
    assert written["host"] == "${env:CQ_TEST_HOST:-127.0.0.1}" and written["table"] == "orders"
    in_use = kafkaconnect.config(entry, in_use=True)
    assert (in_use["host"], in_use["port"], in_use["table"]) == ("db.internal", "3306", "orders")
    assert in_use["user"].startswith("${env:CQ_TEST_MISSING} (") and "not set" in in_use["user"]
    assert in_use["password"] == written["password"] == "${env:CQ_TEST_PW}"
    assert "hunter22" not in str(in_use)
