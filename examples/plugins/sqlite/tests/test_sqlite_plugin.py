"""The sqlite plugin through a real SparkSession with connectql.toolkit.testing: resume from the
checkpoint, a replayed batch, upserts and deletes, and the errors a user sees at CREATE."""

from __future__ import annotations

import sqlite3
from contextlib import closing

import pyarrow as pa
import pytest
from connectql_sqlite import CONNECTOR
from connectql_sqlite.sink import TableSink
from connectql_sqlite.source import TableSource

from connectql.toolkit import PermanentError, ValidationError
from connectql.toolkit.testing import SinkRun, SourceRun, session


@pytest.fixture(scope="module")
def spark():
    return session()


def make_items(path, ids) -> None:
    with closing(sqlite3.connect(path)) as con, con:
        con.execute(
            "CREATE TABLE IF NOT EXISTS items (id INTEGER PRIMARY KEY, name TEXT, price REAL)"
        )
        con.executemany(
            "INSERT INTO items VALUES (?, ?, ?)", [(i, f"item {i}", i * 1.5) for i in ids]
        )


def rows_of(path, sql: str) -> list[tuple]:
    with closing(sqlite3.connect(path)) as con:
        return con.execute(sql).fetchall()


def test_the_connector_declares_a_source_and_an_exactly_once_sink():
    assert CONNECTOR.problems() == []
    assert CONNECTOR.sink.delivery == "exactly-once"


def test_the_source_resumes_from_its_checkpoint_and_reads_new_rows_once(spark, tmp_path):
    db = tmp_path / "shop.db"
    make_items(db, range(1, 31))
    options = {"path": str(db), "table": "items", "incrementing.column": "id"}
    run = SourceRun(TableSource, options, tmp_path / "run", max_records=8)
    run.batches(2)
    assert 16 <= len(run.rows()) < 30
    make_items(db, range(31, 41))  # new rows while it was stopped
    run.to_end()
    run.replay_last_batch()
    rows = run.rows()
    assert sorted(r["id"] for r in rows) == list(range(1, 41))
    assert {"id": 40, "name": "item 40", "price": 60.0} in rows


def test_a_value_that_does_not_fit_its_column_fails_the_read_naming_the_row(spark, tmp_path):
    db = tmp_path / "shop.db"
    make_items(db, [1])
    with closing(sqlite3.connect(db)) as con, con:
        con.execute("INSERT INTO items VALUES (2, 'two', 'n/a')")
    options = {"path": str(db), "table": "items", "incrementing.column": "id"}
    with pytest.raises(
        AssertionError,
        match=r"""a record at \{"after": 2\} does not parse: column 'price' holds 'n/a'""",
    ):
        SourceRun(TableSource, options, tmp_path / "run").to_end()


def test_the_sink_upserts_and_deletes_each_batch_once_across_a_replay(spark, tmp_path):
    db = tmp_path / "copy.db"
    schema = pa.schema([("id", pa.int64()), ("name", pa.string()), ("__op", pa.string())])
    run = SinkRun(
        TableSink, {"path": str(db), "table": "items", "key": "id"}, tmp_path / "run", schema
    )
    run.add([{"id": i, "name": f"v1 {i}", "__op": "c"} for i in range(1, 6)])
    run.add([{"id": 2, "name": "v2 2", "__op": "u"}, {"id": 3, "name": None, "__op": "d"}])
    run.add([{"id": 6, "name": "v1 6", "__op": "c"}])
    run.batches(1)
    run.to_end()
    last = run.replay_last_batch()  # batches 1 and 2 may be one after the stop and restart
    assert last >= 1
    assert rows_of(db, "SELECT id, name FROM items ORDER BY id") == [
        (1, "v1 1"),
        (2, "v2 2"),
        (4, "v1 4"),
        (5, "v1 5"),
        (6, "v1 6"),
    ]
    # the replayed batch was skipped: the progress row is still the one it wrote first
    assert rows_of(db, "SELECT batch_id FROM connectql_sink_progress") == [(last,)]


def test_bad_options_are_refused_naming_what_is_wrong(tmp_path):
    db = tmp_path / "shop.db"
    make_items(db, [1])
    with pytest.raises(ValidationError, match="there is no table 'nope'"):
        TableSource({"path": str(db), "table": "nope", "incrementing.column": "id"}).check()
    with pytest.raises(ValidationError, match="incrementing.column 'name' is declared 'TEXT'"):
        TableSource({"path": str(db), "table": "items", "incrementing.column": "name"}).check()
    sink = TableSink({"path": str(db), "table": "items", "key": "sku", "create": True})
    with pytest.raises(ValidationError, match=r"key column\(s\) sku not in the stream"):
        sink.check(pa.schema([("id", pa.int64())]))
    with pytest.raises(ValidationError, match="cannot open database file"):
        TableSource(
            {"path": str(tmp_path / "none.db"), "table": "t", "incrementing.column": "id"}
        ).check()


def test_a_sink_of_an_older_lease_epoch_writes_nothing(tmp_path):
    """A worker paused while a standby took over (a higher epoch) comes back: its batch is
    refused in the transaction, and the newer worker's rows stay as they are."""
    db = tmp_path / "shop.db"
    options = {"path": str(db), "table": "items", "key": "id", "create": True}
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    newer, older = TableSink(options), TableSink(options)
    newer.epoch, older.epoch = 2, 1
    newer.check(schema)
    newer.write("w", 0, pa.table({"id": [1], "name": ["new"]}, schema=schema))
    with pytest.raises(PermanentError, match="batch 1 refused: the worker of lease epoch 2 owns"):
        older.write("w", 1, pa.table({"id": [1, 2], "name": ["old", "old"]}, schema=schema))
    assert rows_of(db, "SELECT id, name FROM items") == [(1, "new")]
    assert older.last_batch("w") == 0
    newer.write("w", 1, pa.table({"id": [2], "name": ["new"]}, schema=schema))
    assert rows_of(db, "SELECT epoch, batch_id FROM connectql_sink_progress") == [(2, 1)]
