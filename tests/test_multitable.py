"""Sources of several tables (`table` as a comma list or patterns), against real servers: each
table's rows in a stream of its own, snapshots table after table then one change log for all,
schema evolution per table, and the errors of a list that matches nothing."""

from __future__ import annotations

import json
import time
import uuid

import duckdb
import pyarrow as pa
import pytest
from pyspark.sql.types import StructType

from connectql.connectors import multitable
from connectql.errors import ConnectQLError, PlanError
from connectql.toolkit import packed
from tests.helpers import read_parquet_rows, replay_last_batch, run, wait_until
from tests.mariadbserver import (
    create_database,
    mariadb_binlog,  # noqa: F401 (fixture)
)
from tests.test_mysql import binlog_db, pg_db, pg_rows, streaming  # noqa: F401 (fixtures)
from tests.test_mysql_sink import connection as my_connection
from tests.test_mysql_sink import server
from tests.test_mysql_sink import sql as my_sql
from tests.test_postgres import TWO_DIM, cdc_dbs, connection, db, sql  # noqa: F401

# ------------------------------------------------------------------ the pieces, without servers


def test_which_table_values_name_several_tables():
    assert multitable.patterns("orders") == ()
    assert multitable.patterns("shop.orders") == ()
    assert multitable.patterns("orders, customers") == ("orders", "customers")
    assert multitable.patterns("order%") == ("order%",)
    assert multitable.patterns("orders,") == ("orders",)
    names = ["orders", "order_lines", "customers", "audit"]
    got = multitable.matching(names, ("customers", "order*"), "database shop")
    assert got == ["customers", "order_lines", "orders"]
    assert multitable.matching(names, ("ord?rs", "orders"), "x") == ["orders"]
    with pytest.raises(PlanError, match=r"table = 'invoice\*' matches no table in database shop"):
        multitable.matching(names, ("orders", "invoice*"), "database shop")


def test_several_tables_travel_packed_a_spark_row_per_chunk_of_one_table(spark, monkeypatch):
    from connectql.connectors.base import ReaderSpec

    orders = StructType.fromDDL("id BIGINT, amount DECIMAL(12,2), __op STRING, __pos STRING")
    lines = StructType.fromDDL("id INT, sku STRING, __op STRING, __pos STRING")
    spec = multitable.with_tables_schemas(
        ReaderSpec("connectql_mysql", options={"table": "o*"}),
        [("orders", orders), ("lines", lines)],
    )
    assert StructType.fromDDL(spec.schema).fieldNames() == ["__table", "__rows"]
    parts = packed.option_schemas(spec.options)
    assert [(t, s.simpleString()) for t, s in parts.items()] == [
        ("orders", orders.simpleString()), ("lines", lines.simpleString())
    ]  # fmt: skip
    assert packed.option_schemas({"table": "orders"}) is None
    target = pa.schema(
        [("id", pa.int32()), ("sku", pa.string()), ("__op", pa.string()), ("__pos", pa.string())]
    )
    batch = pa.RecordBatch.from_pydict(  # the database's column order, not the stream's
        {"sku": ["x", None, "z"], "id": pa.array([7, 8, 9], pa.int32()), "__pos": ["p"] * 3,
         "__op": ["c", "u", "d"]}
    )  # fmt: skip
    monkeypatch.setattr(packed, "PACK_BYTES", batch.nbytes // 3 + 1)  # a chunk per row
    lines = packed.pack("lines", batch, target)
    assert lines.num_rows == 3 and lines.column("__table").to_pylist() == ["lines"] * 3
    first = pa.Table.from_batches([packed.pack("orders", pa.RecordBatch.from_pydict(
        {"id": [1], "amount": [None], "__op": ["r"], "__pos": ["q"]}), pa.schema(
        [("id", pa.int64()), ("amount", pa.decimal128(12, 2)), ("__op", pa.string()),
         ("__pos", pa.string())]))])  # fmt: skip
    rows = packed.by_table(pa.concat_tables([first, pa.Table.from_batches([lines])]))
    assert list(rows) == ["orders", "lines"]
    assert rows["lines"].schema == target
    assert rows["lines"].to_pylist() == [
        {"id": 7, "sku": "x", "__op": "c", "__pos": "p"},
        {"id": 8, "sku": None, "__op": "u", "__pos": "p"},
        {"id": 9, "sku": "z", "__op": "d", "__pos": "p"},
    ]
    assert rows["orders"].to_pylist() == [{"id": 1, "amount": None, "__op": "r", "__pos": "q"}]
    assert packed.pack("lines", batch.slice(0, 0), target).num_rows == 0


# ------------------------------------------------------------------ MariaDB: cdc


def stream_rows(worker, stream: str, query: str):
    try:
        return read_parquet_rows(worker.home / "streams" / stream, query)
    except duckdb.BinderException:  # a column not in any committed file yet
        return None


def test_mysql_cdc_of_several_tables_keeps_each_target_equal(worker, binlog_db, pg_db):  # noqa: F811
    """Three tables matched by a list with a pattern (a fourth is left out), changed during the
    snapshot and after it, each synchronised to PostgreSQL through its own stream; a column
    added to one table widens that table's stream only."""
    binlog_db.sql(
        "CREATE TABLE orders (id INT PRIMARY KEY, amount DECIMAL(10,2), note VARCHAR(20))"
    )
    binlog_db.sql(
        "CREATE TABLE order_lines (order_id INT, line INT, sku VARCHAR(8), PRIMARY KEY (order_id, line))"
    )
    binlog_db.sql("CREATE TABLE customers (id BIGINT PRIMARY KEY, name VARCHAR(20))")
    binlog_db.sql("CREATE TABLE audit (at DATETIME, what VARCHAR(20))")
    binlog_db.sql("INSERT INTO orders SELECT seq, seq * 1.5, 'o' FROM seq_1_to_3000")
    binlog_db.sql("INSERT INTO order_lines SELECT seq DIV 3, seq MOD 3, 'sku' FROM seq_3_to_2999")
    binlog_db.sql("INSERT INTO customers SELECT seq, CONCAT('c', seq) FROM seq_1_to_500")
    pg_name, pg_info = pg_db
    target = f"host = '127.0.0.1', database = '{pg_name}'"
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR shop FROM mysql INTO shop WITH ({binlog_db.options()},
          table = 'orders, order_lines, cust*', 'batch.rows' = 700);
        CREATE SINK CONNECTOR o TO postgres FROM shop_orders WITH ({target}, table = 'orders');
        CREATE SINK CONNECTOR l TO postgres FROM shop_order_lines WITH ({target}, table = 'lines');
        CREATE SINK CONNECTOR c TO postgres FROM shop_customers WITH ({target}, table = 'customers');
        """,
    )
    entry = worker.catalog.get_connector("shop")
    assert entry.tables == ("orders", "order_lines", "customers")
    assert entry.streams == ["shop_orders", "shop_order_lines", "shop_customers"]
    for statement in (  # during the snapshot
        "UPDATE orders SET note = 'during' WHERE id % 7 = 0",
        "DELETE FROM order_lines WHERE order_id < 50",
        "INSERT INTO customers VALUES (501, 'new'), (502, 'newer')",
        "INSERT INTO audit VALUES (NOW(), 'not captured')",
    ):
        binlog_db.sql(statement)
    wait_until(lambda: streaming(worker, "shop"), timeout=120, what="the snapshots to end")
    for statement in (  # after it
        "UPDATE orders SET id = id + 10000 WHERE id % 100 = 0",
        "UPDATE orders SET note = 'after' WHERE id % 11 = 0",
        "INSERT INTO order_lines VALUES (5000, 1, 'late')",
        "UPDATE customers SET name = 'renamed' WHERE id < 10",
        "DELETE FROM customers WHERE id = 502",
    ):
        binlog_db.sql(statement)
    for table, target_table, order in (
        ("orders", "orders", "id"),
        ("order_lines", "lines", "order_id, line"),
        ("customers", "customers", "id"),
    ):
        cols = {"orders": "id, amount, note", "order_lines": "order_id, line, sku"}.get(
            table, "id, name"
        )
        want = [tuple(r) for r in binlog_db.sql(f"SELECT {cols} FROM {table} ORDER BY {order}")]
        query = f"SELECT {cols} FROM {target_table} ORDER BY {order}"
        wait_until(
            lambda q=query, w=want: [tuple(r) for r in pg_rows(pg_info, q) or []] == w,
            timeout=120,
            what=f"{target_table} equal to {table}",
        )
    tagged = stream_rows(
        worker, "shop_customers", "SELECT DISTINCT json_extract_string(__source, '$.table') FROM t"
    )
    assert tagged == [("customers",)]
    ops = dict(stream_rows(worker, "shop_orders", "SELECT __op, count(*) FROM t GROUP BY 1"))
    assert set(ops) == {"r", "u", "c", "d"}, ops  # an id change: a delete and an insert
    assert not (worker.home / "streams/shop_audit").exists()

    binlog_db.sql("ALTER TABLE customers ADD COLUMN tier INT")
    binlog_db.sql("INSERT INTO customers VALUES (600, 'tiered', 3)")
    wait_until(
        lambda: (
            stream_rows(worker, "shop_customers", "SELECT tier FROM t WHERE id = 600") == [(3,)]
        ),
        timeout=120,
        what="customers' stream to gain tier",
    )
    assert "`tier`" not in worker.catalog.get_stream("shop_orders").schema
    binlog_db.sql("INSERT INTO orders VALUES (9999, 1, 'after')")
    wait_until(
        lambda: pg_rows(pg_info, "SELECT note FROM orders WHERE id = 9999") == [("after",)],
        timeout=90,
        what="orders still flowing after the restart",
    )
    assert worker.catalog.get_connector("shop").state == "RUNNING"
    described = dict(run(worker, "DESCRIBE CONNECTOR shop")[0].rows)
    assert described["tables"] == "orders, order_lines, customers"


# ------------------------------------------------------------------ PostgreSQL: cdc, incremental


def test_postgres_cdc_of_a_keyed_and_a_keyless_table(worker, pg_logical, cdc_dbs):  # noqa: F811
    (src, src_info), (dst, dst_info) = cdc_dbs
    sql(src_info, "CREATE TABLE a (id int PRIMARY KEY, v text)")
    sql(src_info, "CREATE TABLE b (n int, msg text)")  # no primary key: one snapshot chunk
    sql(src_info, "INSERT INTO a SELECT g, 'a' || g FROM generate_series(1, 2000) g")
    sql(src_info, "INSERT INTO b SELECT g, 'b' || g FROM generate_series(1, 300) g")
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR two FROM postgres INTO pg WITH ({connection(pg_logical, src)},
          table = 'a,b', 'batch.rows' = 800, keyless = 'inserts');
        CREATE SINK CONNECTOR a_out TO postgres FROM pg_a WITH ({connection(pg_logical, dst)},
          table = 'a');
        """,
    )
    wait_until(
        lambda: worker.catalog.query("SELECT 1 FROM connector_offsets WHERE connector = 'two'")[1],
        timeout=60,
        what="the slot and the first snapshot chunk",
    )  # the changes below come after the slot's start: they arrive as changes
    sql(src_info, "UPDATE a SET v = 'changed' WHERE id <= 10")
    sql(src_info, "INSERT INTO b VALUES (301, 'late'), (302, 'later')")
    sql(src_info, "DELETE FROM a WHERE id > 1990")
    want = sql(src_info, "SELECT id, v FROM a ORDER BY id")
    wait_until(
        lambda: pg_rows(dst_info, "SELECT id, v FROM a ORDER BY id") == want,
        timeout=120,
        what="a's target equal to a",
    )
    # b has no key: each of its rows arrives once, by its snapshot or as a change (the
    # snapshot's transaction decides), never both
    wait_until(
        lambda: (
            stream_rows(worker, "pg_b", "SELECT count(*), count(DISTINCT n) FROM t") == [(302, 302)]
        ),
        timeout=60,
        what="b's rows, each once",
        diagnose=lambda: (
            stream_rows(worker, "pg_b", "SELECT __op, count(*) FROM t GROUP BY 1"),
            worker.catalog.query("SELECT committed_offset FROM connector_offsets")[1],
        ),
    )
    snapshot = stream_rows(
        worker, "pg_b", "SELECT min(n), count(DISTINCT n) FROM t WHERE __op = 'r'"
    )
    assert snapshot in ([(1, 300)], [(1, 302)])  # the late rows too if b's snapshot came after

    def phase():  # the source's offset (the sink has one too); the listener may lag a batch
        offsets = worker.catalog.query(
            "SELECT committed_offset FROM connector_offsets WHERE connector = 'two'"
        )[1]
        return json.loads(offsets[0][0]).get("phase")

    wait_until(lambda: phase() == "stream", 30, what="the source's offset in its stream phase")


def test_incremental_polling_of_tables_matched_by_a_pattern(worker, pg_shared, db):  # noqa: F811
    name, info = db
    for t in ("ev_1", "ev_2"):
        sql(info, f"CREATE TABLE {t} (id serial PRIMARY KEY, body text)")
    sql(info, "CREATE TABLE other (id serial PRIMARY KEY)")
    sql(info, "INSERT INTO ev_1 (body) SELECT 'x' FROM generate_series(1, 300)")
    sql(info, "INSERT INTO ev_2 (body) SELECT 'y' FROM generate_series(1, 120)")
    create = f"""CREATE SOURCE CONNECTOR poll FROM postgres INTO evs WITH (
          {connection(pg_shared, name)}, table = 'ev_%', mode = 'incremental',
          'incrementing.column' = 'id', 'poll.interval.ms' = 200, 'batch.rows' = 100,
          'tasks.max' = 2)"""
    (plan,) = run(worker, "EXPLAIN " + create)  # resolves the pattern, creates nothing
    assert ("tables", "ev_1 -> evs_ev_1, ev_2 -> evs_ev_2") in plan.rows
    assert worker.catalog.connectors() == [] and worker.catalog.streams() == []
    run(worker, create)

    def counts():
        return [
            (stream_rows(worker, s, "SELECT count(*), count(DISTINCT id) FROM t") or [(0, 0)])[0]
            for s in ("evs_ev_1", "evs_ev_2")
        ]

    wait_until(lambda: counts() == [(300, 300), (120, 120)], 90, what="the first polls")
    sql(info, "INSERT INTO ev_2 (body) SELECT 'z' FROM generate_series(1, 30)")
    wait_until(lambda: counts() == [(300, 300), (150, 150)], 60, what="new rows of ev_2")
    time.sleep(1)
    assert counts() == [(300, 300), (150, 150)]
    assert not (worker.home / "streams/evs_other").exists()


# ------------------------------------------------------------------ bad input


def test_a_table_list_that_matches_nothing_or_spans_schemas_changes_nothing(worker, pg_shared, db):  # noqa: F811
    name, info = db
    sql(info, "CREATE TABLE ev_1 (id serial PRIMARY KEY)")
    base = f"{connection(pg_shared, name)}, mode = 'incremental', 'incrementing.column' = 'id'"
    with pytest.raises(PlanError, match=r"table = 'nope\*' matches no table in schema public"):
        run(
            worker,
            f"CREATE SOURCE CONNECTOR x FROM postgres INTO s WITH ({base}, table = 'ev_1, nope*')",
        )
    with pytest.raises(PlanError, match="must be in one schema"):
        run(
            worker,
            f"CREATE SOURCE CONNECTOR x FROM postgres INTO s WITH ({base}, table = 'a.t, b.u')",
        )
    assert worker.catalog.connectors() == [] and worker.catalog.streams() == []
    run(worker, f"CREATE SOURCE CONNECTOR x FROM postgres INTO s WITH ({base}, table = 'ev_*')")
    assert [s.name for s in worker.catalog.streams()] == ["s_ev_1"]
    with pytest.raises(ConnectQLError, match="cannot change the tables"):
        run(worker, "ALTER CONNECTOR x SET (table = 'ev_1, ev_2')")
    with pytest.raises(ConnectQLError, match="used by connectors x"):
        run(worker, "DROP STREAM s_ev_1")


# ------------------------------------------------------------------ many small tables


def test_many_small_tables_snapshot_in_few_batches_each_row_once(worker, pg_logical, cdc_dbs):  # noqa: F811
    """30 small tables (and one without a key) in one source: their snapshots share
    micro-batches up to batch.rows rows, yet every row lands once, in its own table's stream,
    and the changes after the snapshot follow."""
    (src, src_info), _dst = cdc_dbs
    for i in range(30):
        sql(src_info, f"CREATE TABLE s{i:02d} (id int PRIMARY KEY, v text)")
        sql(
            src_info,
            f"INSERT INTO s{i:02d} SELECT g, 's{i}-' || g FROM generate_series(1, {i + 5}) g",
        )
    sql(src_info, "CREATE TABLE s_nokey (n int)")
    sql(src_info, "INSERT INTO s_nokey SELECT generate_series(1, 7)")
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR many FROM postgres INTO m WITH ({connection(pg_logical, src)},
          table = 's*', 'batch.rows' = 300, keyless = 'inserts');
        """,
    )
    streams = [f"m_s{i:02d}" for i in range(30)]
    want = {s: [(i + 5, i + 5, i + 5)] for i, s in enumerate(streams)} | {"m_s_nokey": [(7, 7, 7)]}
    query = "SELECT count(*), count(DISTINCT {0}), max({0}) FROM t WHERE __op = 'r'"

    def got():
        return {
            s: stream_rows(worker, s, query.format("n" if s.endswith("nokey") else "id"))
            for s in want
        }

    wait_until(lambda: got() == want, 180, what="every table's snapshot", diagnose=got)
    # 30 * 20 = 600 keyed rows at 300 a batch: a few batches, not one (or two) per table
    batches = [p for p in (worker.home / "checkpoints/many/commits").iterdir() if p.name.isdigit()]
    assert len(batches) <= 8, sorted(p.name for p in batches)
    sql(src_info, "INSERT INTO s29 VALUES (100, 'late')")
    wait_until(
        lambda: stream_rows(worker, "m_s29", "SELECT v FROM t WHERE __op = 'c'") == [("late",)],
        60,
        what="a change after the snapshot",
    )


# ------------------------------------------------------------------ one sink of several streams


def test_one_sink_writes_each_stream_of_a_multi_table_source_into_its_own_table(
    worker,
    pg_logical,
    cdc_dbs,  # noqa: F811
):
    """streams = 'pg_*' into table = 'out_${table}': one query writes three tables' streams
    (different columns, one keyless: appended) each into its table, snapshot and changes."""
    (src, src_info), (dst, dst_info) = cdc_dbs
    sql(src_info, "CREATE TABLE a (id int PRIMARY KEY, v text)")
    sql(src_info, "CREATE TABLE b (k bigint, at date, amount numeric(10,2), PRIMARY KEY (k, at))")
    sql(src_info, "CREATE TABLE c (n int, msg text)")
    sql(src_info, "INSERT INTO a SELECT g, 'a' || g FROM generate_series(1, 500) g")
    sql(
        src_info,
        "INSERT INTO b SELECT g, DATE '2024-01-01' + g, g / 4.0 FROM generate_series(1, 300) g",
    )
    sql(src_info, "INSERT INTO c SELECT g, 'c' || g FROM generate_series(1, 20) g")
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR three FROM postgres INTO pg WITH ({connection(pg_logical, src)},
          table = 'a, b, c', 'batch.rows' = 400, keyless = 'inserts');
        CREATE SINK CONNECTOR all_out TO postgres WITH ({connection(pg_logical, dst)},
          streams = 'pg_*', table = 'out_${{table}}');
        """,
    )
    entry = worker.catalog.get_connector("all_out")
    assert entry.streams == ["pg_a", "pg_b", "pg_c"]
    wait_until(lambda: streaming(worker, "three"), timeout=120, what="the snapshots to end")
    sql(src_info, "UPDATE a SET v = 'changed' WHERE id <= 10")
    sql(src_info, "DELETE FROM a WHERE id > 490")
    sql(src_info, "UPDATE b SET amount = -1 WHERE k % 50 = 0")
    sql(src_info, "INSERT INTO c VALUES (21, 'late')")
    for table, cols in (("a", "id, v"), ("b", "k, at, amount"), ("c", "n, msg")):
        want = sql(src_info, f"SELECT {cols} FROM {table} ORDER BY 1, 2")
        query = f"SELECT {cols} FROM out_{table} ORDER BY 1, 2"
        wait_until(
            lambda q=query, w=want: pg_rows(dst_info, q) == w,
            timeout=120,
            what=f"out_{table} equal to {table}",
            diagnose=lambda q=query: (pg_rows(dst_info, q) or [])[:5],
        )
    # a Spark row is a chunk (source) or a row group (sink): the status counts the rows
    streamed = sum(
        read_parquet_rows(worker.home / f"streams/pg_{t}", "SELECT count(*) FROM t")[0][0]
        for t in "abc"
    )
    assert streamed == 820 + 10 + 10 + 6 + 1
    counted = "SELECT name, rows_total FROM connectors WHERE name IN ('three', 'all_out')"
    wait_until(
        lambda: (
            sorted(run(worker, counted)[0].rows) == [("all_out", streamed), ("three", streamed)]
        ),
        timeout=60,
        what="both connectors to count every row",
        diagnose=lambda: run(worker, counted)[0].rows,
    )
    plan = dict(
        run(
            worker,
            "EXPLAIN CREATE SINK CONNECTOR x TO postgres WITH ("
            f"{connection(pg_logical, dst)}, streams = 'pg_a, pg_c', table = '${{stream}}')",
        )[0].rows
    )
    assert plan["read"].startswith("format connectql_streams"), plan["read"]
    assert plan["streams"] == "pg_a, pg_c"
    assert "pg_c" in plan["write"] and "pg_b" not in plan["write"], plan["write"]


def test_a_value_a_snapshot_cannot_read_leaves_the_other_tables_flowing(
    worker,
    pg_logical,
    cdc_dbs,  # noqa: F811
):
    """errors.tolerance = 'all': a table whose snapshot holds a value no Spark type holds sends
    that range to the dead-letter stream, naming the table; the other tables (read before and
    after it, in the same batches) are whole, and its later changes still flow. With 'none'
    (strict) that table stops, naming the range, and the other tables are whole and go on."""
    (src, src_info), _dst = cdc_dbs
    sql(src_info, "CREATE TABLE p1 (id int PRIMARY KEY, v text)")
    sql(src_info, "CREATE TABLE p2 (id int PRIMARY KEY, n int[])")
    sql(src_info, "CREATE TABLE p3 (id int PRIMARY KEY, v text)")
    sql(src_info, "INSERT INTO p1 SELECT g, 'a' || g FROM generate_series(1, 40) g")
    sql(src_info, f"INSERT INTO p2 VALUES (1, '{{1}}'), (2, '{TWO_DIM}'), (3, '{{2}}')")
    sql(src_info, "INSERT INTO p3 SELECT g, 'c' || g FROM generate_series(1, 30) g")
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR poison FROM postgres INTO pp WITH ({connection(pg_logical, src)},
          table = 'p*', 'errors.tolerance' = 'all', 'errors.deadletter.stream' = 'pp_dead');
        CREATE SOURCE CONNECTOR strict FROM postgres INTO qq WITH ({connection(pg_logical, src)},
          table = 'p*', 'errors.retry.max' = 0);
        """,
    )
    count = "SELECT count(*), count(DISTINCT id) FROM t WHERE __op = 'r'"
    streams = ("pp_p1", "pp_p3", "qq_p1", "qq_p3")
    wait_until(
        lambda: [stream_rows(worker, s, count) for s in streams] == [[(40, 40)], [(30, 30)]] * 2,
        timeout=120,
        what="the snapshots of p1 and p3",
        diagnose=lambda: worker.catalog.get_connector("poison").last_error,
    )
    dead = wait_until(  # the batch's dead letters are committed after its tables' streams
        lambda: stream_rows(worker, "pp_dead", "SELECT source_offset, error_message FROM t"),
        timeout=30,
        what="the dead letter of p2",
    )
    assert len(dead) == 1 and json.loads(dead[0][0])["table"] == "p2", dead
    assert "table p2" in dead[0][1], dead
    sql(src_info, "INSERT INTO p2 VALUES (4, '{4}')")
    sql(src_info, "INSERT INTO p3 VALUES (31, 'late')")
    wait_until(
        lambda: (
            stream_rows(worker, "pp_p2", "SELECT n FROM t WHERE __op = 'c'") is not None
            and len(stream_rows(worker, "pp_p2", "SELECT n FROM t WHERE __op = 'c'")) == 1
            and stream_rows(worker, "pp_p3", "SELECT v FROM t WHERE __op = 'c'") == [("late",)]
        ),
        timeout=90,
        what="changes of p2 and p3 after the snapshot",
    )
    assert worker.catalog.get_connector("poison").state == "RUNNING"
    late = "SELECT id FROM t WHERE __op = 'c'"
    wait_until(lambda: stream_rows(worker, "qq_p3", late) == [(31,)], timeout=60)
    strict = worker.catalog.get_connector("strict")
    assert strict.state == "RUNNING" and list(strict.tables_failed) == ["p2"], strict
    assert "table p2" in strict.tables_failed["p2"], strict.tables_failed
    assert "other tables go on" in strict.tables_failed["p2"]
    assert not stream_rows(worker, "qq_p2", "SELECT id FROM t")  # neither its rows nor id 4
    tables = "SELECT \"table\", stream, state FROM connector_tables WHERE connector = 'strict'"
    want = [("p1", "qq_p1", "streaming"), ("p2", "qq_p2", "stopped"), ("p3", "qq_p3", "streaming")]
    wait_until(lambda: sorted(run(worker, tables)[0].rows) == want, timeout=30, what="its tables")


def test_a_wide_table_makes_a_snapshot_batch_of_several_tables_take_fewer_rows():
    from connectql.connectors.relational.tablereader import BATCH_CELLS, wide_batch_rows

    assert wide_batch_rows(100_000, 10) == 100_000  # the widest table's columns count
    assert wide_batch_rows(100_000, 1_101) == 18_165
    assert wide_batch_rows(100_000, 6_006) == BATCH_CELLS // 6_006 < 100_000 // 20
    assert wide_batch_rows(300, 66) == 300
    assert wide_batch_rows(10, 10**9) == 1


def test_one_mysql_sink_of_several_streams(spark, home):
    """Two streams (other columns each) into one MariaDB sink (streams = 'g_*', table =
    't_${stream}', run = 'once'); its last batch replayed (a crash between the targets' commits
    and Spark's commit log) writes no row twice in either table. t_g_a refuses v = 9: those
    rows are dead letters (errors.tolerance = 'all'), once each, the stream's others written."""
    name = f"cq_{uuid.uuid4().hex[:8]}"
    with server() as conn:
        create_database(conn, name)
    my_sql(name, "CREATE TABLE t_g_a (id BIGINT, v INT CHECK (v < 9))")
    try:
        script = f"""
            CREATE SOURCE CONNECTOR IF NOT EXISTS ga FROM datagen INTO g_a WITH (
              'rows.total' = 700, run = 'once', fields = 'id BIGINT SEQUENCE, v INT RANDOM(1, 9)');
            CREATE SOURCE CONNECTOR IF NOT EXISTS gb FROM datagen INTO g_b WITH (
              'rows.total' = 300, run = 'once', seed = 4,
              fields = "k BIGINT SEQUENCE, tag STRING CHOICE('x', 'y')");
            CREATE SINK CONNECTOR IF NOT EXISTS both_out TO mysql WITH ({my_connection(name)},
              streams = 'g_*', table = 't_${{stream}}', run = 'once',
              'errors.tolerance' = 'all', 'errors.deadletter.stream' = 'dead');
        """
        replay_last_batch(home, script, "both_out")
        nines = read_parquet_rows(home / "streams/g_a", "SELECT id FROM t WHERE v = 9 ORDER BY 1")
        dead = read_parquet_rows(home / "streams/dead", "SELECT raw_record, error_class FROM t")
        assert sorted(json.loads(raw)["id"] for raw, _c in dead) == [i for (i,) in nines]
        assert {c for _raw, c in dead} == {"CheckViolation"} and nines
        want_a = read_parquet_rows(
            home / "streams/g_a", "SELECT count(*), sum(id * v) FROM t WHERE v < 9"
        )
        want_b = read_parquet_rows(
            home / "streams/g_b", "SELECT count(*), sum(CASE tag WHEN 'x' THEN k END) FROM t"
        )
        assert want_a[0][0] == 700 - len(nines) and want_b[0][0] == 300
        got_a = my_sql(name, "SELECT count(*), count(DISTINCT id), sum(id * v) FROM t_g_a")
        assert got_a == [(want_a[0][0], want_a[0][0], want_a[0][1])]
        got_b = my_sql(name, "SELECT count(*), sum(CASE tag WHEN 'x' THEN k END) FROM t_g_b")
        assert [(n, int(s)) for n, s in got_b] == [(300, want_b[0][1])]
        assert my_sql(name, "SELECT count(*) FROM connectql_sink_progress") == [(2,)]
    finally:
        with server() as conn, conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


def test_a_stream_read_by_fewer_streams_than_tasks_is_split_in_order(tmp_path):
    """A sink's tasks share one stream's row groups: consecutive runs of about as many rows,
    which in partition order hold the stream's rows in order."""
    import pyarrow.parquet as pq

    from connectql.connectors import streamsread

    files = []
    for i, rows in enumerate((250, 250, 100)):
        path = tmp_path / f"f{i}.parquet"
        first = sum((250, 250, 100)[:i])
        pq.write_table(pa.table({"n": range(first, first + rows)}), path, row_group_size=50)
        files.append((str(path), ()))
    parts = streamsread.split_groups([("s", tuple(files))], 3)
    assert len(parts) == 3
    read = [
        [n for rb in streamsread.StreamsReader.read(None, p) for n in _numbers(rb)] for p in parts
    ]
    assert [n for part in read for n in part] == list(range(600))
    assert all(150 <= len(part) <= 250 for part in read), [len(p) for p in read]
    counts = [sum(rb.column("__count").to_pylist()) for p in parts for rb in
              streamsread.StreamsReader.read(None, p)]  # fmt: skip
    assert sum(counts) == 600


def _numbers(rb: pa.RecordBatch) -> list[int]:
    return [
        n
        for blob in rb.column(packed.ROWS_COLUMN).to_pylist()
        for n in pa.ipc.open_stream(blob).read_all().column("n").to_pylist()
    ]
