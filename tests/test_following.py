"""A sink of several streams (streams = 'f_*') against a real PostgreSQL: it follows streams
created after it, and a stream whose rows its target refuses stops alone while the others flow,
then RESTART CONNECTOR writes it on from where it stopped, each row once."""

from __future__ import annotations

import json

import pytest

from connectql.connectors import streamsread
from connectql.errors import PlanError
from tests.helpers import read_parquet_rows, run, wait_until, while_changing
from tests.test_mysql import pg_rows
from tests.test_postgres import cdc_dbs, connection, db, sql  # noqa: F401 (fixtures)


def _source(name: str, stream: str, total: int, seed: int) -> str:
    return (
        f"CREATE SOURCE CONNECTOR {name} FROM datagen INTO {stream} WITH ('rows.total' = {total},"
        f" run = 'once', seed = {seed}, fields = 'id BIGINT SEQUENCE, v INT RANDOM(1, 9)');"
    )


def _count(info: str, table: str):
    return pg_rows(info, f"SELECT count(*), count(DISTINCT id), sum(id * v) FROM {table}")


def _want(worker, stream: str):
    rows = read_parquet_rows(worker.home / f"streams/{stream}", "SELECT id, v FROM t") or []
    return [(len(rows), len({i for i, _ in rows}), sum(i * v for i, v in rows))]


def test_a_refused_stream_stops_alone_and_a_later_stream_joins(worker, pg_shared, db):  # noqa: F811
    name, info = db
    sql(info, "CREATE TABLE t_f_b (id BIGINT PRIMARY KEY, v INT CHECK (v < 9))")
    run(
        worker,
        _source("fa", "f_a", 400, 1)
        + _source("fb", "f_b", 300, 2)
        + f"""CREATE SINK CONNECTOR f_out TO postgres WITH ({connection(pg_shared, name)},
              streams = 'f_*', table = 't_${{stream}}', mode = 'upsert', 'primary.key' = 'id');""",
    )
    wait_until(
        lambda: _count(info, "t_f_a") == _want(worker, "f_a"),
        timeout=120,
        what="f_a written whole",
        diagnose=lambda: (_count(info, "t_f_a"), worker.catalog.get_connector("f_out")),
    )
    sink = wait_until(
        lambda: (e := worker.catalog.get_connector("f_out")).tables_failed and e,
        timeout=60,
        what="f_b to stop alone",
    )
    assert list(sink.tables_failed) == ["f_b"], sink.tables_failed
    assert "t_f_b" in sink.tables_failed["f_b"] or "v < 9" in sink.tables_failed["f_b"]
    assert _count(info, "t_f_b") == [(0, 0, None)]
    wait_until(lambda: worker.catalog.get_connector("f_out").state == "RUNNING", timeout=60)
    described = dict(run(worker, "DESCRIBE CONNECTOR f_out")[0].rows)
    assert "stream f_b stopped" in described, described
    tables = "SELECT \"table\", state, error FROM connector_tables WHERE connector = 'f_out'"
    rows = sorted(run(worker, tables)[0].rows)
    assert rows == [("f_a", "writing", None), ("f_b", "stopped", sink.tables_failed["f_b"])]

    run(worker, _source("fc", "f_c", 200, 3))  # a stream created later joins the sink
    wait_until(
        lambda: _count(info, "t_f_c") == _want(worker, "f_c"),
        timeout=120,
        what="f_c, created after the sink, written whole",
        diagnose=lambda: (
            _count(info, "t_f_c"),
            _want(worker, "f_c"),
            streamsread.last_planned_end(worker.checkpoint_of("f_out")),
            run(worker, "SELECT state, reason FROM connector_events WHERE connector = 'f_out'")[
                0
            ].rows,
        ),
    )
    assert worker.catalog.get_connector("f_out").streams == ["f_a", "f_b", "f_c"]
    events = run(worker, "SELECT reason FROM connector_events WHERE connector = 'f_out'")[0].rows
    assert ("follows stream f_c, created later",) in events, events
    assert list(worker.catalog.get_connector("f_out").tables_failed) == ["f_b"]

    sql(info, "ALTER TABLE t_f_b DROP CONSTRAINT t_f_b_v_check")
    run(worker, "RESTART CONNECTOR f_out")
    wait_until(
        lambda: _count(info, "t_f_b") == _want(worker, "f_b"),
        timeout=120,
        what="f_b written from where it stopped",
        diagnose=lambda: (_count(info, "t_f_b"), worker.catalog.get_connector("f_out")),
    )
    entry = worker.catalog.get_connector("f_out")
    assert not entry.tables_failed and entry.state == "RUNNING", entry
    assert _count(info, "t_f_a") == _want(worker, "f_a")
    assert _count(info, "t_f_c") == _want(worker, "f_c")
    holds = streamsread.holds_file(worker.checkpoint_of("f_out"))
    wait_until(lambda: streamsread.read_holds(holds) == {}, timeout=30, what="the hold over")


def test_a_held_stream_goes_on_from_where_its_last_committed_batch_left_it(tmp_path):
    """The reader's offsets of a held stream, without Spark: pinned at the hold while held;
    once not held, read from there whether the offset is the held one or the end of the batch
    replayed without it, the batch's end saying it read on; the hold is forgotten once a batch
    that read on is committed (the start of the next)."""
    checkpoint = tmp_path / "cp"
    for log in ("offsets", "commits"):
        (checkpoint / log).mkdir(parents=True)
    for batch, end in ((0, {"a": 1, "b": 3}), (1, {"a": 2, "b": 5})):
        (checkpoint / "offsets" / str(batch)).write_text(f"v1\n{{}}\n{json.dumps(end)}\n")
    (checkpoint / "commits" / "0").write_text("v1\n{}\n")  # batch 1 failed for b
    streamsread.hold(str(checkpoint), "b")
    holds = streamsread.holds_file(str(checkpoint))
    assert streamsread.read_holds(holds) == {"b": {"from": 3, "skipped": 5}}

    def reader(held):
        paths = {"a": str(tmp_path / "a"), "b": str(tmp_path / "b")}
        return streamsread.StreamsReader(
            {
                streamsread.STREAMS_OPTION: json.dumps(paths),
                streamsread.HELD_OPTION: json.dumps(held),
                streamsread.HOLDS_OPTION: holds,
            }
        )

    held = reader(["b"])
    assert held.latestOffset({"a": 2, "b": 5})["b"] == {"held": 3}
    assert held.latestOffset({"a": 2, "b": {"held": 3}})["b"] == {"held": 3}
    free = reader([])
    for start in ({"b": 5}, {"b": {"held": 3}}):
        assert free._begin("b", start) == 3
    assert free._begin("a", {"a": 2}) == 2
    read_on = free.latestOffset({"a": 2, "b": 5})["b"]  # the first batch past the hold
    assert read_on == {"read": -1} and free._begin("b", {"b": read_on}) == -1
    assert streamsread.read_holds(holds), "kept until a batch past it is committed"
    assert free.latestOffset({"a": 2, "b": {"read": 5}})["b"] == -1
    assert streamsread.read_holds(holds) == {}
    assert free._begin("b", {"b": 5}) == 5


def table_changes(i: int) -> list[str]:
    """Round i of the changes made while n_b is found and snapshotted (PostgreSQL or MySQL):
    updates, a delete and an insert of n_b, an update of n_a."""
    return [
        f"UPDATE n_b SET v = 'u{i}', n = n + 1 WHERE id % 97 = {i % 97}",
        f"DELETE FROM n_b WHERE id = {(i * 37) % 4000 + 1}",
        f"INSERT INTO n_b VALUES ({10000 + i}, 'new', {i})",
        f"UPDATE n_a SET v = 'x{i}' WHERE id = {i % 300 + 1}",
    ]


def test_a_table_created_while_running_is_snapshotted_under_changes_and_followed(
    worker,
    pg_logical,
    cdc_dbs,  # noqa: F811
):
    """A PostgreSQL cdc source of table = 'n_*' and a sink of streams = 'nn_*': a table
    created while both run, with rows, is found, snapshotted in chunks while its rows and the
    other table's change, and followed; its stream joins the sink, and both target tables end
    equal to the source's. Then SET (table), SNAPSHOT TABLE and DROP TABLE; first, a
    signal.table that cannot be read refused at CREATE."""
    (src, src_info), (dst, dst_info) = cdc_dbs
    sql(src_info, "CREATE TABLE n_a (id int PRIMARY KEY, v text)")
    sql(src_info, "INSERT INTO n_a SELECT g, 'a' || g FROM generate_series(1, 300) g")
    # signal.table must be readable at CREATE: the error names it and the statement making it
    statement = (
        f"CREATE SOURCE CONNECTOR ssrc FROM postgres INTO ss WITH ({connection(pg_logical, src)},"
        " table = 'n_*', 'signal.table' = 'public.no_signals')"
    )
    with pytest.raises(PlanError, match=r"signal.table public.no_signals cannot be read") as e:
        run(worker, statement)
    assert "CREATE TABLE public.no_signals (id VARCHAR(42) PRIMARY KEY" in str(e.value)
    assert not worker.catalog.has_connector("ssrc")
    with pytest.raises(PlanError, match="signal.table asks for snapshots of tables of a cdc"):
        run(worker, statement.replace("table = 'n_*'", "table = 'n_a'"))
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR nsrc FROM postgres INTO nn WITH ({connection(pg_logical, src)},
          table = 'n_*', 'batch.rows' = 500);
        CREATE SINK CONNECTOR nout TO postgres WITH ({connection(pg_logical, dst)},
          streams = 'nn_*', table = '${{table}}');
        """,
    )
    wait_until(lambda: pg_rows(dst_info, "SELECT count(*) FROM n_a") == [(300,)], timeout=120)
    sql(src_info, "CREATE TABLE n_b (id int PRIMARY KEY, v text, n int)")
    sql(src_info, "INSERT INTO n_b SELECT g, 'b' || g, g FROM generate_series(1, 4000) g")
    joined = lambda: wait_until(  # noqa: E731
        lambda: "nn_n_b" in worker.catalog.get_connector("nout").streams,
        timeout=60,
        what="the new table's stream to join the sink",
    )
    while_changing(lambda q: sql(src_info, q), table_changes, 150, joined)
    for table in ("n_a", "n_b"):
        query = f"SELECT id, v, {'n' if table == 'n_b' else 'NULL'} FROM {table} ORDER BY id"
        want = sql(src_info, query)
        wait_until(
            lambda q=query, w=want: pg_rows(dst_info, q) == w,
            timeout=120,
            what=f"{table} equal in the target",
            diagnose=lambda q=query, w=want: (len(pg_rows(dst_info, q) or []), len(w)),
        )
    entry = worker.catalog.get_connector("nsrc")
    assert entry.tables == ("n_a", "n_b") and entry.tables_added == ("n_b",), entry
    events = run(worker, "SELECT reason FROM connector_events WHERE connector = 'nsrc'")[0].rows
    assert any("n_b found" in r for (r,) in events), events
    tables = "SELECT \"table\", state FROM connector_tables WHERE connector = 'nsrc'"
    wait_until(
        lambda: sorted(run(worker, tables)[0].rows) == [("n_a", "streaming"), ("n_b", "streaming")],
        timeout=30,
    )
    snapshot = "SELECT count(*) FROM t WHERE __op = 'r'"
    assert read_parquet_rows(worker.home / "streams/nn_n_b", snapshot)[0][0] > 0

    # ALTER ... SET (table = ...): m_c added (read whole), n_a left out, n_b goes on as it was
    sql(src_info, "CREATE TABLE m_c (k text PRIMARY KEY, n int)")
    sql(src_info, "INSERT INTO m_c SELECT 'k' || g, g FROM generate_series(1, 700) g")
    snapshotted = read_parquet_rows(worker.home / "streams/nn_n_b", snapshot)[0][0]
    said = run(worker, "ALTER CONNECTOR nsrc SET (table = 'n_b, m_c')")[0].message
    assert "m_c added" in said and "n_a no longer read" in said, said
    sql(src_info, "INSERT INTO n_b VALUES (50000, 'after', 1)")
    sql(src_info, "UPDATE n_a SET v = 'not read' WHERE id = 1")
    sql(src_info, "UPDATE m_c SET n = -1 WHERE k = 'k7'")
    want = sql(src_info, "SELECT k, n FROM m_c ORDER BY k")
    wait_until(
        lambda: pg_rows(dst_info, "SELECT k, n FROM m_c ORDER BY k") == want,
        timeout=120,
        what="m_c, added by ALTER, equal in the target",
    )
    after = "SELECT v FROM n_b WHERE id = 50000"
    wait_until(lambda: pg_rows(dst_info, after) == [("after",)], timeout=60, what="n_b goes on")
    assert pg_rows(dst_info, "SELECT v FROM n_a WHERE id = 1") != [("not read",)]
    assert read_parquet_rows(worker.home / "streams/nn_n_b", snapshot)[0][0] == snapshotted
    assert worker.catalog.get_connector("nsrc").tables == ("n_b", "m_c")

    # ALTER ... SNAPSHOT TABLE: rows lost in the target come back, while n_b keeps changing
    with pytest.raises(PlanError, match="n_a is not a table it reads"):
        run(worker, "ALTER CONNECTOR nsrc SNAPSHOT TABLE n_a")
    assert worker.catalog.get_connector("nsrc").snapshots == {}
    sql(dst_info, "DELETE FROM n_b WHERE id % 3 = 0")
    said = run(worker, "ALTER CONNECTOR nsrc SNAPSHOT TABLE n_b")[0].message
    assert "snapshot of n_b asked" in said, said
    for i in range(20):
        sql(src_info, f"UPDATE n_b SET v = 'again{i}' WHERE id % 50 = {i}")
        sql(src_info, f"INSERT INTO n_b VALUES ({60000 + i}, 'late', {i})")
    query = "SELECT id, v, n FROM n_b ORDER BY id"
    want = sql(src_info, query)
    wait_until(
        lambda: pg_rows(dst_info, query) == want,
        timeout=120,
        what="n_b whole again in the target",
        diagnose=lambda: (len(pg_rows(dst_info, query) or []), len(want)),
    )
    again = read_parquet_rows(worker.home / "streams/nn_n_b", snapshot)[0][0]
    assert again >= snapshotted + len(want) - 20, (again, snapshotted)
    state = "SELECT state FROM connector_tables WHERE connector = 'nsrc' AND \"table\" = 'n_b'"
    wait_until(lambda: run(worker, state)[0].rows == [("streaming",)], timeout=30)

    # DROP TABLE: m_c's changes end, the connector and n_b go on
    sql(src_info, "DROP TABLE m_c")
    sql(src_info, "INSERT INTO n_b VALUES (70000, 'after drop', 1)")
    after = "SELECT v FROM n_b WHERE id = 70000"
    wait_until(lambda: pg_rows(dst_info, after) == [("after drop",)], timeout=60, what="n_b on")
    dropped = "SELECT state, error FROM connector_tables WHERE connector = 'nsrc'"
    wait_until(
        lambda: "dropped" in dict(run(worker, dropped)[0].rows).get("stopped", ""),
        timeout=60,
        what="m_c stopped, named dropped",
    )
    assert worker.catalog.get_connector("nsrc").state == "RUNNING"


def test_signal_rows_are_served_once_while_they_stay_in_the_table():
    from connectql.connectors.relational import signals

    snap = signals.SNAPSHOT
    rows = [("1", snap, '{"data-collections": ["db.a", "b", "zz"]}'), ("2", "log", "{}")]
    first = signals.served({"log": 5}, rows, ["a", "b"])
    assert first == {"log": 5, "signals": ["1", "2"], "signalled": {"a": 1, "b": 1}}
    assert signals.served(first, rows, ["a", "b"]) is first
    more = signals.served(first, [*rows, ("3", snap, '{"data-collections": ["a"]}')], ["a"])
    assert more["signalled"] == {"a": 2, "b": 1} and more["signals"] == ["1", "2", "3"]
    gone = signals.served(more, [("3", snap, "{}")], ["a"])
    assert gone["signals"] == ["3"] and gone["signalled"] == more["signalled"]
    assert signals.tables_asked("not json") == [] and signals.tables_asked('{"x": 1}') == []
