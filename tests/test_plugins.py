"""Connector plugins from installed packages (the `connectql.connectors` entry points): listed
with where they come from, usable in CREATE, and a broken one listed with why, never fatal."""

from __future__ import annotations

import json
import sys

import pytest

from connectql.api import kafkaconnect
from connectql.config import validate
from connectql.connectors import registry
from connectql.errors import PlanError
from connectql.planner.plan import _spec_text
from connectql.runtime.ride import Ride
from connectql.toolkit import Connector
from tests.helpers import run, wait_until
from tests.toolkit_connectors import Shelf, written

EVENTS = "SELECT reason FROM connector_events WHERE connector = ? ORDER BY time"

ENTRY_POINTS = """[connectql.connectors]
counter = tests.toolkit_connectors:COUNTER
broken = no_such_module_anywhere:CONNECTOR
notone = json:dumps
postgres = tests.toolkit_connectors:COUNTER
shelves = tests.toolkit_connectors:SHELVES
picky = tests.toolkit_connectors:PICKY
growing = tests.toolkit_connectors:GROWING
keyed = tests.toolkit_connectors:KEYED
shelf = tests.toolkit_connectors:SHELF
greedy = tests.toolkit_connectors:GREEDY
hanging = tests.toolkit_connectors:HANGING
acking = tests.toolkit_connectors:ACKING
"""


@pytest.fixture
def plugins(tmp_path):
    """An installed package (its metadata on sys.path) that declares twelve entry points."""
    site = tmp_path / "site"
    meta = site / "fake_plugins-1.2.3.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugins\nVersion: 1.2.3\n")
    (meta / "entry_points.txt").write_text(ENTRY_POINTS)
    sys.path.insert(0, str(site))
    registry._found.cache_clear()
    yield
    sys.path.remove(str(site))
    registry._found.cache_clear()


def test_broken_plugins_are_listed_with_why_and_refused_at_create_only(plugins):
    listed = {(p.type, p.origin): p for p in registry.listing()}
    counter = listed[("counter", "fake-plugins 1.2.3")]
    assert counter.installed and counter.kinds == ("source", "sink")
    assert counter.delivery == "exactly-once"
    broken = listed[("broken", "fake-plugins 1.2.3")]
    assert "cannot import no_such_module_anywhere:CONNECTOR: ModuleNotFoundError" in broken.problem
    assert (
        "json:dumps is a function, not a Connector"
        in listed[("notone", "fake-plugins 1.2.3")].problem
    )
    greedy = listed[("greedy", "fake-plugins 1.2.3")]
    assert not greedy.installed
    assert "its source declares stream, which connectql gives every source" in greedy.problem
    clash = listed[("postgres", "fake-plugins 1.2.3")].problem
    assert clash == "the type name 'postgres' is taken by built-in; this one is ignored"
    assert registry.lookup("postgres").origin == "built-in"  # the built-in keeps its name
    with pytest.raises(
        PlanError,
        match=r"connector type broken \(from fake-plugins 1.2.3\) cannot be used: cannot import",
    ):
        registry.lookup("broken", "source")


def test_a_sinks_target_options_must_be_options_it_declares():
    """target_options names the options that give each stream its own target; one that is
    not an option of the sink (a typo) is a problem of the declaration, not a silent no-op."""

    class Misnamed(Shelf):
        target_options = {"folder": "{stream}"}

    assert Connector("shelf", "a folder per stream", sink=Shelf).problems() == []
    assert Connector("misnamed", "a typo", sink=Misnamed).problems() == [
        "sink target_options names folder, not its options"
    ]


def test_the_http_api_lists_and_validates_a_plugin_from_its_declaration(plugins):
    listed = [p for p in kafkaconnect.plugins() if p["class"] == "counter"]
    assert [(p["type"], p["version"], p["origin"]) for p in listed] == [
        ("source", "1.2.3", "fake-plugins 1.2.3"),
        ("sink", "1.2.3", "fake-plugins 1.2.3"),
    ]
    assert "broken" not in {p["class"] for p in kafkaconnect.plugins()}
    answer = kafkaconnect.validate("counter-source", {"count": "many", "stream": "s"})
    assert answer["error_count"] == 1
    errors = {c["value"]["name"]: c["value"]["errors"] for c in answer["configs"]}
    assert errors["count"] == ["option 'count' must be int, got 'many'"]


def test_a_plugins_secret_option_is_never_in_its_plan(plugins):
    plugin = registry.lookup("counter", "source")
    given = {"count": 3, "token": "hunter2", "stream": "s"}
    spec = plugin.plan_source(validate(plugin.source_options, given, "test"))
    assert spec.options["connectql.toolkit.secret.token"] == "hunter2"  # a key Spark redacts
    assert "hunter2" not in spec.options["connectql.toolkit.config"]
    assert "hunter2" not in _spec_text(spec)


@pytest.mark.spark
def test_a_plugin_source_and_sink_run_end_to_end_with_dead_letters(plugins, worker, tmp_path):
    shown = {r[0]: r for r in run(worker, "SHOW CONNECTOR PLUGINS")[0].rows}
    assert shown["counter"][1:5] == ("source, sink", "fake-plugins 1.2.3", "yes", "exactly-once")
    assert shown["broken"][3] == "no" and "ModuleNotFoundError" in shown["broken"][5]
    described = run(worker, "DESCRIBE PLUGIN counter")[0]
    assert "fake-plugins 1.2.3" in described.title
    assert {("source", "batch.max.records"), ("sink", "path")} <= {r[:2] for r in described.rows}
    with pytest.raises(PlanError, match="cannot be used: cannot import"):
        run(worker, "CREATE SOURCE CONNECTOR b FROM broken INTO x WITH (run = 'once')")

    run(
        worker,
        "CREATE SOURCE CONNECTOR c FROM counter INTO nums WITH (count = 20, bad = 5,"
        " 'batch.max.records' = 7, run = 'once', 'errors.tolerance' = 'all',"
        " 'errors.deadletter.stream' = 'nums_dlq')",
    )
    worker.wait_for_once()
    assert worker.catalog.get_connector("c").state == "FINISHED"
    ids = run(worker, "SELECT id FROM nums ORDER BY id")[0].rows
    assert [i for (i,) in ids] == [i for i in range(20) if i % 5 != 4]
    dead = run(worker, "SELECT source_offset, error_message, raw_record FROM nums_dlq ORDER BY 3")
    assert dead[0].rows[0] == ('{"n": 14}', "not a number", "#14")
    assert len(dead[0].rows) == 4

    out = tmp_path / "out"
    run(worker, f"CREATE SINK CONNECTOR o TO counter FROM nums WITH (path = '{out}', run = 'once')")
    worker.wait_for_once()
    assert worker.catalog.get_connector("o").state == "FINISHED"
    assert sorted(r["id"] for r in written(out)) == [i for (i,) in ids]


@pytest.mark.spark
def test_a_plugin_source_of_several_tables_fills_a_stream_per_table(plugins, worker):
    create = (
        "CREATE SOURCE CONNECTOR s FROM shelves INTO shop WITH (count = 20, bad = 5,"
        " 'batch.max.records' = 7, run = 'once', 'errors.tolerance' = 'all',"
        " 'errors.deadletter.stream' = 'shop_dlq')"
    )
    (plan,) = run(worker, "EXPLAIN " + create)
    assert ("tables", "books -> shop_books, pens -> shop_pens") in plan.rows
    run(worker, create)
    worker.wait_for_once()
    assert worker.catalog.get_connector("s").state == "FINISHED"
    good = [i for i in range(20) if i % 5 != 4]
    books = run(worker, "SELECT id, title FROM shop_books ORDER BY id")[0].rows
    assert books == [(i, f"record {i}") for i in good if i % 2 == 0]
    pens = run(worker, "SELECT id, color FROM shop_pens ORDER BY id")[0].rows
    assert pens == [(i, f"c{i}") for i in good if i % 2 == 1]
    assert worker.catalog.get_stream("shop_books").key == "id"
    assert worker.catalog.get_stream("shop_pens").schema == "`id` BIGINT, `color` STRING"
    dead = run(worker, "SELECT source_offset, error_message, raw_record FROM shop_dlq ORDER BY 3")
    assert dead[0].rows == [(f'{{"n": {i}}}', "not a number", f"#{i}") for i in (14, 19, 4, 9)]


@pytest.mark.spark
def test_a_table_that_cannot_be_read_stops_alone_and_the_other_tables_go_on(plugins, worker):
    run(
        worker,
        "CREATE SOURCE CONNECTOR s FROM shelves INTO shop WITH (count = 20, broken = 7,"
        " 'batch.max.records' = 4)",
    )

    def books() -> list[int]:
        return [i for (i,) in run(worker, "SELECT id FROM shop_books ORDER BY id")[0].rows]

    wait_until(lambda: books() == list(range(0, 20, 2)), 120, what="every book")
    # the batch of ids 4..7 failed at pen 7 and ran again without the pens
    assert run(worker, "SELECT id FROM shop_pens ORDER BY id")[0].rows == [(1,), (3,)]
    ((state, failed),) = run(worker, "SELECT state, tables_failed FROM connectors")[0].rows
    assert state == "RUNNING"
    assert json.loads(failed) == {"pens": "pen 7: its color cannot be read"}


@pytest.mark.spark
def test_records_that_gain_a_column_widen_the_stream_and_flow_on(plugins, worker, tmp_path):
    grown = tmp_path / "grown"
    run(
        worker,
        f"CREATE SOURCE CONNECTOR g FROM growing INTO gs WITH (count = 5, grown = '{grown}')",
    )
    rows = "SELECT id FROM gs ORDER BY id"
    wait_until(lambda: len(run(worker, rows)[0].rows) == 5, 120, what="the first records")
    grown.touch()
    wait_until(lambda: len(run(worker, rows)[0].rows) == 10, 120, what="the grown records")
    got = run(worker, "SELECT id, size FROM gs ORDER BY id")[0].rows
    assert got == [(i, None) for i in range(5)] + [(i, i * 10) for i in range(5, 10)]
    assert worker.catalog.get_stream("gs").schema == "`id` BIGINT, `text` STRING, `size` BIGINT"
    events = "SELECT reason FROM connector_events WHERE connector = 'g'"
    assert "schema evolved: stream gs gained column(s) size" in [
        r for (r,) in run(worker, events)[0].rows
    ]
    assert worker.catalog.get_connector("g").state == "RUNNING"


@pytest.mark.spark
def test_a_several_table_sources_bad_record_or_unknown_table_fails_it_naming_why(plugins, worker):
    run(
        worker,
        "CREATE SOURCE CONNECTOR a FROM shelves INTO x WITH (count = 9, bad = 4, run = 'once')",
    )
    run(
        worker,
        "CREATE SOURCE CONNECTOR b FROM shelves INTO y WITH (count = 3, stray = true, run = 'once')",
    )
    worker.wait_for_once()
    a, b = worker.catalog.get_connector("a"), worker.catalog.get_connector("b")
    assert a.state == b.state == "FAILED"
    assert 'a record at {"n": 3} does not parse: not a number' in a.last_error
    assert "yields (table, records) pairs of its tables (books, pens), not ('cups'" in b.last_error
    assert run(worker, "SELECT count(*) FROM x_books")[0].rows == [(0,)]


@pytest.mark.spark
def test_rows_a_plugin_sink_rejects_are_dead_letters_or_fail_it(plugins, worker, tmp_path):
    run(worker, "CREATE SOURCE CONNECTOR c FROM counter INTO nums WITH (count = 30, run = 'once')")
    worker.wait_for_once()
    run(
        worker,
        f"CREATE SINK CONNECTOR p TO picky FROM nums WITH (path = '{tmp_path / 'p'}',"
        " run = 'once', 'errors.tolerance' = 'all', 'errors.deadletter.stream' = 'nines')",
    )
    run(worker, f"CREATE SINK CONNECTOR q TO picky FROM nums WITH (path = '{tmp_path / 'q'}')")
    worker.wait_for_once()
    assert worker.catalog.get_connector("p").state == "FINISHED"
    assert sorted(r["id"] for r in written(tmp_path / "p")) == [
        i for i in range(30) if "9" not in str(i)
    ]
    dead = run(worker, "SELECT stage, error_class, error_message, raw_record FROM nines ORDER BY 4")
    assert dead[0].rows == [
        ("write", "ValueError", f"no nines: 'record {i}'", f'{{"id": {i}, "text": "record {i}"}}')
        for i in (19, 29, 9)
    ]
    offsets = run(worker, "SELECT source_offset FROM nines")[0].rows
    assert all(json.loads(o)["row"] in range(30) for (o,) in offsets)
    wait_until(lambda: worker.catalog.get_connector("q").state == "FAILED", 120)
    assert "the target rejects row 9 of the batch: no nines: 'record 9'" in (
        worker.catalog.get_connector("q").last_error
    )


@pytest.mark.spark
def test_a_plugin_names_where_it_waits_and_cleans_up_when_dropped(plugins, worker, tmp_path):
    plugin = registry.lookup("counter", "source")
    spec = plugin.plan_source(validate(plugin.source_options, {"count": 3}, "test"))
    assert spec.endpoint == "counter.test:9"  # named when a batch hangs
    marker = tmp_path / "m"
    run(
        worker,
        f"CREATE SOURCE CONNECTOR c FROM counter INTO n WITH (count = 3, dropped = '{marker}',"
        " 'initial.state' = 'paused')",
    )
    run(worker, f"CREATE SINK CONNECTOR o TO counter FROM n WITH (path = '{tmp_path / 'o'}')")
    assert run(worker, "DROP CONNECTOR o")[0].message == "dropped connector o"
    assert not marker.exists()  # the source's cleanup is not the sink's
    assert run(worker, "DROP CONNECTOR c")[0].message == f"dropped connector c; wrote {marker}"
    assert marker.read_text() == "c"


@pytest.mark.spark
def test_a_source_is_asked_what_it_reads_at_create_not_at_each_start(plugins, worker, tmp_path):
    asked = tmp_path / "asked"
    run(worker, f"CREATE SOURCE CONNECTOR k FROM keyed INTO ks WITH (count = 3, asked = '{asked}')")
    query = "SELECT id, text FROM ks ORDER BY id"
    rows = wait_until(lambda: len(run(worker, query)[0].rows) == 3 and run(worker, query)[0].rows)
    assert rows == [(i, "k True") for i in range(3)]  # its name and checkpoint, on executors
    assert worker.catalog.find_stream("ks").key_columns == ("id",)  # key(), for upsert sinks
    assert asked.read_text() == "schema\n"
    run(worker, "PAUSE CONNECTOR k")
    run(worker, "RESUME CONNECTOR k")
    wait_until(lambda: worker.catalog.get_connector("k").state == "RUNNING", what="k resumed")
    assert asked.read_text() == "schema\n"  # a start takes the stream's schema from the catalog
    opened = tmp_path / "opened"
    out = tmp_path / "out"
    run(
        worker,
        f"CREATE SINK CONNECTOR o TO keyed FROM ks WITH (path = '{out}', opened = '{opened}',"
        " skip = 'text')",
    )
    wait_until(lambda: len(written(out)) == 3, what="the sink's rows")
    assert written(out)[0].keys() == {"id"}  # the column it never reads is not read at all
    writer, _epoch, connector, key, _notes = json.loads(opened.read_text().splitlines()[0])
    assert (connector, key) == ("o", ["id"]) and writer  # the stream's key, for upserts


@pytest.mark.spark
def test_an_exactly_once_plugin_sink_rides_its_source_each_record_once(plugins, worker, tmp_path):
    out, opened = tmp_path / "out", tmp_path / "opened"
    run(
        worker,
        f"CREATE SOURCE CONNECTOR k FROM keyed INTO ks WITH (count = 400,"
        f" 'batch.max.records' = 50, asked = '{tmp_path / 'asked'}');"
        f" CREATE SINK CONNECTOR o TO keyed FROM ks WITH (path = '{out}', opened = '{opened}')",
    )
    assert isinstance(worker.engine.queries["o"], Ride)  # no Spark query of its own
    wait_until(lambda: len(written(out)) >= 400, what="the sink's rows")
    assert sorted(r["id"] for r in written(out)) == list(range(400))  # each record once
    told = [r[0] for r in worker.catalog.query(EVENTS, ["o"])[1]]
    assert "chained: writes the batches of its stream's source" in told, told
    metrics = "SELECT sum(written_rows) FROM connector_metrics WHERE connector = 'o'"
    assert wait_until(lambda: worker.catalog.query(metrics)[1][0][0] == 400, what="metrics")
    assert worker.catalog.get_connector("o").state == "RUNNING"


@pytest.mark.spark
def test_a_sink_of_several_streams_writes_each_as_a_sink_of_its_own(plugins, worker, tmp_path):
    """streams = 'ks_*': one query, a sink per stream (its ${stream} filled in, its own writer
    id and stream key), each round of calls wrapped by together()."""
    asked, out, opened, rounds = (tmp_path / n for n in ("asked", "out", "opened", "rounds"))
    run(
        worker,
        f"""CREATE SOURCE CONNECTOR ka FROM keyed INTO ks_a WITH (count = 5, asked = '{asked}');
        CREATE SOURCE CONNECTOR kb FROM counter INTO ks_b WITH (count = 3);""",
    )
    wait_until(
        lambda: all(worker.catalog.get_stream(s).schema for s in ("ks_a", "ks_b")),
        what="both streams' schemas",
    )
    alike = f"streams = 'ks_*', path = '{out}', opened = '{opened}', rounds = '{rounds}'"
    with pytest.raises(
        PlanError,  # the option named is the one its target_options declares
        match=r"streams ks_a and ks_b would be written alike: give path a \$\{table\} or"
        r" \$\{stream\} so that each stream has its own",
    ):
        run(worker, f"CREATE SINK CONNECTOR x TO shelf WITH ({alike})")
    assert "x" not in {c.name for c in worker.catalog.connectors()}
    per_stream = alike.replace(f"path = '{out}'", f"path = '{out}/${{stream}}'")
    run(worker, f"CREATE SINK CONNECTOR o TO shelf WITH ({per_stream})")
    wait_until(
        lambda: len(written(out / "ks_a")) == 5 and len(written(out / "ks_b")) == 3,
        what="each stream's rows in its folder",
        diagnose=lambda: worker.catalog.get_connector("o").last_error,
    )
    assert sorted(r["id"] for r in written(out / "ks_a")) == list(range(5))
    assert sorted(r["id"] for r in written(out / "ks_b")) == list(range(3))
    seen = [json.loads(line) for line in opened.read_text().splitlines()]
    by_key = {tuple(key): writer for writer, _epoch, connector, key, _notes in seen}
    assert set(by_key) == {("id",), ()} and by_key[("id",)] != by_key[()]
    assert {connector for _w, _e, connector, _k, _n in seen} == {"o"}
    assert {n for n, _pid in map(json.loads, rounds.read_text().splitlines())} == {2}


def test_a_plugin_call_that_hangs_fails_its_statement_and_nothing_else(plugins, worker):
    """check() never returns: CREATE fails after call.timeout.ms naming the plugin and the
    call, nothing is created, and the worker goes on (another CREATE, SHOW)."""
    import time

    from tests.toolkit_connectors import HANG

    HANG.clear()
    try:
        began = time.monotonic()
        with pytest.raises(PlanError) as refused:
            run(
                worker,
                "CREATE SOURCE CONNECTOR h FROM hanging INTO s WITH (count = 3,"
                " 'call.timeout.ms' = 1500)",
            )
        assert time.monotonic() - began < 30
        text = str(refused.value)
        assert (
            "hanging source 'h'" in text and "Hanging.check() did not return within 1500 ms" in text
        )
        assert worker.catalog.connectors() == []
        run(worker, "CREATE SOURCE CONNECTOR c FROM counter INTO n WITH (count = 3, run = 'once')")
        worker.wait_for_once()
        assert [e.name for e in worker.catalog.connectors()] == ["c"]
    finally:
        HANG.set()  # the hung call returns and its thread ends


def test_an_idle_source_acknowledges_its_last_batch(plugins, worker, tmp_path):
    """The ack floor reaches the last record while the source is idle (Spark alone commits a
    batch only when it plans the next), and a PAUSE acknowledges nothing twice."""
    ack = tmp_path / "acks"
    run(
        worker,
        f"CREATE SOURCE CONNECTOR a FROM acking INTO nums WITH (count = 10, acks = '{ack}',"
        " 'batch.max.records' = 4, 'trigger.interval' = '500 milliseconds')",
    )

    def acked() -> list[int]:
        return [int(n) for n in ack.read_text().split()] if ack.exists() else []

    wait_until(lambda: acked()[-1:] == [10], timeout=60, what="the last batch acknowledged")
    run(worker, "PAUSE CONNECTOR a")
    assert acked() == [4, 8, 10]
