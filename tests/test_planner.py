"""Planner: pure plans from catalog entries, and every planning-time error."""

from __future__ import annotations

import json

import pytest

from connectql.catalog.secrets import SecretStore
from connectql.catalog.store import ConnectorEntry, StreamEntry
from connectql.errors import PlanError, ValidationError
from connectql.grammar.ast import SecretRef
from connectql.planner.plan import PlanContext, build_plan
from connectql.toolkit.spark import CONFIG_KEY

SCHEMA_JSON = (
    '{"type":"struct","fields":[{"name":"a","type":"long","nullable":true,'
    '"metadata":{}},{"name":"b","type":"long","nullable":true,"metadata":{}}]}'
)


@pytest.fixture
def ctx(tmp_path):
    streams = {
        "s": StreamEntry("s", str(tmp_path / "streams/s"), "`a` BIGINT, `b` BIGINT", SCHEMA_JSON),
        "empty": StreamEntry("empty", str(tmp_path / "streams/empty")),
    }
    return PlanContext(tmp_path, streams, SecretStore(tmp_path / "secrets.json"))


def source(opts, type_="file", stream="s"):
    return ConnectorEntry("src", "source", type_, stream, opts)


def sink(opts, type_="file", stream="s", select=None):
    return ConnectorEntry("snk", "sink", type_, stream, opts, select)


def test_file_source_plan(ctx, tmp_path):
    plan = build_plan(
        source({"path": "/in", "format": "json", "trigger.interval": "2 seconds"}),
        ctx,
    )
    assert (plan.reader.format, plan.reader.path) == ("json", "/in")
    assert plan.writer.path == str(tmp_path / "streams/s")
    assert plan.checkpoint == str(tmp_path / "checkpoints/src")
    assert (plan.tasks, plan.interval_ms, plan.run) == (1, 2000, "continuous")
    assert build_plan(source({"tasks.max": "3"}, "datagen"), ctx).tasks == 3


def test_type_and_stream_may_come_from_with(ctx):
    plan = build_plan(source({"connector": "file", "stream": "s2", "path": "/in"}, None, None), ctx)
    assert (plan.type, plan.stream) == ("file", "s2")


def test_type_given_twice_differently_is_an_error(ctx):
    with pytest.raises(PlanError, match="type given twice"):
        build_plan(source({"connector": "datagen", "path": "/in"}), ctx)


def test_mysql_and_its_alias_plan_and_name_missing_options(ctx):
    with pytest.raises(ValidationError, match="database"):
        build_plan(source({"host": "x"}, "mysql"), ctx)
    with pytest.raises(ValidationError, match="table"):
        build_plan(sink({"host": "x", "database": "d"}, "mariadb"), ctx)
    with pytest.raises(PlanError, match="give table"):
        build_plan(source({"database": "d"}, "mariadb"), ctx)
    plan = build_plan(source({"database": "d", "table": "t", "password": "pw"}, "mysql"), ctx)
    assert plan.type == "mysql" and "pw" not in str(plan.describe())


def test_unknown_type_lists_the_known_ones(ctx):
    with pytest.raises(
        PlanError,
        match=r"unknown connector type 'fiel' \(did you mean 'file'\?\);"
        r" known types: .*datagen.*file",
    ):
        build_plan(source({}, "fiel"), ctx)


def test_unknown_option_suggests_the_nearest(ctx):
    with pytest.raises(
        ValidationError, match=r"unknown option 'formt' \(did you mean 'format'\?\)"
    ):
        build_plan(source({"path": "/in", "formt": "csv"}), ctx)


def test_wrong_type_names_option_and_expected_type(ctx):
    with pytest.raises(ValidationError, match=r"option 'tasks.max' must be int, got 'many'"):
        build_plan(source({"path": "/in", "tasks.max": "many"}), ctx)
    with pytest.raises(ValidationError, match=r"option 'run' must be one of 'continuous', 'once'"):
        build_plan(source({"path": "/in", "run": "twice"}), ctx)


def test_missing_required_option_names_it_with_its_doc(ctx):
    with pytest.raises(ValidationError, match=r"missing required option 'path': directory to read"):
        build_plan(source({}), ctx)


def test_sink_reads_an_existing_stream_with_a_schema(ctx):
    with pytest.raises(
        PlanError, match=r"reads stream 'nope', which does not exist \(known: empty, s\)"
    ):
        build_plan(sink({"path": "/out"}, stream="nope"), ctx)
    with pytest.raises(PlanError, match="stream 'empty' has no schema yet"):
        build_plan(sink({"path": "/out"}, stream="empty"), ctx)


def test_sink_transform_is_compiled_and_checked(ctx):
    plan = build_plan(
        sink({"path": "/out"}, select="SELECT a, b * 2 AS c FROM s WHERE b > 10"), ctx
    )
    assert plan.transform.projections == ("a", "b * 2 AS c")
    assert plan.transform.where == "b > 10"
    with pytest.raises(PlanError, match=r"unknown column 'zz' in stream 's' \(columns: a, b\)"):
        build_plan(sink({"path": "/out"}, select="SELECT a, zz FROM s"), ctx)
    with pytest.raises(PlanError, match="GROUP BY is not supported"):
        build_plan(sink({"path": "/out"}, select="SELECT a, count(*) FROM s GROUP BY a"), ctx)


def test_secrets_are_resolved_in_the_plan_and_masked_in_explain(ctx, monkeypatch, tmp_path):
    ctx.secrets.put("pw", "s3cret-value")
    monkeypatch.setenv("CQL_TEST_PATH", "/from/env")
    plan = build_plan(source({"path": "${env:CQL_TEST_PATH}", "schema": SecretRef("pw")}), ctx)
    assert plan.reader.path == "/from/env"
    assert plan.options["path"] == "${env:CQL_TEST_PATH}"  # the plan keeps the reference
    with pytest.raises(PlanError, match="environment variable CQL_NOPE, which is not set"):
        build_plan(source({"path": "${env:CQL_NOPE}"}), ctx)


def test_explain_rows_describe_every_step(ctx):
    plan = build_plan(
        sink({"path": "/out", "run": "once"}, select="SELECT a FROM s WHERE b > 1"), ctx
    )
    steps = dict(plan.describe())
    assert steps["trigger"] == "available-now (run = 'once')"
    assert steps["transform"] == "SELECT a WHERE b > 1"
    assert steps["write"].startswith("format parquet at /out")


def test_env_reference_with_a_default_is_typed_like_its_option(ctx, monkeypatch):
    monkeypatch.delenv("CQL_TEST_PORT", raising=False)
    opts = {"database": "shop", "table": "t", "port": "${env:CQL_TEST_PORT:-3307}"}

    def port() -> object:
        return json.loads(build_plan(source(opts, "mysql"), ctx).reader.options[CONFIG_KEY])["port"]

    assert port() == 3307  # the default, as an int
    monkeypatch.setenv("CQL_TEST_PORT", "3310")
    assert port() == 3310
    monkeypatch.setenv("CQL_TEST_PORT", "")  # empty counts as unset, as in the shell
    assert port() == 3307
    monkeypatch.setenv("CQL_TEST_PORT", "x33")
    with pytest.raises(ValidationError, match=r"source connector 'src': option 'port' must be"):
        build_plan(source(opts, "mysql"), ctx)


def test_an_unknown_type_is_named_with_or_without_with(ctx):
    """`CREATE ... FROM datagn INTO nums` (no WITH) names the unknown type, not 'expected
    WITH': WITH may be left out."""
    from connectql.catalog.store import ConnectorEntry
    from connectql.grammar.parser import parse_script

    for text in ("CREATE SOURCE CONNECTOR g FROM datagn INTO nums", "CREATE SOURCE CONNECTOR"
                 " g FROM datagn INTO nums WITH ('rows.total' = 3)"):  # fmt: skip
        (stmt,) = parse_script(text)
        entry = ConnectorEntry(stmt.name, "source", stmt.type, stmt.stream, stmt.options)
        with pytest.raises(PlanError, match=r"unknown connector type 'datagn' \(did you mean"):
            build_plan(entry, ctx)
    (stmt,) = parse_script("CREATE SOURCE CONNECTOR g FROM datagen INTO nums")
    assert (stmt.type, stmt.options) == ("datagen", {})
