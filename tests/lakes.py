"""What the table-format sink tests (test_delta, test_iceberg) share: a change stream's batches
with their expected table, and a PostgreSQL cdc source's table changed under a running sink
until the sink's table equals it."""

from __future__ import annotations

import datetime as dt
import math
from collections import Counter
from collections.abc import Callable
from decimal import Decimal

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


UTC = dt.timezone.utc
AWKWARD_SCHEMA = pa.schema([
    ("id", pa.int64()), ("small", pa.int16()), ("f32", pa.float32()), ("f64", pa.float64()),
    ("dec", pa.decimal128(38, 18)), ("money", pa.decimal128(12, 2)), ("flag", pa.bool_()),
    ("day", pa.date32()), ("local", pa.timestamp("us")), ("at", pa.timestamp("us", tz="UTC")),
    ("text", pa.string()), ("raw", pa.binary()), ("nums", pa.list_(pa.int32())),
    ("attrs", pa.map_(pa.string(), pa.string())),
    ("point", pa.struct([("x", pa.float64()), ("label", pa.string())])),
    ("__op", pa.string()), ("__pos", pa.string()),
])  # fmt: skip
AWKWARD_ROWS = [
    dict(id=1, small=-32768, f32=float("nan"), f64=float("inf"),
         dec=Decimal("12345678901234567890.123456789012345678"), money=Decimal("-0.01"), flag=True,
         day=dt.date(1, 1, 1), local=dt.datetime(1, 1, 1), at=dt.datetime(1900, 1, 1, tzinfo=UTC),
         text="naïve ☕ \t tab", raw=b"\x00\xff", nums=[1, None, 3], attrs={"a": "1", "b": None},
         point={"x": -0.0, "label": ""}),
    dict(id=2, small=32767, f32=3.4028235e38, f64=-1.7976931348623157e308,
         dec=Decimal("-0.000000000000000001"), money=Decimal("9999999999.99"), flag=False,
         day=dt.date(9999, 12, 31), local=dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
         at=dt.datetime(2262, 4, 11, 23, 47, 16, 854776, tzinfo=UTC), text="", raw=b"", nums=[],
         attrs={}, point=None),
    dict(id=3),  # every other column NULL
    dict(id=4, small=0, f32=float("-inf"), f64=5e-324, dec=Decimal("0"), money=Decimal("5"),
         day=dt.date(2024, 2, 29), local=dt.datetime(2024, 3, 1, 0, 0, 0, 500000),
         at=dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), text="x" * 100_000,
         raw=bytes(range(256)), nums=[None], attrs={"": ""}, point={"x": None, "label": None}),
]  # fmt: skip
AWKWARD_CHANGES = [  # a later batch: an update of the nested columns, a delete
    dict(id=1, nums=[7], attrs={"c": "3"}, point={"x": 1.5, "label": "moved"}, __op="u"),
    dict(id=3, __op="d"),
]


def _comparable(value):
    """A value read back, as the written one compares: maps as dicts, NaN as a marker."""
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, list) and value and isinstance(value[0], tuple):
        return dict(value)  # a map read back as (key, value) pairs
    if isinstance(value, dict):
        return {k: _comparable(v) for k, v in value.items()}
    return value


def awkward_types_round_trip(tmp_path, sink_cls, options: dict, read: Callable) -> None:
    """The awkward values (extreme numbers, NaN and infinities, the calendar's ends,
    microseconds, 100 kB of text, bytes, nested lists, maps and structs, NULLs) upserted by the
    sink (`options`: its table) and then updated and deleted, read back (`read(options)`: the
    rows) equal to what was written, value by value."""
    rows = [{**r, "__op": "c", "__pos": f"{i:03d}"} for i, r in enumerate(AWKWARD_ROWS)]
    changes = [{**r, "__pos": f"{100 + i:03d}"} for i, r in enumerate(AWKWARD_CHANGES)]
    run = SinkRun(sink_cls, {**options, "key": "id"}, tmp_path / "awkward", AWKWARD_SCHEMA)
    run.add(rows)
    run.to_end()
    run.add(changes)
    run.to_end()
    written = {r["id"]: r for r in pa.Table.from_pylist(rows, AWKWARD_SCHEMA).to_pylist()}
    for change in pa.Table.from_pylist(changes, AWKWARD_SCHEMA).to_pylist():
        if change["__op"] == "d":
            written.pop(change["id"])
        else:
            written[change["id"]] = change
    want = {i: {k: _comparable(v) for k, v in r.items() if not k.startswith("__")}
            for i, r in written.items()}  # fmt: skip
    got = {r["id"]: {k: _comparable(v) for k, v in r.items()} for r in read(options)}
    assert sorted(got) == sorted(want) == [1, 2, 4]
    for i, row in want.items():
        for column, value in row.items():
            assert got[i][column] == value, (i, column, got[i][column], value)
