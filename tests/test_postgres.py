"""PostgreSQL connectors against real servers: the exactly-once append/upsert sink, the
incremental and bulk sources, change-data capture, schema changes, and every bad input named."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import timezone

import psycopg
import pyarrow.parquet as pq
import pytest

from connectql.errors import ConnectQLError, PlanError
from connectql.toolkit import packed
from tests.helpers import (
    lag_bytes_below,
    lag_of,
    read_parquet_rows,
    replay_last_batch,
    run,
    run_rejecting_sinks,
    wait_until,
)
from tests.pgserver import create_database, require_password

pytestmark = pytest.mark.spark

CHECKSUM = "SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY id), '')) FROM {} t"


def connection(server, database: str) -> str:
    return f"host = '{server.host}', port = {server.port}, user = '{server.user}', database = '{database}'"


@pytest.fixture
def db(pg_shared):
    """A fresh database on the shared server (no logical decoding): (name, conninfo)."""
    name = f"cq_{uuid.uuid4().hex[:8]}"
    info = create_database(pg_shared.conninfo(), name)
    yield name, info
    _drop(pg_shared, name)


@pytest.fixture
def cdc_dbs(pg_logical):
    """A source and a target database on the private server with wal_level = logical."""
    names = [f"cq_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    infos = [create_database(pg_logical.conninfo(), n) for n in names]
    yield list(zip(names, infos, strict=True))
    for n in names:
        _drop(pg_logical, n)


def _drop(server, name: str) -> None:
    from connectql.connectors.postgres.cdc import drop_slot

    with psycopg.connect(server.conninfo(), autocommit=True) as c:
        for (slot,) in c.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE database = %s", (name,)
        ).fetchall():
            drop_slot(c, slot)  # ends a reader still active (the worker stops after this)
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sql(info: str, statement: str, params=None):
    with psycopg.connect(info, autocommit=True) as c:
        c.execute("SET synchronous_commit = on")  # logical decoding sees flushed WAL only
        cur = c.execute(statement, params)
        return cur.fetchall() if cur.description else None


def checksum(info: str, table: str):
    return sql(info, CHECKSUM.format(table))


def state(worker, name):
    return worker.catalog.get_connector(name)


# ------------------------------------------------------------------ the sink


def test_datagen_rows_reach_postgres_appended_and_upserted(worker, pg_shared, db):
    name, info = db
    conn = connection(pg_shared, name)
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR gen FROM datagen INTO nums WITH ('rows.total' = 3000,
          run = 'once', 'tasks.max' = 2, seed = 3,
          fields = "id BIGINT SEQUENCE, qty INT RANDOM(1, 9), tag STRING CHOICE('a', 'b')");
        CREATE SINK CONNECTOR app TO postgres FROM nums WITH ({conn}, table = 'appended',
          run = 'once', 'tasks.max' = 2);
        CREATE SINK CONNECTOR ups TO postgres AS SELECT id, qty * 10 AS qty10 FROM nums
          WITH ({conn}, table = 'public.upserted', 'primary.key' = 'id', run = 'once');
        """,
    )
    worker.wait_for_once()
    expected = read_parquet_rows(worker.home / "streams/nums", "SELECT count(*), sum(qty) FROM t")
    assert expected[0][0] == 3000
    assert sql(info, "SELECT count(*), sum(qty) FROM appended") == [tuple(expected[0])]
    assert sql(info, "SELECT count(*), count(DISTINCT id), sum(qty10) FROM upserted") == [
        (3000, 3000, expected[0][1] * 10)
    ]
    keys = sql(
        info,
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
        " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = 'upserted'::regclass AND i.indisprimary",
    )
    assert keys == [("id",)]
    assert {s.name: s.state for s in worker.catalog.connectors()} == {
        "gen": "FINISHED",
        "app": "FINISHED",
        "ups": "FINISHED",
    }


def test_a_replayed_sink_batch_is_skipped_exactly_once(spark, home, pg_shared, db):
    """Spark replays a batch whose commit was not logged (a crash between the database commit
    and Spark's commit log): the progress table in the target makes the replay a no-op."""
    name, info = db
    script = f"""
        CREATE SOURCE CONNECTOR IF NOT EXISTS gen FROM datagen INTO nums WITH (
          'rows.total' = 1000, run = 'once', fields = 'id BIGINT SEQUENCE, v INT RANDOM(1, 9)');
        CREATE SINK CONNECTOR IF NOT EXISTS out TO postgres FROM nums
          WITH ({connection(pg_shared, name)}, table = 'appended', run = 'once');
    """
    replay_last_batch(home, script, "out")
    assert sql(info, "SELECT count(*), count(DISTINCT id) FROM appended") == [(1000, 1000)]


def test_reset_offsets_of_a_postgres_sink_applies_its_stream_again(worker, pg_shared, db):
    name, info = db
    conn = connection(pg_shared, name)
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR gen FROM datagen INTO nums WITH ('rows.total' = 200,
          run = 'once', fields = 'id BIGINT SEQUENCE');
        CREATE SINK CONNECTOR app TO postgres FROM nums WITH ({conn}, table = 'app', run = 'once');
        CREATE SINK CONNECTOR ups TO postgres FROM nums WITH ({conn}, table = 'ups',
          'primary.key' = 'id', run = 'once');
        """,
    )
    worker.wait_for_once()
    for c in ("app", "ups"):
        run(worker, f"RESET CONNECTOR {c} OFFSETS; RESTART CONNECTOR {c}")
    worker.wait_for_once()
    assert sql(info, "SELECT count(*), count(DISTINCT id) FROM app") == [(400, 200)]
    assert sql(info, "SELECT count(*), count(DISTINCT id) FROM ups") == [(200, 200)]
    assert sql(info, "SELECT count(*) FROM connectql_sink_progress") == [(4,)]


def test_rows_the_target_rejects_go_to_the_dead_letter_stream(worker, pg_shared, db):
    name, info = db
    for t in ("strict", "tolerant"):
        sql(info, f"CREATE TABLE {t} (id bigint PRIMARY KEY, qty int CHECK (qty <= 100))")
    over = run_rejecting_sinks(worker, "postgres", connection(pg_shared, name))
    assert sql(info, "SELECT count(*), max(qty) FROM tolerant") == [(2000 - over, 100)]
    strict = worker.catalog.get_connector("strict")
    assert "violates check constraint" in strict.last_error
    assert sql(info, "SELECT count(*) FROM strict") == [(0,)]


def test_sink_errors_are_named_at_create(worker, pg_shared, db):
    name, info = db
    sql(info, "CREATE TABLE narrow (id bigint)")
    sql(info, "CREATE TABLE nokey (id bigint, v int)")
    run(
        worker,
        "CREATE SOURCE CONNECTOR gen FROM datagen INTO nums WITH ('rows.total' = 10,"
        " run = 'once', fields = 'id BIGINT SEQUENCE, v INT RANDOM(1, 9)')",
    )
    conn = connection(pg_shared, name)
    cases = {
        "table = 'narrow', 'auto.evolve' = false": "table public.narrow has no column v",
        "table = 'missing', 'auto.create' = false": "table public.missing does not exist",
        "table = 'nokey', mode = 'upsert', 'primary.key' = 'id'": "needs a primary key or unique",
        "table = 'x', mode = 'upsert'": "needs a key",
        "table = 'x', 'primary.key' = 'nope'": "key column nope is not in the stream",
    }
    for options, message in cases.items():
        with pytest.raises(ConnectQLError, match=message):
            run(worker, f"CREATE SINK CONNECTOR bad TO postgres FROM nums WITH ({conn}, {options})")
        assert not worker.catalog.has_connector("bad")
    down = "host = '127.0.0.1', port = 1, database = 'x', table = 't'"
    with pytest.raises(ConnectQLError, match="cannot connect to postgres at 127.0.0.1:1"):
        run(worker, f"CREATE SINK CONNECTOR bad TO postgres FROM nums WITH ({down})")
    gone = connection(pg_shared, "no_such_db_here")
    with pytest.raises(ConnectQLError, match="database 'no_such_db_here' does not exist"):
        run(worker, f"CREATE SINK CONNECTOR bad TO postgres FROM nums WITH ({gone}, table = 't')")
    assert [c.name for c in worker.catalog.connectors()] == ["gen"]


# ------------------------------------------------------------------ incremental and bulk sources

TYPES_TABLE = """
CREATE TABLE typed (
  id bigint PRIMARY KEY, small smallint, i int, f4 real, f8 double precision,
  n numeric(14,4), nu numeric, t text, vc varchar(20), ch char(3), b boolean, d date,
  ts timestamp(6), tstz timestamptz, tm time, by bytea, j jsonb, u uuid,
  ia int[], ta text[], mood mood, iv interval)
"""
TYPES_ROWS = """
INSERT INTO typed VALUES
 (1, -32768, 2147483647, 1.5, -2.25e300, 12345.6789, 3.14159, 'plain', 'v', 'abc', true,
  '2024-02-29', '2024-01-02 03:04:05.123456', '2024-01-02 03:04:05.5+02', '13:14:15',
  '\\x00ff10', '{"k": [1, 2]}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{1,NULL,3}',
  '{"a b","c,d","e\\"f",NULL}', 'happy', '1 day 02:00:00'),
 (2, NULL, NULL, 'NaN', 'Infinity', NULL, NULL, '', NULL, NULL, false, NULL, NULL, NULL, NULL,
  '\\x', '[]', NULL, '{}', '{}', NULL, NULL),
 (3, 0, 0, 0, 0, 0, 0, E'line\\nbreak, "quoted", tab\\t and \\\\ backslash', 'ünïcødé ✓', 'x',
  NULL, '1970-01-01', '1970-01-01 00:00:00', '1969-12-31 23:59:59.999999+00', '00:00:00',
  NULL, 'null', NULL, NULL, NULL, 'sad', NULL)
"""


def test_every_common_type_survives_postgres_to_postgres(worker, pg_shared, db):
    name, info = db
    sql(info, "CREATE TYPE mood AS ENUM ('happy', 'sad')")
    sql(info, TYPES_TABLE)
    sql(info, TYPES_ROWS)
    conn = connection(pg_shared, name)
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR src FROM postgres INTO typed_s WITH ({conn}, table = 'typed',
          mode = 'incremental', 'incrementing.column' = 'id', run = 'once');
        CREATE SINK CONNECTOR dst TO postgres FROM typed_s WITH ({conn}, table = 'copied',
          run = 'once');
        """,
    )
    worker.wait_for_once()
    stream = worker.catalog.get_stream("typed_s")
    assert stream.key_columns == ("id",)
    assert "`n` DECIMAL(14,4)" in stream.schema and "`tstz` TIMESTAMP COMMENT" in stream.schema
    assert "`ts` TIMESTAMP_NTZ" in stream.schema and "`ia` ARRAY<INT>" in stream.schema
    columns = [c for c in _columns(info, "typed")]
    # compare values as text through the type the source has (an incremental source's stream
    # carries the declared types too: the target has them)
    cast = ", ".join(
        f"{c}::text" if c not in ("nu", "f4", "f8") else f"{c}::float8::text" for c in columns
    )
    source = sql(info, f"SELECT {cast} FROM typed ORDER BY id")
    target = sql(info, f"SELECT {_target_cast(columns)} FROM copied ORDER BY id")
    assert target == source
    assert sql(info, "SELECT t, vc FROM copied WHERE id IN (2, 3) ORDER BY id") == [
        ("", None),
        ('line\nbreak, "quoted", tab\t and \\ backslash', "ünïcødé ✓"),
    ]


def _columns(info, table):
    return [
        r[0]
        for r in sql(
            info,
            "SELECT column_name FROM information_schema.columns WHERE table_name = %s"
            " ORDER BY ordinal_position",
            (table,),
        )
    ]


def _target_cast(columns):
    special = {
        "nu": "nu::float8::text",
        "f4": "f4::float8::text",
        "f8": "f8::float8::text",
        "tm": "tm::time::text",
        "j": "j::jsonb::text",
        "u": "u::uuid::text",
        "iv": "iv::interval::text",
        "ch": "ch::char(3)::text",
    }
    return ", ".join(special.get(c, f"{c}::text") for c in columns)


def test_incremental_source_picks_up_new_rows_while_running(worker, pg_shared, db):
    name, info = db
    sql(info, "CREATE TABLE events (id serial PRIMARY KEY, body text)")
    sql(info, "INSERT INTO events (body) SELECT 'e' || g FROM generate_series(1, 500) g")
    run(
        worker,
        f"""CREATE SOURCE CONNECTOR poll FROM postgres INTO ev WITH ({connection(pg_shared, name)},
          table = 'events', mode = 'incremental', 'incrementing.column' = 'id',
          'poll.interval.ms' = 200, 'batch.rows' = 200, 'tasks.max' = 2)""",
    )
    stream = worker.home / "streams/ev"
    wait_until(lambda: (read_parquet_rows(stream) or [(0,)])[0][0] == 500, 90, what="snapshot")
    sql(info, "INSERT INTO events (body) SELECT 'late' || g FROM generate_series(1, 250) g")
    wait_until(lambda: (read_parquet_rows(stream) or [(0,)])[0][0] == 750, 60, what="new rows")
    time.sleep(1)
    assert read_parquet_rows(stream) == [(750, 750)]
    assert read_parquet_rows(stream, "SELECT min(id), max(id) FROM t") == [(1, 750)]
    assert state(worker, "poll").state == "RUNNING"


def test_bulk_source_copies_a_query_every_run(worker, pg_shared, db):
    name, info = db
    sql(info, "CREATE TABLE prices (sku text PRIMARY KEY, price numeric(8,2))")
    sql(info, "INSERT INTO prices VALUES ('a', 1.10), ('b', 2.20), ('c', 3.30)")
    run(
        worker,
        f"""CREATE SOURCE CONNECTOR snap FROM postgres INTO prices_s WITH (
          {connection(pg_shared, name)}, mode = 'bulk', run = 'once',
          query = 'SELECT sku, price * 2 AS double_price FROM prices WHERE price > 2')""",
    )
    worker.wait_for_once()
    rows = run(worker, "SELECT sku, double_price FROM prices_s ORDER BY sku")[0].rows
    assert [(s, float(p)) for s, p in rows] == [("b", 4.4), ("c", 6.6)]


def test_a_one_table_source_moves_chunks_and_counts_rows(worker, pg_shared, db):
    """Spark moves a table's rows packed, a chunk per Spark row; the status still counts rows,
    and the stream's files keep Spark's own timestamp encoding (INT96), so a query of the
    stream reads the values as before."""
    name, info = db
    sql(info, "CREATE TABLE ev (id bigint PRIMARY KEY, at timestamptz, note text)")
    sql(
        info,
        "INSERT INTO ev SELECT g, TIMESTAMPTZ '2024-05-06 07:08:09.654321+00' + g * interval"
        " '1 second', 'n' || g FROM generate_series(1, 3000) g",
    )
    run(
        worker,
        f"""CREATE SOURCE CONNECTOR ev_src FROM postgres INTO ev_s WITH (
          {connection(pg_shared, name)}, table = 'ev', mode = 'bulk', run = 'once')""",
    )
    worker.wait_for_once()
    assert packed.ONE_OPTION in worker.engine.plans["ev_src"].reader.options
    assert run(worker, "SELECT rows_total FROM connectors WHERE name = 'ev_src'")[0].rows == [
        (3000,)
    ]
    files = list((worker.home / "streams/ev_s").glob("*.parquet"))
    assert files and all(pq.ParquetFile(f).schema.column(1).physical_type == "INT96" for f in files)
    got = run(worker, "SELECT count(*), min(at), max(note) FROM ev_s")[0].rows
    want = sql(info, "SELECT count(*), min(at), max(note) FROM ev")
    assert [(n, at.replace(tzinfo=None), note) for n, at, note in got] == [
        (n, at.astimezone(timezone.utc).replace(tzinfo=None), note) for n, at, note in want
    ]


def test_source_errors_are_named_at_create(worker, pg_shared, db):
    name, info = db
    sql(info, "CREATE TABLE shapes (id int PRIMARY KEY, p pg_lsn)")
    sql(info, "CREATE TABLE plain (id int PRIMARY KEY, v int)")
    conn = connection(pg_shared, name)
    inc = "mode = 'incremental', 'incrementing.column' = 'id'"
    cases = {
        f"table = 'nope', {inc}": "table public.nope does not exist \\(tables in public: plain, shapes\\)",
        "table = 'plain', mode = 'incremental'": "needs incrementing.column and/or timestamp.column",
        "table = 'plain', mode = 'incremental', 'timestamp.column' = 'at'": "has no column at",
        "table = 'plain'": "needs wal_level = logical on the server, but it is replica",
        "query = 'SELECT 1', mode = 'cdc'": "reads a table, not a query",
        "query = 'SELECT nope FROM plain', mode = 'bulk'": 'the query fails: column "nope"',
        f"table = 'plain', {inc}, 'batch.rows' = 0": "batch.rows must be 1 or more, not 0",
    }
    for options, message in cases.items():
        with pytest.raises(ConnectQLError, match=message):
            run(
                worker, f"CREATE SOURCE CONNECTOR bad FROM postgres INTO s WITH ({conn}, {options})"
            )
        assert not worker.catalog.has_connector("bad") and not worker.catalog.find_stream("s")


# ------------------------------------------------------------------ change-data capture


def test_a_snapshot_takes_bigger_chunks_than_batch_rows_default_for_changes(
    worker, pg_logical, cdc_dbs
):
    """Without batch.rows, a one-table snapshot reads chunks of SNAPSHOT_ROWS (a micro-batch
    costs time of its own), changes BATCH_ROWS at most; a batch.rows given sets both."""
    from connectql.connectors.relational.source import BATCH_ROWS, SNAPSHOT_ROWS

    (src, src_info), _ = cdc_dbs
    rows = BATCH_ROWS + 20_000
    assert rows < SNAPSHOT_ROWS
    sql(src_info, "CREATE TABLE big (id bigint PRIMARY KEY, v int)")
    sql(src_info, f"INSERT INTO big SELECT g, g % 7 FROM generate_series(1, {rows}) g")
    run(
        worker,
        f"""CREATE SOURCE CONNECTOR snap FROM postgres INTO big_s WITH (
              {connection(pg_logical, src)}, table = 'big', 'tasks.max' = 2)""",
    )

    def batches():
        return worker.catalog.query(
            "SELECT input_rows FROM connector_metrics WHERE connector = 'snap'"
            " AND input_rows > 0 ORDER BY batch_id"
        )[1]

    wait_until(lambda: sum(n for (n,) in batches()) >= rows, 120, what="the snapshot read")
    assert batches() == [(rows,)]  # one chunk, where batch.rows' 100,000 would make two
    assert run(worker, "SELECT count(*), count(DISTINCT id) FROM big_s")[0].rows == [(rows, rows)]


def test_cdc_round_trip_with_changes_during_and_after_the_snapshot(worker, pg_logical, cdc_dbs):
    (src, src_info), (dst, dst_info) = cdc_dbs
    sql(
        src_info,
        "CREATE TABLE items (id bigint PRIMARY KEY, name text, qty int, price numeric(12,2),"
        " updated timestamptz DEFAULT now())",
    )
    sql(
        src_info,
        "INSERT INTO items (id, name, qty, price) SELECT g, 'item ' || g, g % 100, g * 0.25"
        " FROM generate_series(1, 10000) g",
    )
    stop = threading.Event()
    changes = threading.Thread(target=_churn, args=(src_info, stop, 20000), daemon=True)
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR src FROM postgres INTO items_s WITH (
          {connection(pg_logical, src)}, table = 'items', 'batch.rows' = 1500);
        CREATE SINK CONNECTOR dst TO postgres FROM items_s WITH (
          {connection(pg_logical, dst)}, table = 'items');
        """,
    )
    changes.start()  # during the snapshot ...
    stream = worker.home / "streams/items_s"
    wait_until(
        lambda: (
            (read_parquet_rows(stream, "SELECT count(*) FROM t WHERE __op <> 'r'") or [(0,)])[0][0]
            > 0
        ),
        120,
        what="changes after the snapshot",
    )
    time.sleep(2)  # ... and after it
    stop.set()
    changes.join()
    wait_until(
        lambda: checksum(dst_info, "items") == checksum(src_info, "items"),
        90,
        what="target equal to source",
    )
    ops = dict(read_parquet_rows(stream, "SELECT __op, count(*) FROM t GROUP BY 1"))
    assert set(ops) == {"r", "c", "u", "d"}, ops
    dupes = read_parquet_rows(
        stream,
        "SELECT count(*) FROM (SELECT __pos, __op, id FROM t WHERE __op <> 'r'"
        " GROUP BY ALL HAVING count(*) > 1)",
    )
    assert dupes == [(0,)]
    # caught up: the source's lag_bytes is the WAL after its last batch (the server's other
    # writes, the target's included, count until the next batch or heartbeat); lag counts
    # records only, which a change log cannot say
    wait_until(lambda: lag_bytes_below(worker, "src", 16 << 20), what="the WAL lag")
    assert lag_of(worker, "src") is None
    result = run(worker, "DROP CONNECTOR src")[0]
    assert "dropped replication slot connectql_src" in result.message
    assert sql(pg_logical.conninfo(), "SELECT count(*) FROM pg_replication_slots") == [(0,)]


def _churn(info: str, stop: threading.Event, next_id: int) -> None:
    """Inserts, updates (some changing the primary key) and deletes until told to stop."""
    with psycopg.connect(info, autocommit=True) as c:
        c.execute("SET synchronous_commit = on")
        i = 0
        while not stop.is_set():
            i += 1
            with c.transaction():
                c.execute(
                    "INSERT INTO items (id, name, qty, price) VALUES (%s, %s, 1, 9.99)",
                    (next_id + i, f"new {i}"),
                )
                c.execute(
                    "UPDATE items SET qty = qty + 1, updated = now() WHERE id = %s",
                    (i * 7 % 10000 + 1,),
                )
                c.execute("DELETE FROM items WHERE id = %s", (i * 13 % 10000 + 1,))
            if i % 10 == 0:
                c.execute(
                    "UPDATE items SET id = %s WHERE id = %s", (next_id * 10 + i, i * 17 % 10000 + 1)
                )
            time.sleep(0.005)


def test_cdc_schema_change_evolve_fail_and_ignore(worker, pg_logical, cdc_dbs):
    """A column added upstream while streaming: 'evolve' widens the stream and the upsert
    sink's target, 'fail' stops the connector naming the column, 'ignore' leaves it out."""
    (src, src_info), (dst, dst_info) = cdc_dbs
    for t in ("a", "b", "c"):
        sql(src_info, f"CREATE TABLE {t} (id int PRIMARY KEY, v text)")
        sql(src_info, f"INSERT INTO {t} VALUES (1, 'x')")
    conn = connection(pg_logical, src)
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR grow FROM postgres INTO a_s WITH ({conn}, table = 'a');
        CREATE SINK CONNECTOR grown TO postgres FROM a_s WITH (
          {connection(pg_logical, dst)}, table = 'a');
        CREATE SOURCE CONNECTOR strict FROM postgres INTO b_s WITH ({conn}, table = 'b',
          'schema.change' = 'fail');
        CREATE SOURCE CONNECTOR lax FROM postgres INTO c_s WITH ({conn}, table = 'c',
          'schema.change' = 'ignore');
        """,
    )
    streams = worker.home / "streams"
    for s in ("a_s", "b_s", "c_s"):
        wait_until(lambda s=s: read_parquet_rows(streams / s), 90, what=s)
    wait_until(lambda: sql(dst_info, "SELECT count(*) FROM a") == [(1,)], 60, what="sink")
    for t in ("a", "b", "c"):
        sql(src_info, f"ALTER TABLE {t} ADD COLUMN extra int")
        sql(src_info, f"INSERT INTO {t} VALUES (2, 'y', 42)")
    wait_until(lambda: state(worker, "strict").state == "FAILED", 60, what="strict FAILED")
    error = state(worker, "strict").last_error
    assert "SchemaChanged" in error and "new column(s) extra (integer)" in error
    changes = "SELECT id, v FROM t WHERE __op = 'c'"
    wait_until(lambda: read_parquet_rows(streams / "c_s", changes), 60, what="lax goes on")
    assert read_parquet_rows(streams / "c_s", changes) == [(2, "y")]
    assert "extra" not in worker.catalog.get_stream("c_s").schema
    assert state(worker, "lax").state == "RUNNING"
    # evolve: the stream and the target gain the column, and the row arrives with its value
    evolved = [(1, "x", None), (2, "y", 42)]
    wait_until(
        lambda: _quietly(sql, dst_info, "SELECT id, v, extra FROM a ORDER BY id") == evolved,
        90,
        what="the evolved row in the target",
    )
    assert "`extra` INT" in worker.catalog.get_stream("a_s").schema
    sql(src_info, "UPDATE a SET extra = 7 WHERE id = 1")
    wait_until(
        lambda: sql(dst_info, "SELECT extra FROM a WHERE id = 1") == [(7,)], 60, what="update"
    )
    assert {state(worker, n).state for n in ("grow", "grown")} == {"RUNNING"}
    events = worker.catalog.query(
        "SELECT reason FROM connector_events WHERE connector = 'grow' AND reason LIKE 'schema%'"
    )[1]
    assert events and "gained column(s) extra" in events[0][0]


def _quietly(f, *args):
    try:
        return f(*args)
    except psycopg.errors.UndefinedColumn:
        return None


def stream_rows(worker, stream: str, query: str):
    return read_parquet_rows(worker.home / "streams" / stream, query)


TWO_DIM = "{{1,2},{3,4}}"  # an int[] value no ARRAY<INT> holds: a value no Spark type reads


def test_one_tables_unreadable_ranges_and_changes_are_dead_letters(worker, pg_logical, cdc_dbs):
    """errors.tolerance = 'all' on a source of one table, as on several: a snapshot or poll
    range holding a value no Spark type holds (a two-dimensional array in an int[] column),
    and such a change, go to the dead-letter stream
    naming the table; the other rows and changes flow and the connector runs on. Without it
    the connector fails, naming the option."""
    (src, src_info), _dst = cdc_dbs
    sql(src_info, "CREATE TABLE p (id int PRIMARY KEY, n int[])")
    sql(src_info, f"INSERT INTO p VALUES (1, '{{1}}'), (2, '{TWO_DIM}'), (3, '{{2}}')")
    at = f"{connection(pg_logical, src)}, table = 'p', 'batch.rows' = 1"
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR tolerant FROM postgres INTO pt WITH ({at},
          'errors.tolerance' = 'all', 'errors.deadletter.stream' = 'pt_dead');
        CREATE SOURCE CONNECTOR polled FROM postgres INTO pp WITH ({at}, mode = 'incremental',
          'incrementing.column' = 'id', 'poll.interval.ms' = 200,
          'errors.tolerance' = 'all', 'errors.deadletter.stream' = 'pp_dead');
        CREATE SOURCE CONNECTOR strict FROM postgres INTO ps WITH ({at}, 'errors.retry.max' = 0);
        """,
    )

    ids = "SELECT id FROM t ORDER BY id"
    letters = "SELECT connector, source_offset, error_message FROM t ORDER BY source_offset"

    def seen():
        streams = {x: stream_rows(worker, x, "SELECT * FROM t") for x in ("pt", "pp", "pt_dead")}
        states = {c.name: (c.state, c.last_error) for c in worker.catalog.connectors()}
        return streams, states

    wait_until(
        lambda: stream_rows(worker, "pt", ids) == [(1,), (3,)],
        120,
        what="pt's snapshot",
        diagnose=seen,
    )
    wait_until(lambda: stream_rows(worker, "pp", ids) == [(1,), (3,)], 60, what="pp's rows")
    for name, stream in (("tolerant", "pt_dead"), ("polled", "pp_dead")):
        dead = wait_until(lambda s=stream: stream_rows(worker, s, letters), 30, what=stream)
        assert len(dead) == 1 and dead[0][0] == name, dead
        assert json.loads(dead[0][1])["table"] == "p" and "table p" in dead[0][2], dead
        assert "after key ['1'] up to key ['2']" in dead[0][2], dead
    sql(src_info, f"INSERT INTO p VALUES (4, '{TWO_DIM}'), (5, '{{5}}')")
    changes = "SELECT id FROM t WHERE __op = 'c'"
    wait_until(lambda: stream_rows(worker, "pt", changes) == [(5,)], 60, what="the change of 5")
    dead = wait_until(
        lambda: (stream_rows(worker, "pt_dead", letters) or [])[1:], 30, what="the bad change"
    )
    assert "table public.p: the change at LSN" in dead[0][2], dead
    assert {c: worker.catalog.get_connector(c).state for c in ("tolerant", "polled")} == {
        "tolerant": "RUNNING",
        "polled": "RUNNING",
    }
    wait_until(lambda: worker.catalog.get_connector("strict").state == "FAILED", 60, what="FAILED")
    error = worker.catalog.get_connector("strict").last_error
    assert "table p" in error and "errors.tolerance = 'all'" in error, error


def test_cdc_errors_name_the_problem(worker, pg_logical, cdc_dbs):
    (src, src_info), _ = cdc_dbs
    sql(src_info, "CREATE TABLE t (id int PRIMARY KEY)")
    sql(src_info, "DROP ROLE IF EXISTS cq_plain; CREATE ROLE cq_plain LOGIN PASSWORD 'right'")
    sql(src_info, "GRANT SELECT ON t TO cq_plain")
    require_password(pg_logical, "cq_plain")
    base = f"host = '127.0.0.1', port = {pg_logical.port}, database = '{src}', table = 't'"
    with pytest.raises(
        PlanError, match="role 'cq_plain' may not replicate: it needs the REPLICATION"
    ):
        run(
            worker,
            f"CREATE SOURCE CONNECTOR c FROM postgres INTO s WITH ({base}, user = 'cq_plain', password = 'right')",
        )
    with pytest.raises(PlanError, match="password authentication failed for user 'cq_plain'") as e:
        run(
            worker,
            f"CREATE SOURCE CONNECTOR c FROM postgres INTO s WITH ({base}, user = 'cq_plain', password = 'wrong-pw')",
        )
    assert "wrong-pw" not in str(e.value)
    assert worker.catalog.connectors() == []


def test_error_texts_are_scrubbed_of_passwords_given_by_reference(
    worker, pg_shared, db, tmp_path, monkeypatch
):
    """The values ${env:..} and ${file:..} resolve to are masked like inline secrets in every
    error text the worker passes on (its _scrub), not only the references themselves."""
    name, _info = db
    conn = connection(pg_shared, name)
    monkeypatch.setenv("CQ_SCRUB_PW", "env-Scrub-4711")
    (tmp_path / "pw").write_text("file-Scrub-4711\n")
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR gen FROM datagen INTO nums WITH ('rows.total' = 10, run = 'once');
        CREATE SINK CONNECTOR a TO postgres FROM nums WITH ({conn},
          password = ${{env:CQ_SCRUB_PW}}, table = 'a', run = 'once');
        CREATE SINK CONNECTOR b TO postgres FROM nums WITH ({conn},
          password = '${{file:{tmp_path}/pw}}', table = 'b', run = 'once');
        """,
    )
    text = worker._scrub("connection to server failed: env-Scrub-4711 / file-Scrub-4711")
    assert text == "connection to server failed: **** / ****"
