"""What the table-format sink tests (test_delta, test_iceberg) share: a change stream's batches
with their expected table, and a PostgreSQL cdc source's table changed under a running sink
until the sink's table equals it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pyarrow as pa
import pytest

from connectql.errors import ConnectQLError
from connectql.toolkit.testing import SinkRun, SourceRun
from tests.helpers import run, wait_until
from tests.pgserver import pg_sql
from tests.test_postgres import connection

CHANGE_SCHEMA = pa.schema(
    [("id", pa.int64()), ("name", pa.string()), ("__op", pa.string()), ("__pos", pa.string())]
)
CHANGE_BATCHES = [
    [{"id": i, "name": f"n{i}", "__op": "r", "__pos": "0"} for i in range(10)],
    [  # out of __pos order in one batch: the newest per key wins
        {"id": 1, "name": "late", "__op": "u", "__pos": "3"},
        {"id": 1, "name": "early", "__op": "u", "__pos": "2"},
        {"id": 2, "name": None, "__op": "d", "__pos": "2"},
        {"id": 3, "name": "gone", "__op": "u", "__pos": "2"},
        {"id": 3, "name": None, "__op": "d", "__pos": "4"},
        {"id": 20, "name": "new", "__op": "c", "__pos": "5"},
    ],
]
CHANGED = sorted(
    [(i, f"n{i}") for i in range(10) if i not in (1, 2, 3)] + [(1, "late"), (20, "new")]
)


def cdc_into(worker, pg_logical, cdc_dbs, sink: str, rows: Callable[[], list[dict] | None]):
    """A PostgreSQL table of 500 rows captured by a cdc source into stream pgitems, the sink
    (`sink`: the CREATE SINK's `TO ... WITH (...)` part) from it; then updates, deletes, an
    insert and an added column, until `rows()` (the sink's table) equals the source's."""
    (src, src_info), _ = cdc_dbs
    pg_sql(src_info, "CREATE TABLE items (id int PRIMARY KEY, name text, price numeric(10,2))")
    pg_sql(src_info, "INSERT INTO items SELECT g, 'n' || g, g * 1.5 FROM generate_series(1, 500) g")
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR pgsrc FROM postgres INTO pgitems WITH (
          {connection(pg_logical, src)}, table = 'items', mode = 'cdc');
        CREATE SINK CONNECTOR lake {sink};
        """,
    )
    wait_until(lambda: len(rows() or []) == 500, 120, what="the snapshot")
    pg_sql(src_info, "UPDATE items SET name = 'changed' WHERE id % 7 = 0")
    pg_sql(src_info, "DELETE FROM items WHERE id % 11 = 0")
    pg_sql(src_info, "INSERT INTO items VALUES (1000, 'late', 9.99)")
    pg_sql(src_info, "ALTER TABLE items ADD COLUMN note text")  # the table gains a column
    pg_sql(src_info, "UPDATE items SET note = 'noted' WHERE id = 1000")
    query = "SELECT id, name, price, note FROM items"
    want = sorted((i, n, str(p), t) for i, n, p, t in pg_sql(src_info, query))

    def same():
        got = [(r["id"], r["name"], str(r["price"]), r.get("note")) for r in rows() or []]
        return sorted(got) == want

    wait_until(same, 120, what="the table equal to the source")


def commit_interval_is_the_trigger(worker, sink: str) -> None:
    """commit.interval.ms sets the sink's trigger (EXPLAIN says so), it refuses
    trigger.interval beside it and a value under 1; `sink` is a CREATE SINK up to its last
    option, without the closing parenthesis."""
    plan = run(worker, f"EXPLAIN {sink}, 'commit.interval.ms' = 2500)")[0]
    assert dict(plan.rows)["trigger"] == "every 2500 ms"
    with pytest.raises(ConnectQLError, match="commit.interval.ms and trigger.interval"):
        run(worker, f"{sink}, 'commit.interval.ms' = 2500, 'trigger.interval' = '1 second')")
    with pytest.raises(ConnectQLError, match="commit.interval.ms must be at least 1"):
        run(worker, f"{sink}, 'commit.interval.ms' = 0)")


def appends_are_read_once(tmp_path, sink: tuple, source: tuple, delete_five: Callable) -> None:
    """A lake source (`source`: its class and options) over a table its sink (`sink`: class
    and options, append mode, compact.every = 3) appends to: the table as it is, then each
    later append, every row once across stops and a replayed batch; the compaction and a delete
    (`delete_five()`) add no row; starting.position = 'latest' reads only the appends after it
    starts, at most 150 rows (batch.max.records) a batch."""
    (sink_cls, sink_options), (source_cls, source_options) = sink, source
    writes = SinkRun(sink_cls, {**sink_options, "compact.every": 3, "mode": "append"},
                     tmp_path / "sink", pa.schema([("id", pa.int64())]))  # fmt: skip
    latest = SourceRun(source_cls, {**source_options, "starting.position": "latest"},
                       tmp_path / "l", max_records=150)  # fmt: skip
    latest.batches(1)  # starts where the table is: nothing of it
    run = SourceRun(source_cls, source_options, tmp_path / "src")
    ids = iter(range(400))
    for _ in range(2):  # a batch each (a file each)
        writes.add([{"id": next(ids)} for _ in range(100)])
    writes.to_end()
    run.batches(1)
    for _ in range(2):  # the sink's third batch compacts the table
        writes.add([{"id": next(ids)} for _ in range(100)])
    writes.to_end()
    delete_five()
    run.to_end()
    run.replay_last_batch()
    assert Counter(r["id"] for r in run.rows()) == Counter(range(400))  # each row once
    latest.to_end()
    assert Counter(r["id"] for r in latest.rows()) == Counter(range(400))  # all appended later
    assert latest._committed() >= 4  # a batch per append of 100: at most 150 rows a batch
