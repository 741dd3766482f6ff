"""The database sinks' commit, driven through relational.sink.Target's stage/commit protocol against the
real PostgreSQL and MariaDB servers (no Spark query): a batch of only reads and inserts goes in
by a plain INSERT, and whenever that would differ from the upsert (a key already in the target,
a key twice in the batch, a delete) the upsert's result is what lands."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import psycopg
import pyarrow as pa
import pymysql
import pytest
from pyspark.sql.types import LongType, StringType, StructField, StructType

from connectql.connectors.mysql.sink import MysqlTarget
from connectql.connectors.postgres.sink import PgTarget
from connectql.connectors.relational.sink import SinkSettings
from tests.mariadbserver import create_database as create_mariadb
from tests.mariadbserver import mariadb_binlog  # noqa: F401 (fixture)
from tests.pgserver import create_database as create_pg

SCHEMA = StructType(
    [
        StructField("id", LongType()),
        StructField("v", StringType()),
        StructField("__op", StringType()),
        StructField("__pos", StringType()),
    ]
)
BULK = StructType(SCHEMA.fields[:2])


class Spy:
    """Notes whether each commit's plain insert was taken (True), refused (False) or not tried."""

    tried: list[bool]

    def insert_new(self, conn, insert: str) -> bool:
        done = super().insert_new(conn, insert)
        self.tried.append(done)
        return done


class PgSpy(Spy, PgTarget):
    pass


class MysqlSpy(Spy, MysqlTarget):
    pass


@pytest.fixture(params=["postgres", "mariadb"])
def target(request, pg_shared):
    """make(schema) -> a spying Target on a fresh database; rows() reads the target back."""
    name = f"cq_{uuid.uuid4().hex[:8]}"
    if request.param == "postgres":
        info = create_pg(pg_shared.conninfo(), name)
        conn_cfg = {"host": pg_shared.host, "port": pg_shared.port, "user": pg_shared.user}
        cls, schema_name = PgSpy, "public"

        def rows(query="SELECT id, v FROM t ORDER BY id"):
            with psycopg.connect(info) as c:
                return c.execute(query).fetchall()

        def drop():
            with psycopg.connect(pg_shared.conninfo(), autocommit=True) as c:
                c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    else:
        # a private server (the fixture's), not the machine's shared one
        conn_cfg = request.getfixturevalue("mariadb_binlog").connection_settings()
        with pymysql.connect(**conn_cfg, autocommit=True) as c:
            create_mariadb(c, name)
        cls, schema_name = MysqlSpy, name

        def rows(query="SELECT id, v FROM t ORDER BY id"):
            with pymysql.connect(**conn_cfg, database=name) as c, c.cursor() as cur:
                cur.execute(query)
                return [tuple(r) for r in cur.fetchall()]

        def drop():
            with pymysql.connect(**conn_cfg, autocommit=True) as c, c.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")

    def make(schema: StructType = SCHEMA):
        s = SinkSettings(
            connection={**conn_cfg, "database": name},
            schema=schema_name,
            table="t",
            mode="upsert",
            key=("id",),
            delete_enabled=True,
            auto_create=True,
            writer_id=uuid.uuid4().hex[:12],
            connector="t_sink",
        )
        t = cls(s, schema)
        t.tried = []
        t.prepare("test sink")
        t.ensure_progress_row()
        return t

    make.rows = rows
    yield make
    drop()


def write(t, batch_id: int, parts: list[list[tuple]]) -> None:
    """Stage each part as a task would (rows of (id, v[, __op, __pos])), then commit."""
    names = t.schema.fieldNames()
    messages = []
    for p, rows in enumerate(parts):
        columns = list(zip(*rows, strict=True))
        types = [pa.int64() if n == "id" else pa.string() for n in names]
        arrays = [pa.array(c, t) for c, t in zip(columns, types, strict=True)]
        rb = pa.RecordBatch.from_arrays(arrays, names=names)
        messages.append(t.stage(batch_id, p, iter([rb])))
    t.commit(messages, batch_id)


def test_a_snapshot_batch_goes_in_by_a_plain_insert(target):
    t = target()
    write(t, 0, [[(1, "a", "r", "0"), (2, "b", "r", "0")], [(3, "c", "r", "0")]])
    write(t, 1, [[(4, "d", "c", "1")]])
    assert t.tried == [True, True]
    assert target.rows() == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]


def test_keys_the_target_has_or_the_batch_repeats_fall_back_to_the_upsert(target):
    t = target()
    write(t, 0, [[(1, "a", "r", "0"), (2, "b", "r", "0")]])
    # a snapshot row again (a replayed snapshot chunk after a restart) and a new key
    write(t, 1, [[(2, "B", "r", "0"), (5, "e", "c", "1")]])
    # one key inserted twice in the batch: the later position wins, whatever the part order
    write(t, 2, [[(6, "late", "c", "3")], [(6, "early", "c", "2")]])
    assert t.tried == [True, False, False]
    assert target.rows() == [(1, "a"), (2, "B"), (5, "e"), (6, "late")]


def test_updates_and_deletes_are_never_inserted_plainly(target):
    t = target()
    write(t, 0, [[(1, "a", "r", "0"), (2, "b", "r", "0")]])
    # an insert then a delete of a new key, and an update: the delete must win
    write(t, 1, [[(7, "x", "c", "1"), (7, "x", "d", "2"), (1, "A", "u", "3")]])
    write(t, 2, [[(8, "y", "u", "4")]])  # an update of a key the target lacks: upserted
    assert t.tried == [True]
    assert target.rows() == [(1, "A"), (2, "b"), (8, "y")]


def test_a_bulk_copy_run_again_upserts_instead_of_duplicating(target):
    t = target(BULK)
    write(t, 0, [[(1, "a"), (2, "b")]])
    write(t, 1, [[(1, "a2"), (2, "b"), (3, "c")]])
    assert t.tried == [True, False]
    assert target.rows() == [(1, "a2"), (2, "b"), (3, "c")]


UNCHANGED = StructType(
    [
        StructField("id", LongType()),
        StructField("v", StringType()),
        StructField("w", StringType()),
        StructField("__op", StringType()),
        StructField("__pos", StringType()),
        StructField("__unchanged", StringType()),
    ]
)


def test_a_value_an_update_left_unchanged_is_kept(target):
    """__unchanged names the columns an update did not send (PostgreSQL TOAST): the merge
    takes them from the key's latest earlier row in the batch, else keeps the target's."""
    t = target(UNCHANGED)
    w = '["w"]'
    write(t, 0, [[(1, "a", "W1", "r", "0", None), (2, "b", "W2", "r", "0", None)]])
    write(
        t,
        1,
        [
            [(1, "a2", None, "u", "1", w), (2, "b", "W2new", "u", "2", None)],
            [(2, "b2", None, "u", "3", w), (3, "c", "W3", "c", "4", None)],
            [(3, "c2", None, "u", "5", w), (4, "d", None, "u", "6", w)],
        ],
    )
    assert target.rows("SELECT id, v, w FROM t ORDER BY id") == [
        (1, "a2", "W1"),  # kept from the target
        (2, "b2", "W2new"),  # from the batch's earlier update
        (3, "c2", "W3"),  # from the batch's insert
        (4, "d", None),  # nothing known: NULL
    ]
    write(t, 2, [[(1, "a3", None, "u", "7", w), (3, "c3", "W3new", "u", "8", None)]])
    assert target.rows("SELECT id, v, w FROM t WHERE id IN (1, 3) ORDER BY id") == [
        (1, "a3", "W1"),
        (3, "c3", "W3new"),
    ]


def test_an_upsert_never_reads_the_change_columns_it_does_not_stage():
    """The engine drops WriterSpec.unused before the writer, so Spark prunes those columns
    from the stream's Parquet scan: an upsert stages __op and __pos only (and no message
    column of a broker's change events: it keeps a replica of the rows)."""
    from connectql.connectors.postgres.sink import PostgresSink
    from connectql.toolkit.messages import MESSAGE_COLUMNS

    opts = {"table": "t", "schema": "s", "auto.create": True, "auto.evolve": True}

    def spec(**given):
        sink = PostgresSink({**opts, **given})
        sink.stream_key = ("id",)
        return SimpleNamespace(unused=tuple(sink.unread_columns()))

    assert spec().unused == ("__ts_ms", "__source", *MESSAGE_COLUMNS)
    assert spec(mode="append").unused == ()
