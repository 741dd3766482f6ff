"""The datagen source: fields spec, determinism, offsets and read limits (through the toolkit's
stream reader, as Spark calls it), and a real Spark run."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql.datasource import InputPartition
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from connectql.connectors.datagen import (
    BLOCK,
    OPTIONS,
    DatagenSource,
    Field,
    parse_fields,
    read_settings,
    schema_ddl,
)
from connectql.errors import ValidationError
from connectql.toolkit.datasource import ToolkitDataSource
from connectql.toolkit.readsize import PROBE_RECORDS
from connectql.toolkit.spark import (
    FORMAT,
    MAX_BYTES_KEY,
    MAX_RECORDS_KEY,
    StreamReader,
    spark_options,
)
from tests.helpers import run

TS = 1_700_000_000_000
ALL_TYPES = (
    "a BIGINT SEQUENCE(10), b INT RANDOM(-5, 5), c DOUBLE CHOICE(1, 2.5), d STRING CHOICE('x','y'),"
    " e STRING RANDOM(3), f BOOLEAN, g TIMESTAMP NOW, h DATE, i BIGINT, j INT CHOICE(7, 8)"
)


def reader(**options) -> StreamReader:
    """The toolkit's stream reader around a datagen source, as Spark's driver and tasks use it."""
    source = DatagenSource({k: str(v) for k, v in options.items()})
    return StreamReader(source, from_arrow_schema(source.arrow_schema()), {})


def seq_range(start: int, end: int, ts: int) -> InputPartition:
    return InputPartition(json.dumps([start, end, ts]))


def rows(r: StreamReader, start: int, end: int, ts: int = TS) -> pa.Table:
    return pa.Table.from_batches(list(r.read(seq_range(start, end, ts))), r.arrow_schema)


def read_range(r: StreamReader, start: dict, end: dict) -> pa.Table:
    batches = [b for p in r.partitions(start, end) for b in r.read(p)]
    return pa.Table.from_batches(batches, r.arrow_schema)


# --- fields spec ---------------------------------------------------------------------------


def test_default_spec():
    fields = parse_fields(None)
    assert [f.name for f in fields] == ["id", "user_id", "amount", "status", "name", "created_at"]
    assert fields[0] == Field("id", "BIGINT", "SEQUENCE", (0,))
    assert fields[3].args == ("new", "paid", "shipped", "cancelled")
    assert schema_ddl(fields) == (
        "id BIGINT, user_id INT, amount DOUBLE, status STRING, name STRING, created_at TIMESTAMP"
    )


def test_spec_keywords_case_defaults_and_quotes():
    fields = parse_fields(
        "Id bigint sequence(5), n int, x double, s string choice('it''s', 'b'),"
        " ok bool random, t timestamp, d date now, l long Random(1, 2)"
    )
    assert fields == [
        Field("Id", "BIGINT", "SEQUENCE", (5,)),
        Field("n", "INT", "RANDOM", (0, 1000)),
        Field("x", "DOUBLE", "RANDOM", (0.0, 1.0)),
        Field("s", "STRING", "CHOICE", ("it's", "b")),
        Field("ok", "BOOLEAN", "RANDOM", ()),
        Field("t", "TIMESTAMP", "NOW", ()),
        Field("d", "DATE", "NOW", ()),
        Field("l", "BIGINT", "RANDOM", (1, 2)),
    ]


@pytest.mark.parametrize(
    "spec, column, words",
    [
        ("id BIGINT, amount DOUBL", "'amount'", ["unknown type 'DOUBL'", "DOUBLE", "position 19"]),
        ("id BIGINT SEQUENCE, x INT RANDOM(5, 1)", "'x'", ["min <= max"]),
        ("id BIGINT, s STRING RANDOM(0)", "'s'", ["length"]),
        ("flag BOOLEAN SEQUENCE", "'flag'", ["SEQUENCE needs an integer column"]),
        ("s STRING CHOICE(1, 2)", "'s'", ["quoted strings"]),
        ("n INT CHOICE(1, 3000000000)", "'n'", ["fit INT"]),
        ("t TIMESTAMP RANDOM", "'t'", ["not available for TIMESTAMP"]),
        ("x INT NOW", "'x'", ["NOW needs a TIMESTAMP or DATE"]),
        ("x INT RANDOMM(1, 2)", "'x'", ["unknown generator", "RANDOM"]),
        ("x INT RANDOM(1, 2", "'x'", ["expected ',' or ')'", "end of the spec"]),
        ("s STRING CHOICE('a), t INT", "'s'", ["unterminated string", "position 17"]),
        ("a INT, , b INT", "2", ["expected a column name"]),
        ("a INT,", "2", ["expected a column name"]),
        ("a INT b INT", "'a'", ["unknown generator 'b'", "',' missing before column 'b'"]),
        ("a INT RANDOM(1, 2) b", "'a'", ["expected ',' or the end, got 'b'"]),
        ("a", "'a'", ["expected a type"]),
        ("a INT, A BIGINT", "'A'", ["used twice"]),
        ("a INT SEQUENCE(1, 2)", "'a'", ["SEQUENCE takes one"]),
    ],
)
def test_bad_specs_name_the_column(spec, column, words):
    with pytest.raises(ValidationError) as err:
        parse_fields(spec)
    message = str(err.value)
    assert message.startswith(f"fields: column {column}: "), message
    for word in words:
        assert word in message, message


def test_empty_spec():
    with pytest.raises(ValidationError, match="empty"):
        parse_fields("  ")


def test_options_are_declared_with_docs():
    assert set(OPTIONS) == {"rows.total", "rows.per.second", "rows.per.batch", "fields", "seed"}
    assert all(o.doc for o in OPTIONS.values())
    assert OPTIONS["rows.per.batch"].default == 1_000_000 and OPTIONS["seed"].default == 0


def test_bad_option_values():
    with pytest.raises(ValidationError, match="rows.total"):
        read_settings({"rows.total": "many"})
    with pytest.raises(ValidationError, match="rows.per.batch"):
        read_settings({"rows.per.batch": "0"})
    with pytest.raises(ValidationError, match="rows.per.second"):
        read_settings({"rows.per.second": "0"})


# --- generation ----------------------------------------------------------------------------


def test_arrow_schema_matches_declared_types():
    table = rows(reader(fields=ALL_TYPES), 0, 100)
    assert table.schema == pa.schema(
        [
            ("a", pa.int64()),
            ("b", pa.int32()),
            ("c", pa.float64()),
            ("d", pa.string()),
            ("e", pa.string()),
            ("f", pa.bool_()),
            ("g", pa.timestamp("us", tz="UTC")),
            ("h", pa.date32()),
            ("i", pa.int64()),
            ("j", pa.int32()),
        ]
    )
    data = table.to_pydict()
    assert data["a"] == list(range(10, 110))
    assert all(-5 <= v <= 5 for v in data["b"]) and set(data["b"]) == set(range(-5, 6))
    assert set(data["c"]) == {1.0, 2.5} and set(data["d"]) == {"x", "y"}
    assert all(len(s) == 3 and s.isalpha() for s in data["e"])
    assert set(data["f"]) == {True, False} and set(data["j"]) == {7, 8}
    assert {int(v.timestamp() * 1000) for v in data["g"]} == {TS}
    assert {v.isoformat() for v in data["h"]} == {"2023-11-14"}


def test_batches_are_at_most_one_block():
    r = reader()
    sizes = [b.num_rows for b in r.read(seq_range(BLOCK - 10, 2 * BLOCK + 10, TS))]
    assert sizes == [10, BLOCK, 10]


def test_same_range_same_rows_however_split():
    one, three = reader(**{"tasks.max": 1}), reader(**{"tasks.max": 3})
    start, end = {"seq": 0, "ts": 0}, {"seq": BLOCK + 1000, "ts": TS}
    assert len(three.partitions(start, end)) == 3
    assert read_range(one, start, end).equals(read_range(three, start, end))
    assert read_range(one, start, end).equals(read_range(one, start, end))


def test_row_values_do_not_depend_on_the_batch():
    r = reader(fields=ALL_TYPES, seed=7)
    first, second = rows(r, 0, 10).slice(5, 5), rows(r, 5, 15).slice(0, 5)
    assert first.equals(second)
    far = rows(r, 3 * BLOCK - 2, 3 * BLOCK + 2)
    assert far.slice(0, 2).equals(rows(r, 3 * BLOCK - 2, 3 * BLOCK).slice(0, 2))


def test_seed_changes_random_columns_only():
    a, b = rows(reader(seed=1), 0, 50), rows(reader(seed=2), 0, 50)
    assert a.column("id").equals(b.column("id"))
    assert not a.column("amount").equals(b.column("amount"))


def test_now_comes_from_the_offset():
    r = reader(fields="t TIMESTAMP NOW")
    parts = r.partitions({"seq": 0, "ts": 0}, {"seq": 4, "ts": TS + 5})
    values = [v for p in parts for b in r.read(p) for v in b.column(0).to_pylist()]
    assert [int(v.timestamp() * 1000) for v in values] == [TS + 5] * 4


# --- offsets and limits --------------------------------------------------------------------


def test_offsets_have_a_fixed_key_order():
    r = reader()
    assert json.dumps(r.initialOffset()) == '{"seq": 0, "ts": 0}'
    end = r.latestOffset(r.initialOffset(), ReadMaxRows(10))
    assert list(end) == ["seq", "ts"] and end["seq"] == 10 and end["ts"] > TS


def test_latest_offset_limits():
    r = reader(**{"rows.total": 25, "rows.per.batch": 10})
    assert r.getDefaultReadLimit() == ReadMaxRows(10)
    start = {"seq": 0, "ts": 0}
    assert r.latestOffset(start, ReadMaxRows(10))["seq"] == 10
    assert r.latestOffset({"seq": 20, "ts": 1}, ReadMaxRows(10))["seq"] == 25
    assert r.latestOffset(start, ReadAllAvailable())["seq"] == 25
    done = {"seq": 25, "ts": 1}
    assert r.latestOffset(done, ReadMaxRows(10)) is done
    assert r.reportLatestOffset() == {"seq": 25, "ts": 0}


def test_unbounded_read_all_available_uses_rows_per_batch():
    r = reader(**{"rows.per.batch": 7})
    assert r.latestOffset({"seq": 3, "ts": 0}, ReadAllAvailable())["seq"] == 10
    assert r.reportLatestOffset() is None


def test_batch_max_records_and_rows_per_batch_both_cap_a_batch():
    source = DatagenSource({"rows.total": "100", "rows.per.batch": "30"})
    struct = from_arrow_schema(source.arrow_schema())
    start = {"seq": 0, "ts": 0}
    smaller = StreamReader(source, struct, {MAX_RECORDS_KEY: "20"})
    assert smaller.getDefaultReadLimit() == ReadMaxRows(20)
    assert smaller.latestOffset(start, smaller.getDefaultReadLimit())["seq"] == 20
    larger = StreamReader(source, struct, {MAX_RECORDS_KEY: "50"})
    assert larger.latestOffset(start, larger.getDefaultReadLimit())["seq"] == 30


WIDE = {"rows.total": "5000", "fields": "id BIGINT SEQUENCE, s STRING RANDOM(1000)"}


def test_batch_max_bytes_learns_a_records_bytes_from_the_batches_read(tmp_path):
    """The first batch reads PROBE_RECORDS; the next ones the bytes limit over the bytes a
    record took in the batches read (written by the tasks into the checkpoint), which a
    restarted reader finds there."""

    def fresh() -> StreamReader:
        source = DatagenSource(WIDE)
        options = {MAX_BYTES_KEY: "100000", "connectql.checkpoint": str(tmp_path)}
        return StreamReader(source, from_arrow_schema(source.arrow_schema()), options)

    r, start = fresh(), {"seq": 0, "ts": 0}
    first = r.latestOffset(start, r.getDefaultReadLimit())
    assert first["seq"] == PROBE_RECORDS
    read = [b for p in r.partitions(start, first) for b in r.read(p)]
    assert sum(b.num_rows for b in read) == PROBE_RECORDS
    per_record = sum(b.nbytes for b in read) / PROBE_RECORDS
    assert 1000 < per_record < 1100
    second = r.latestOffset(first, r.getDefaultReadLimit())
    assert second["seq"] - first["seq"] == int(100000 // per_record)
    assert fresh().latestOffset(first, ReadMaxRows(1_000_000))["seq"] == second["seq"]
    assert fresh().latestOffset(first, ReadMaxRows(20))["seq"] == first["seq"] + 20


def test_batch_max_bytes_cuts_the_batches_of_a_connector(worker):
    """Through SQL: a connector's batches after the first hold the bytes limit's records."""
    run(
        worker,
        """CREATE SOURCE CONNECTOR wide FROM datagen INTO wide_rows WITH ('rows.total' = 600,
          fields = 'id BIGINT SEQUENCE, s STRING RANDOM(1000)', 'batch.max.bytes' = 250000,
          run = 'once')""",
    )
    worker.wait_for_once()
    batches = [
        n
        for (n,) in worker.catalog.query(
            "SELECT input_rows FROM connector_metrics WHERE connector = 'wide'"
            " AND input_rows > 0 ORDER BY batch_id"
        )[1]
    ]
    assert sum(batches) == 600 and batches[0] == PROBE_RECORDS
    assert all(200 <= n <= 250 for n in batches[1:-1]), batches
    assert run(worker, "SELECT count(DISTINCT id) FROM wide_rows")[0].rows == [(600,)]
    for bad in ("0", "-5"):
        with pytest.raises(ValidationError, match=f"batch.max.bytes must be 1 or more, got {bad}"):
            run(
                worker,
                f"CREATE SOURCE CONNECTOR w2 FROM datagen INTO w2 WITH ('batch.max.bytes' = {bad})",
            )
    assert run(worker, "SELECT count(*) FROM connectors WHERE name = 'w2'")[0].rows == [(0,)]


def test_partitions_split_contiguously():
    r = reader(**{"tasks.max": 4})
    parts = r.partitions({"seq": 10, "ts": 0}, {"seq": 20, "ts": TS})
    assert [json.loads(p.value) for p in parts] == [
        [10, 12, TS],
        [12, 15, TS],
        [15, 17, TS],
        [17, 20, TS],
    ]
    assert len(r.partitions({"seq": 10, "ts": 0}, {"seq": 12, "ts": TS})) == 2
    assert r.partitions({"seq": 10, "ts": 0}, {"seq": 10, "ts": 0}) == []


def test_pacing_by_wall_clock():
    r = reader(**{"rows.per.second": 1000, "rows.total": 100_000})
    start = {"seq": 0, "ts": 0}
    before = time.monotonic()
    first = r.latestOffset(start, ReadMaxRows(1_000_000))
    assert first is start or first["seq"] <= 1000 * (time.monotonic() - before) + 1
    time.sleep(0.3)
    end = r.latestOffset(start, ReadMaxRows(1_000_000))["seq"]
    assert 290 <= end <= 1000 * (time.monotonic() - before) + 1
    assert r.latestOffset(start, ReadMaxRows(5))["seq"] == 5


def test_pacing_formula_with_a_fake_clock():
    r = reader(**{"rows.per.second": 10, "rows.total": 25})
    now = [100.0]
    r.pacer.clock = lambda: now[0]
    start = {"seq": 4, "ts": 0}
    assert r.latestOffset(start, ReadMaxRows(100)) is start
    now[0] += 0.05
    assert r.latestOffset(start, ReadMaxRows(100)) is start
    now[0] += 0.1
    assert r.latestOffset(start, ReadMaxRows(100))["seq"] == 5
    now[0] += 0.9
    assert r.latestOffset({"seq": 5, "ts": 1}, ReadMaxRows(100))["seq"] == 14
    assert r.latestOffset({"seq": 5, "ts": 1}, ReadMaxRows(3))["seq"] == 8
    now[0] += 100
    assert r.latestOffset(start, ReadMaxRows(100))["seq"] == 25


def test_available_now_waits_for_the_pace_instead_of_ending():
    r = reader(**{"rows.per.second": 20, "rows.total": 100})
    r.prepareForTriggerAvailableNow()
    start = {"seq": 0, "ts": 0}
    assert r.latestOffset(start, ReadMaxRows(1000))["seq"] >= 1
    assert r.latestOffset({"seq": 100, "ts": 1}, ReadMaxRows(1000))["seq"] == 100


def test_available_now_needs_rows_total():
    with pytest.raises(ValidationError, match="run = 'once' needs rows.total"):
        reader().prepareForTriggerAvailableNow()


def test_the_plan_carries_lag_field_and_total_and_refuses_once_without_total():
    from connectql.connectors import registry

    plugin = registry.lookup("datagen", "source")
    defaults = {k: o.default for k, o in plugin.source_options.items()}
    plan = plugin.plan_source({**defaults, "rows.total": 25, "run": "once"})
    assert (plan.format, plan.lag_field, plan.count_rows()) == (FORMAT, "seq", 25)
    assert plan.schema is None  # asked at CREATE, not at each start
    assert [(f.table, f.ddl) for f in plan.discover()] == [(None, schema_ddl(parse_fields(None)))]
    with pytest.raises(ValidationError, match="run = 'once' needs rows.total"):
        plugin.plan_source({**defaults, "run": "once"})


def test_data_source_schema_and_name():
    source = ToolkitDataSource(spark_options(DatagenSource, {"fields": "a INT, b STRING"}, set()))
    assert ToolkitDataSource.name() == FORMAT == "connectql_toolkit"
    assert source.schema() == "a INT, b STRING"
    with pytest.raises(ValidationError, match="unknown type 'INTT'"):
        ToolkitDataSource(spark_options(DatagenSource, {"fields": "a INTT"}, set())).schema()


# --- Spark ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def spark():
    from connectql.runtime.session import get_session

    return get_session()


def run_once(spark, out, checkpoint, **options):
    """Run to the end with trigger(availableNow=True) (connectql's run = 'once')."""
    stream = spark.readStream.format(FORMAT).options(**spark_options(DatagenSource, options, set()))
    query = (
        stream.load()
        .writeStream.format("parquet")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start(out)
    )
    assert query.awaitTermination(120), "the query did not finish"
    return query


@pytest.mark.spark
def test_spark_available_now_exactly_once(spark, tmp_path):
    out, checkpoint = str(tmp_path / "out"), str(tmp_path / "checkpoint")
    options = {"rows.total": 1000, "tasks.max": 2, "rows.per.batch": 400}
    query = run_once(spark, out, checkpoint, **options)
    assert query.exception() is None
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [400, 400, 200]
    df = spark.read.parquet(out)
    shown = ", ".join(f"{f.name} {f.dataType.simpleString().upper()}" for f in df.schema)
    assert shown == schema_ddl(parse_fields(None))
    assert df.count() == 1000
    assert sorted(r.id for r in df.select("id").collect()) == list(range(1000))
    again = run_once(spark, out, checkpoint, **options)
    assert again.exception() is None
    assert spark.read.parquet(out).count() == 1000


@pytest.mark.spark
def test_spark_once_without_rows_total_fails_clearly(spark, tmp_path):
    with pytest.raises(StreamingQueryException, match="run = 'once' needs rows.total"):
        run_once(spark, str(tmp_path / "out"), str(tmp_path / "checkpoint"))
