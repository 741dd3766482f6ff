"""The delta sink (delta-rs, no Spark jar): every row once across a replayed batch in append
mode (the batch id committed as Delta's application transaction with the data); a change stream
merged by key (updates, deletes, each key's last change of a batch by __pos); and a PostgreSQL
cdc source into a Delta table through a worker, read back with deltalake equal to the source
table after inserts, updates and deletes."""

from __future__ import annotations

from collections import Counter
from datetime import datetime

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from connectql.connectors.delta.sink import DeltaSink
from connectql.connectors.delta.source import DeltaSource
from connectql.errors import ConnectQLError
from connectql.toolkit.testing import SinkRun, SourceRun
from tests.helpers import run, wait_until
from tests.lakes import (
    CHANGE_BATCHES,
    CHANGE_SCHEMA,
    CHANGED,
    appends_are_read_once,
    awkward_types_round_trip,
    cdc_into,
    commit_interval_is_the_trigger,
)
from tests.s3server import ACCESS_KEY, SECRET_KEY, bucket, s3server  # noqa: F401
from tests.test_postgres import cdc_dbs  # noqa: F401 (fixture)

pytestmark = pytest.mark.spark


def rows_of(path) -> list[dict]:
    return DeltaTable(str(path)).to_pyarrow_table().to_pylist()


def test_append_writes_each_row_once_across_a_replay(spark, tmp_path):
    schema = pa.schema(
        [("id", pa.int64()), ("at", pa.timestamp("us", tz="UTC")), ("day", pa.string())]
    )
    path = tmp_path / "lake" / "events"
    options = {"path": str(path), "partition.by": "day", "compact.every": 1}
    run = SinkRun(DeltaSink, options, tmp_path, schema)
    at = datetime(2026, 12, 7, 10, 0)
    for start in (0, 100, 200):
        run.add([{"id": i, "at": at, "day": f"d{i % 2}"} for i in range(start, start + 100)])
    run.batches(1)
    run.to_end()
    last = run.replay_last_batch()
    assert Counter(r["id"] for r in rows_of(path)) == Counter(range(300))  # each once
    assert DeltaTable(str(path)).transaction_version("connectql-test") == last
    assert DeltaTable(str(path)).metadata().partition_columns == ["day"]
    # compact.every = 1: each batch compacts the table: 2 files (a day each), not 6
    assert len(DeltaTable(str(path)).file_uris()) == 2
    assert "OPTIMIZE" in [c.get("operation") for c in DeltaTable(str(path)).history()]


def test_upsert_applies_each_keys_last_change(spark, tmp_path):
    path = tmp_path / "lake" / "items"
    run = SinkRun(DeltaSink, {"path": str(path), "key": "id"}, tmp_path, CHANGE_SCHEMA)
    for batch in CHANGE_BATCHES:
        run.add(batch)
    run.to_end()
    run.replay_last_batch()
    assert sorted((r["id"], r["name"]) for r in rows_of(path)) == CHANGED
    assert set(DeltaTable(str(path)).schema().to_arrow().names) == {"id", "name"}  # no __op


def test_awkward_values_round_trip_through_an_upsert(spark, tmp_path):
    path = str(tmp_path / "lake" / "awkward")
    awkward_types_round_trip(tmp_path, DeltaSink, {"path": path}, lambda o: rows_of(o["path"]))
    import duckdb  # as docs/connectors/delta.md reads a table: no DuckDB extension needed

    items = DeltaTable(path).to_pyarrow_dataset()  # noqa: F841 (DuckDB finds it by name)
    assert duckdb.sql("SELECT list(id ORDER BY id), max(length(text)) FROM items").fetchall() == [
        ([1, 2, 4], 100_000)
    ]


def test_upsert_into_a_table_on_s3(spark, s3server, bucket, tmp_path):  # noqa: F811
    """path = 's3://...' with the s3 connector's endpoint and keys: the table lives on S3."""
    server = {k: v for k, v in s3server.options().items() if k != "bucket"}
    path = f"s3://{bucket}/lake/items"
    run = SinkRun(DeltaSink, {"path": path, "key": "id", **server}, tmp_path, CHANGE_SCHEMA)
    for batch in CHANGE_BATCHES:
        run.add(batch)
    run.to_end()
    last = run.replay_last_batch()
    storage = {
        "AWS_ENDPOINT_URL": s3server.endpoint, "AWS_ACCESS_KEY_ID": ACCESS_KEY,
        "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1", "AWS_ALLOW_HTTP": "true",
    }  # fmt: skip
    table = DeltaTable(path, storage_options=storage)
    assert sorted((r["id"], r["name"]) for r in table.to_pyarrow_table().to_pylist()) == CHANGED
    assert table.transaction_version("connectql-test") == last
    source = SourceRun(DeltaSource, {"path": path, **server}, tmp_path / "src")
    source.to_end()  # the source reads it back from S3
    assert sorted((r["id"], r["name"]) for r in source.rows()) == CHANGED
    assert (
        s3server.filesystem().get_file_info(f"{bucket}/lake/items/_delta_log").type.name
        == "Directory"
    )
    with pytest.raises(
        ConnectQLError, match="endpoint, region, access.key, secret.key are for an s3:// location"
    ):
        SinkRun(DeltaSink, {"path": str(tmp_path / "t"), **server}, tmp_path / "x", CHANGE_SCHEMA)


def test_postgres_cdc_into_a_delta_table(worker, pg_logical, cdc_dbs, tmp_path):  # noqa: F811
    path = tmp_path / "lake" / "items"
    cdc_into(worker, pg_logical, cdc_dbs, f"TO delta FROM pgitems WITH (path = '{path}')",
             lambda: rows_of(path) if path.exists() else None)  # fmt: skip


def test_a_sink_of_several_streams_writes_a_table_each(worker, tmp_path):
    """streams = 'lk_*' with path = '.../${stream}', mode = 'append': a Delta table per stream."""
    lake = tmp_path / "lake"
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR la FROM datagen INTO lk_a WITH ('rows.total' = 300,
          fields = 'id BIGINT SEQUENCE(1)', run = 'once');
        CREATE SOURCE CONNECTOR lb FROM datagen INTO lk_b WITH ('rows.total' = 200,
          fields = 'id BIGINT SEQUENCE(1)', run = 'once');
        CREATE SINK CONNECTOR lakes TO delta WITH (streams = 'lk_*', path = '{lake}/${{stream}}',
          mode = 'append', run = 'once');
        """,
    )
    worker.wait_for_once()
    commit_interval_is_the_trigger(
        worker, f"CREATE SINK CONNECTOR later TO delta FROM lk_a WITH (path = '{lake}/later'"
    )
    for name, n in (("lk_a", 300), ("lk_b", 200)):
        assert sorted(r["id"] for r in rows_of(lake / name)) == list(range(1, n + 1)), name


def test_a_source_reads_the_table_then_each_append_once(spark, tmp_path):
    """The delta source: the table as it is, then each later append, every row once across
    stops and a replayed batch; a compaction (OPTIMIZE) and a delete add no row;
    starting.position = 'latest' skips the rows there before it starts; batch.max.records
    cuts between versions."""
    path = str(tmp_path / "lake" / "events")
    table = {"path": path}
    delete_five = lambda: DeltaTable(path).delete("id = 5")  # noqa: E731
    appends_are_read_once(tmp_path, (DeltaSink, table), (DeltaSource, table), delete_five)
    with pytest.raises(ConnectQLError, match="there is no Delta table at"):
        SourceRun(DeltaSource, {"path": str(tmp_path / "nope")}, tmp_path / "x").batches(1)


def changed_by_hand(path: str) -> list[tuple]:
    """An UPDATE, a DELETE, an append and a MERGE (an update and an insert) on the table;
    the rows it holds then."""
    from deltalake import write_deltalake

    DeltaTable(path).update({"name": "'B'"}, predicate="id = 2")
    DeltaTable(path).delete("id = 3")
    write_deltalake(path, pa.table({"id": [4], "name": ["d"]}), mode="append")
    change = pa.table({"id": [1, 5], "name": ["A", "e"]})
    merge = DeltaTable(path).merge(change, "t.id = s.id", source_alias="s", target_alias="t")
    merge.when_matched_update_all().when_not_matched_insert_all().execute()
    return sorted((r["id"], r["name"]) for r in rows_of(path))


def applied(changes: list[dict]) -> list[tuple]:
    """A change stream's rows applied by key in __pos order."""
    table: dict = {}
    for r in sorted(changes, key=lambda r: r["__pos"]):
        if r["__op"] == "d":
            table.pop(r["id"], None)
        else:
            table[r["id"]] = r["name"]
    return sorted(table.items())


def test_a_change_data_feed_is_read_as_a_change_stream(spark, worker, tmp_path):
    """change.feed = true: the table as it is ('r'), then each version's changes (UPDATE,
    DELETE, an append, a MERGE) as c/u/d, which applied by key in __pos order give the table;
    a replayed batch reads the same; a table without the feed, a key that is not a column and
    a key without change.feed are refused. Through SQL: the feed into an upsert delta sink
    keeps a copy equal to the table."""
    from deltalake import write_deltalake

    path, plain = str(tmp_path / "fed"), str(tmp_path / "plain")
    first = pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]})
    write_deltalake(path, first, configuration={"delta.enableChangeDataFeed": "true"})
    write_deltalake(plain, first)
    feed = {"path": path, "change.feed": True, "key": "id"}
    source = SourceRun(DeltaSource, feed, tmp_path / "src")
    source.batches(1)
    assert {r["__op"] for r in source.rows()} == {"r"}
    want = changed_by_hand(path)
    source.to_end()
    source.replay_last_batch()
    changes = source.rows()
    assert sorted(r["__op"] for r in changes) == ["c", "c", "d", "r", "r", "r", "u", "u"]
    assert applied(changes) == want == [(1, "A"), (2, "B"), (4, "d"), (5, "e")]
    for options, why in (
        (f"path = '{plain}', 'change.feed' = true", "has no change data feed: set its property"),
        (f"path = '{path}', 'change.feed' = true, key = 'nope'", "key nope is not a column of"),
        (f"path = '{path}', key = 'id'", "key is for change.feed = true"),
    ):
        with pytest.raises(ConnectQLError, match=why):
            run(worker, f"CREATE SOURCE CONNECTOR bad FROM delta INTO bad WITH ({options})")
    copy = tmp_path / "copy"
    run(
        worker,
        f"""CREATE SOURCE CONNECTOR fed FROM delta INTO fed WITH (path = '{path}',
          'change.feed' = true, key = 'id');
        CREATE SINK CONNECTOR fed_copy TO delta FROM fed WITH (path = '{copy}')""",
    )
    copied = lambda: sorted((r["id"], r["name"]) for r in rows_of(copy)) if copy.exists() else []  # noqa: E731
    wait_until(lambda: copied() == want, 120, what="the copy equal to the table")
    DeltaTable(path).delete("id = 1")
    wait_until(lambda: copied() == want[1:], 120, what="the delete in the copy")
