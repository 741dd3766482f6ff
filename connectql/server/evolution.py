"""schema.change = 'evolve': a source met columns its stream lacks. The stream gains them (old
files read them as NULL), the source restarts with the wider schema, and the running sinks of
the stream restart so that they see the new columns too (upsert sinks add them to the target)."""

from __future__ import annotations

import json

from pyspark.sql.types import StructType

from connectql.catalog import states
from connectql.connectors.base import ReaderSpec
from connectql.connectors.dbsink import META_COLUMNS


def widened(old: StructType, new: StructType) -> tuple[StructType, list[str]]:
    """`old` with the columns of `new` it lacks, placed before the change-data columns."""
    added = [f for f in new.fields if f.name not in old.fieldNames()]
    data = [f for f in old.fields if f.name not in META_COLUMNS]
    meta = [f for f in old.fields if f.name in META_COLUMNS]
    return StructType(data + added + meta), [f.name for f in added]


def evolve(worker, name: str, cause: str) -> bool:
    """Widen the stream of source `name` and restart what reads or writes it; False when the
    upstream table has nothing new (the failure is then an ordinary one)."""
    from connectql.server.worker import schema_ddl

    entry = worker.catalog.get_connector(name)
    plan = worker._plan(entry)
    if plan.reader.discover is None:
        return False
    ddl, key = plan.reader.discover()
    stream = worker.catalog.get_stream(plan.stream)
    old = StructType.fromJson(json.loads(stream.schema_json))
    merged, added = widened(old, worker.engine.resolve_schema(ReaderSpec("parquet", schema=ddl)))
    if not added:
        return False
    worker.catalog.set_stream_schema(stream.name, schema_ddl(merged), merged.json(), key)
    reason = f"schema evolved: stream {stream.name} gained column(s) {', '.join(added)}"
    worker.catalog.set_state(name, states.RESTARTING, reason, error=cause)
    worker._launch(name, reason, worker._bound_plan(worker.catalog.get_connector(name)))
    for sink in worker.catalog.connectors():
        if (
            sink.kind == "sink"
            and sink.stream == stream.name
            and worker.engine.is_active(sink.name)
        ):
            worker._stop(sink.name, states.STOPPED, reason)
            worker._start(worker.catalog.get_connector(sink.name), reason)
    return True
