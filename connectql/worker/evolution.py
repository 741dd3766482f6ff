"""schema.change = 'evolve': a source met columns its stream lacks. The stream (of a multi-table
source, each stream whose table changed) gains them (old files read them as NULL), the source
restarts with the wider schema, and the running sinks of the stream restart so that they see the
new columns too (upsert sinks add them to the target)."""

from __future__ import annotations

import json
from dataclasses import replace

from pyspark.sql.types import StructType

from connectql.catalog import states
from connectql.catalog.store import table_stream
from connectql.connectors.base import ReaderSpec
from connectql.toolkit.envelope import META_COLUMNS
from connectql.worker import following
from connectql.worker.schemas import schema_ddl


def widened(old: StructType, new: StructType) -> tuple[StructType, list[str]]:
    """`old` with the columns of `new` it lacks, placed before the change-data columns."""
    added = [f for f in new.fields if f.name not in old.fieldNames()]
    data = [f for f in old.fields if f.name not in META_COLUMNS]
    meta = [f for f in old.fields if f.name in META_COLUMNS]
    return StructType(data + added + meta), [f.name for f in added]


def evolve(worker, name: str, cause: str) -> bool:
    """Widen the streams of source `name` whose tables gained columns and restart what reads or
    writes them; False when the upstream tables have nothing new (the failure is then an
    ordinary one)."""
    entry = worker.catalog.get_connector(name)
    plan = worker._plan(entry)
    if plan.reader.discover is None:
        return False
    found = {f.table: f for f in plan.reader.discover()}
    tables = list(plan.table_paths) or [None]
    widened_streams = [
        w
        for t, stream in zip(tables, plan.streams, strict=True)
        if t in found and (w := _widen(worker, stream, found[t]))
    ]
    new = [f for t, f in found.items() if t is not None and entry.tables and t not in tables]
    if not widened_streams and not new:
        return False
    reason = "; ".join(
        [f"stream {s} gained column(s) {', '.join(added)}" for s, added in widened_streams]
        + ([add_tables(worker, entry, new)] if new else [])
    )
    reason = ("schema evolved: " if widened_streams else "") + reason
    worker.catalog.set_state(name, states.RESTARTING, reason, error=cause)
    worker._launch(name, reason, worker._bound_plan(worker.catalog.get_connector(name)))
    if new:
        following.follow(worker)
    changed = {s for s, _added in widened_streams}
    for sink in worker.catalog.connectors():
        reads = changed & set(sink.streams)
        if sink.kind == "sink" and reads and worker.engine.is_active(sink.name):
            worker._stop(sink.name, states.STOPPED, reason)
            worker._start(worker.catalog.get_connector(sink.name), reason)
    return True


def _widen(worker, name: str, found) -> tuple[str, list[str]] | None:
    """Give stream `name` the columns of `found` (a table's discovery) it lacks:
    (stream, added columns), or None when it has them all."""
    stream = worker.catalog.get_stream(name)
    old = StructType.fromJson(json.loads(stream.schema_json))
    new = worker.engine.resolve_schema(ReaderSpec("parquet", schema=found.ddl))
    merged, added = widened(old, new)
    if not added:
        return None
    worker.catalog.set_stream_schema(name, schema_ddl(merged), merged.json(), found.key)
    return name, added


def add_tables(
    worker, entry, found: list, kept: tuple[str, ...] | None = None, how: str = "found"
) -> str:
    """Source `entry` reads the tables `found` too (each into a stream of its own, read whole
    while the change log flows), besides `kept` (default: all it reads): what it says."""
    kept = entry.tables if kept is None else kept
    names = tuple(f.table for f in found)
    tables = (*kept, *names)
    plan = worker._plan(replace(entry, tables=tables))
    for f in found:
        stream = table_stream(entry.stream, f.table)
        struct = worker.engine.resolve_schema(ReaderSpec("parquet", schema=f.ddl))
        known = worker.catalog.find_stream(stream)
        worker._register(stream, plan.table_paths[f.table], struct, entry.name, f.key, known)
    added = (*[t for t in entry.tables_added if t in kept], *names)
    worker.catalog.set_tables(entry.name, tables, added)
    return f"table(s) {', '.join(names)} {how}: read whole while the others' changes flow"
