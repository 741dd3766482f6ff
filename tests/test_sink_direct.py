"""The PostgreSQL sink's direct write, driven through relational.sink.Target.write/commit against the real
server (no Spark query): a task's rows that only read or insert keys the target lacks go
straight into the target; anything else (a key it has, a replay, column types that differ) is
staged and merged, and the result is always what the upsert of the batch gives."""

from __future__ import annotations

import uuid
from dataclasses import replace

import psycopg
import pyarrow as pa
import pytest
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from connectql.connectors.postgres.sink import PgTarget
from connectql.connectors.relational.sink import DirectOverlap, SinkSettings
from tests.pgserver import PrivatePostgres, create_database

SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("v", StringType()),
        StructField("__op", StringType()),
        StructField("__pos", StringType()),
    ]
)

SETTINGS = SinkSettings({}, "public", "t", "upsert", ("id",), True, True, connector="t_sink")


def targets(server):
    """make(schema, ddl) -> a PgTarget on a fresh database of `server` (ddl: the target made
    beforehand); make.rows() reads the target back, make.drop() drops the database."""
    name = f"cq_{uuid.uuid4().hex[:8]}"
    info = create_database(server.conninfo(), name)

    def make(schema: StructType = SCHEMA, ddl: str | None = None, direct=True) -> PgTarget:
        if ddl:
            with psycopg.connect(info, autocommit=True) as c:
                c.execute(ddl)
        where = {"host": server.host, "port": server.port, "user": server.user}
        s = replace(
            SETTINGS, connection={**where, "database": name}, writer_id=uuid.uuid4().hex[:12]
        )
        t = PgTarget(s, schema)
        t.DIRECT = direct
        t.prepare("test sink")
        t.ensure_progress_row()
        return t

    def rows(query="SELECT id, v FROM t ORDER BY id"):
        with psycopg.connect(info) as c:
            return c.execute(query).fetchall()

    def drop():
        with psycopg.connect(server.conninfo(), autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    make.rows, make.drop = rows, drop
    return make


@pytest.fixture
def target(pg_shared):
    make = targets(pg_shared)
    yield make
    make.drop()


def batch(t: PgTarget, rows: list[tuple]) -> pa.RecordBatch:
    names = t.schema.fieldNames()
    columns = list(zip(*rows, strict=True))
    types = [pa.int64() if n == "id" else pa.string() for n in names]
    return pa.RecordBatch.from_arrays(
        [pa.array(c, ty) for c, ty in zip(columns, types, strict=True)], names=names
    )


def write(t: PgTarget, batch_id: int, parts: list[list[tuple]]) -> list:
    """Each part written as a task writes it; returns the messages (not committed)."""
    return [t.write(batch_id, p, iter([batch(t, rows)])) for p, rows in enumerate(parts)]


def test_a_snapshot_batch_goes_straight_into_the_target(target):
    t = target()
    messages = write(t, 0, [[(1, "a", "r", "0"), (2, "b", "r", "0")], [(3, "c", "r", "0")]])
    assert [(m.table, m.rows, m.direct is not None) for m in messages] == [
        (None, 2, True),
        (None, 1, True),
    ]
    assert target.rows() == [(1, "a"), (2, "b"), (3, "c")]  # visible before the commit
    t.commit(messages, 0)
    assert target.rows() == [(1, "a"), (2, "b"), (3, "c")]


def test_a_replayed_direct_write_is_staged_and_changes_nothing(target):
    """A kill after the tasks wrote but before the commit: the replay's rows conflict with
    their own earlier write, so they are staged and upserted to the same values."""
    t = target()
    write(t, 0, [[(1, "a", "r", "0"), (2, "b", "r", "0")]])  # never committed
    messages = write(t, 0, [[(1, "a", "r", "0"), (2, "b", "r", "0")]])
    assert messages[0].direct is None and messages[0].table
    t.commit(messages, 0)
    assert target.rows() == [(1, "a"), (2, "b")]
    # a batch already committed is skipped, whether written directly or not
    assert write(t, 0, [[(9, "z", "r", "0")]])[0].rows == 0
    assert target.rows() == [(1, "a"), (2, "b")]


def test_updates_are_staged_and_merged_after_the_direct_inserts(target):
    t = target()
    messages = write(
        t, 0, [[(1, "a", "c", "1"), (2, "b", "c", "2")], [(1, "A", "u", "3"), (2, "b", "d", "4")]]
    )
    assert messages[0].direct is not None and messages[1].table
    t.commit(messages, 0)
    assert target.rows() == [(1, "A")]


def test_a_key_inserted_twice_by_two_tasks_fails_the_batch_and_its_replay_is_right(target):
    """The later insert went in directly, the earlier one was staged: merging it would undo
    the later one, so the commit refuses and the replay stages both."""
    t = target()
    parts = [[(6, "late", "c", "3")], [(6, "early", "c", "2")]]
    messages = write(t, 0, parts)
    assert messages[0].direct is not None and messages[1].table
    with pytest.raises(DirectOverlap):
        t.commit(messages, 0)
    replay = write(t, 0, parts)
    assert all(m.direct is None for m in replay)
    t.commit(replay, 0)
    assert target.rows() == [(6, "late")]


def test_rows_without_change_columns_go_straight_in_until_a_key_repeats(target):
    t = target(StructType(SCHEMA.fields[:2]))
    first = write(t, 0, [[(1, "a"), (2, "b")]])
    t.commit(first, 0)
    again = write(t, 1, [[(1, "a2"), (3, "c")]])
    assert first[0].direct is not None and again[0].direct is None
    t.commit(again, 1)
    assert target.rows() == [(1, "a2"), (2, "b"), (3, "c")]


def test_a_target_whose_column_types_differ_is_written_through_staging(target):
    """An existing target with int where the stream has bigint: COPY's binary form of one is
    not the other's, so the rows are staged and cast by the merge; varchar takes text's."""
    schema = StructType([StructField("id", IntegerType()), StructField("v", StringType())])
    t = target(schema, "CREATE TABLE t (id bigint PRIMARY KEY, v varchar(5))")
    rb = pa.RecordBatch.from_arrays(
        [pa.array([1, 2], pa.int32()), pa.array(["a", None])], names=["id", "v"]
    )
    m = t.write(0, 0, iter([rb]))
    assert m.direct is None and m.table
    t.commit([m], 0)
    t2 = target(StructType([StructField("id", LongType()), StructField("v", StringType())]))
    rb = pa.RecordBatch.from_arrays([pa.array([3], pa.int64()), pa.array(["c"])], names=["id", "v"])
    m = t2.write(0, 0, iter([rb]))
    assert m.direct is not None
    t2.commit([m], 0)
    assert target.rows() == [(1, "a"), (2, None), (3, "c")]


def test_an_update_after_inserts_in_one_task_stages_every_row_of_it(target):
    """The direct write takes batches as they come: an update in a later batch undoes it, and
    the batches it had taken are staged with the rest."""
    t = target()
    first = batch(t, [(1, "a", "c", "1"), (2, "b", "c", "2")])
    second = batch(t, [(1, "A", "u", "3"), (3, "c", "c", "4")])
    m = t.write(0, 0, iter([first, second]))
    assert m.direct is None and m.table and m.rows == 4
    assert target.rows() == []  # nothing went in directly
    t.commit([m], 0)
    assert target.rows() == [(1, "A"), (2, "b"), (3, "c")]


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "staged"])
def test_a_committed_batch_survives_a_database_crash_right_after_the_commit(pg_own, direct):
    """Spark counts a batch done once commit() returns: the batch must be durable by then,
    even on a server with synchronous_commit = off (as the tests' own servers run), where an
    immediate shutdown loses the commits of the last moments."""
    make = targets(pg_own)
    t = make(direct=direct)
    for batch_id in range(3):
        rows = [(batch_id * 100 + i, "v", "r", "0") for i in range(100)]
        t.commit(write(t, batch_id, [rows[:50], rows[50:]]), batch_id)
    pg_own.halt()  # like a crash
    pg_own.resume()
    assert make.rows("SELECT count(*), max(id) FROM t") == [(300, 299)]
    with t.connect(autocommit=True) as conn:
        assert t.committed(conn) == 2


@pytest.fixture
def pg_lazy_wal():
    """A private server whose WAL writer waits 10 s between rounds: an asynchronous commit
    stays in memory, where an immediate shutdown loses it, until then."""
    server = PrivatePostgres({"wal_writer_delay": "10s"}).start()
    yield server
    server.stop()


def test_a_direct_write_survives_a_database_crash_before_the_batch_commits(pg_lazy_wal):
    """The tasks' direct rows are committed before the driver's commit records the batch: a
    crash in between must not lose them while the batch still counts as done (it once did:
    the task's commit was asynchronous, so the rows were gone and the batch recorded)."""
    make = targets(pg_lazy_wal)
    t = make(direct=True)
    rows = [(i, "v", "r", "0") for i in range(100)]
    messages = write(t, 0, [rows[:50], rows[50:]])
    assert all(m.direct is not None for m in messages)
    pg_lazy_wal.halt()  # like a crash
    pg_lazy_wal.resume()
    t.commit(messages, 0)
    assert make.rows("SELECT count(*), max(id) FROM t") == [(100, 99)]
