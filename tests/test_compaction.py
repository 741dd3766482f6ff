"""Key compaction of a change stream (cleanup = 'compact'): past the head of the log one change
per key is left, old tombstones go, young ones stay, and a PostgreSQL upsert sink created
afterwards from the start rebuilds the table exactly (real Spark, real PostgreSQL)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connectql.catalog.streams import append_files, committed_files
from connectql.errors import ConnectQLError
from tests.helpers import read_parquet_rows, run
from tests.test_postgres import connection, db, sql  # noqa: F401 (fixture)

COLUMNS = [("id", "long"), ("v", "string"), ("__op", "string"), ("__ts_ms", "long")]
COLUMNS += [("__pos", "string"), ("__source", "string")]
HOUR = 3600 * 1000


def _changes(seed_ms: int) -> list[list[tuple]]:
    """Twelve batches of changes to keys 1..20, as a cdc source writes them."""
    pos = iter(range(1, 1000))
    old, new = seed_ms - 2 * HOUR, seed_ms

    def change(key, op, v, ts=new):
        return (key, v, op, ts, f"{next(pos):08d}", "{}")

    batches = [[change(k, "c", f"v{k}-0", old) for k in range(1, 21)]]
    for b in range(1, 12):
        batches.append([change(k, "u", f"v{k}-{b}", old) for k in range(b, 21, 3)])
    batches[3].append(change(5, "d", None, old))  # a delete older than delete.retention
    batches[11].append(change(6, "d", None))  # a young one: stays as a tombstone
    batches[4].append(change(7, "d", None, old))
    batches[9].append(change(7, "c", "v7-again", old))  # deleted, then created again
    return batches


def _final(batches) -> dict[int, str]:
    rows: dict[int, str] = {}
    for key, v, op, *_ in sorted((c for b in batches for c in b), key=lambda c: c[4]):
        if op == "d":
            rows.pop(key, None)
        else:
            rows[key] = v
    return rows


def _write(stream: Path, batches) -> None:
    names = [n for n, _ in COLUMNS]
    for i, batch in enumerate(batches):
        f = stream / f"{'c' * 12}-b{i}-0.parquet"
        table = pa.table({n: [c[j] for c in batch] for j, n in enumerate(names)})
        pq.write_table(table.cast(pa.schema([(n, table.schema.field(n).type) for n in names])), f)
        append_files(stream, [f])


def test_compaction_keeps_the_last_change_per_key_and_a_new_sink_rebuilds_the_table(
    worker,
    pg_shared,
    db,  # noqa: F811
):
    name, info = db
    run(worker, "CREATE STREAM c WITH (cleanup = 'compact', 'delete.retention' = '1 hour')")
    struct = {
        "type": "struct",
        "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in COLUMNS],
    }
    ddl = ", ".join(f"{n} {'BIGINT' if t == 'long' else 'STRING'}" for n, t in COLUMNS)
    worker.catalog.set_stream_schema("c", ddl, json.dumps(struct), ("id",))
    stream = Path(worker.catalog.get_stream("c").path)
    stream.mkdir(parents=True, exist_ok=True)
    batches = _changes(int(time.time() * 1000))
    _write(stream, batches)
    worker.retainer.run_once()
    files = committed_files(stream)
    assert len(files) == 1 and Path(files[0]).name.startswith("merged-")
    kept = read_parquet_rows(stream, "SELECT id, __op FROM t ORDER BY id")
    expected = _final(batches)
    assert kept == sorted([(k, "d") for k in (6,)] + [(k, _op(batches, k)) for k in expected])
    assert 5 not in {k for k, _ in kept}  # its old tombstone is gone with its changes
    run(
        worker,
        f"CREATE SINK CONNECTOR rebuilt TO postgres FROM c WITH ({connection(pg_shared, name)},"
        " table = 'items', mode = 'upsert', 'primary.key' = 'id', run = 'once')",
    )
    worker.wait_for_once()
    assert dict(sql(info, "SELECT id, v FROM items")) == expected


def _op(batches, key: int) -> str:
    return [c[2] for b in batches for c in b if c[0] == key][-1]


def test_compaction_options_are_checked(worker):
    for bad, named in [
        ("CREATE STREAM t WITH (cleanup = 'squash')", "'cleanup'"),
        ("CREATE STREAM t WITH ('delete.retention' = 'a while')", "'delete.retention'"),
    ]:
        with pytest.raises(ConnectQLError, match=named):
            run(worker, bad)
    run(worker, "SET stream.cleanup = 'compact'; SET stream.delete.retention = '2 hours'")
    from connectql.runtime.retention import Limits
    from connectql.worker.retainer import effective_options

    run(worker, "CREATE STREAM t")
    limits = Limits.of(effective_options(worker.catalog.get_stream("t"), worker.catalog.settings()))
    assert limits.compact and limits.tombstone_ms == 2 * HOUR
    shown = {r[0]: r[1] for r in run(worker, "DESCRIBE STREAM t")[0].rows}
    assert shown["option cleanup"] == "compact (worker default)"


def test_compaction_chooses_by_key_and_copies_file_by_file(tmp_path, monkeypatch):
    """The rows kept are chosen from the key and change columns alone (DuckDB, spilling past its
    memory limit) and copied from each file in log order; a column a later file added is null
    in the rows of the earlier ones."""
    from connectql.runtime import merge

    monkeypatch.setattr(merge, "COMPACT_MEMORY", "32MB")
    pos = iter(range(10**6))
    files, expected = [], {}
    for f in range(4):
        rows = [
            {
                "id": (f * 7 + i * 13) % 5000,
                "v": f"v{f}-{i}" * 5,
                "__op": "d" if i % 97 == 0 else "u",
                "__ts_ms": 0 if f < 3 else 10**15,
                "__pos": f"{next(pos):08d}",
            }  # fmt: skip
            for i in range(60_000)
        ]
        if f == 3:
            rows = [{**r, "extra": r["id"] * 2} for r in rows]
        for r in rows:
            expected[r["id"]] = r
        path = tmp_path / f"part-{f}.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
        files.append(str(path))
    # old deletes (ts 0, before the cutoff) go; young ones (file 3) stay as tombstones
    kept = {k: r for k, r in expected.items() if not (r["__op"] == "d" and r["__ts_ms"] == 0)}
    out = merge.write_merged(tmp_path, files, "merged.parquet", merge.last_changes(("id",), 10))
    got = pq.read_table(out).to_pylist()
    assert [r["__pos"] for r in got] == sorted(r["__pos"] for r in got)  # log order
    assert {r["id"]: r for r in got} == {k: {"extra": None, **r} for k, r in kept.items()}
    assert len(got) == len(kept) and not list(tmp_path.glob(".compact.*"))
