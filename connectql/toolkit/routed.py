"""A toolkit sink of several streams (option `streams`, sinks with `several`) as Spark's stream
writer: the query reads the streams packed (a row is one row group of one stream, STREAM_COLUMN
and ROWS_COLUMN), and each stream's rows go to a Sink of their own, with a writer id of their
own, through a StreamWriter of their own, so that each is written exactly once as a one-stream
sink's."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from connectql.errors import PermanentError, RowsRefused, TableFailed
from connectql.toolkit.packed import ROWS_COLUMN, STREAM_COLUMN
from connectql.toolkit.spark import SECRET_PREFIX, Staged, StreamWriter, connector_of

ROUTES_KEY = "connectql.toolkit.routes"  # JSON [{"stream", "schema", "options"}], one per stream
THREADS = 4  # streams opened / committed at once (each may hold a connection of its own)


def route_id(writer_id: str, stream: str) -> str:
    """The writer id of one stream's writes (stable: the stream's name keys it)."""
    return writer_id + hashlib.sha1(stream.encode()).hexdigest()[:8]


def filled(options: dict[str, Any], stream: str, table: str, secret: set[str]) -> dict[str, Any]:
    """One stream's options: ${stream} (its name) and ${table} (the source table it carries)
    filled in in the text values, but not in the `secret` ones (never copied per stream)."""
    return {
        k: v.replace("${stream}", stream).replace("${table}", table)
        if isinstance(v, str) and k not in secret
        else v
        for k, v in options.items()
    }


def routed_options(routes: list[tuple[str, dict, dict[str, str]]]) -> dict[str, str]:
    """The writer options of a sink of several streams, from each stream's (name, Spark schema
    JSON, its one-stream writer options): the first's options, and each stream's but their
    secrets (the same for every stream, and kept under keys Spark redacts) under ROUTES_KEY."""
    own = [
        {
            "stream": name,
            "schema": schema,
            "options": {k: v for k, v in opts.items() if not k.startswith(SECRET_PREFIX)},
        }
        for name, schema, opts in routes
    ]
    return {**routes[0][2], ROUTES_KEY: json.dumps(own)}


class Routed(WriterCommitMessage):
    """What one task staged, by stream."""

    def __init__(self, parts: dict[str, Staged]):
        self.parts = parts


class RoutedWriter(DataSourceStreamArrowWriter):
    """The stream writers of a sink's streams, behind one Spark writer."""

    def __init__(self, options: dict[str, str]):
        base = {k: v for k, v in options.items() if k != ROUTES_KEY}
        writer = base.get("connectql.writer") or "default"
        made = []
        for r in json.loads(options[ROUTES_KEY]):
            opts = {**base, **r["options"], "connectql.writer": route_id(writer, r["stream"])}
            made.append((r["stream"], connector_of(opts), StructType.fromJson(r["schema"]), opts))
        self.sinks = [sink for _, sink, _, _ in made]
        self.writers: dict[str, StreamWriter] = {}
        with self._together():
            each(lambda m: self.writers.__setitem__(m[0], StreamWriter(*m[1:])), made)

    def _together(self):
        return type(self.sinks[0]).together(self.sinks)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Routed:
        ctx = TaskContext.get()
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId"))
        parts = {}
        with self._together():
            for stream, blobs in itertools.groupby(_rows(iterator), key=lambda r: r[0]):
                w = self.writers[stream]
                rows = _decoded((b for _, b in blobs), w.arrow_schema)
                parts[stream] = alone(stream, w.stage, batch_id, ctx.partitionId(), rows)
        return Routed(parts)

    def commit(self, messages: list[Routed], batchId: int) -> None:  # noqa: N803 (Spark's name)
        def one(item) -> None:
            alone(item[0], self.writers[item[0]].commit, item[1], batchId)

        with self._together():
            each(one, _by_stream(messages).items())

    def abort(self, messages: list[Routed], batchId: int) -> None:  # noqa: N803
        with self._together():
            for stream, staged in _by_stream(messages).items():
                self.writers[stream].abort(staged, batchId)


def alone(stream: str, call, *args):
    """call(*args) for one stream's writes; its rows refused (errors.tolerance = 'none') or
    another failure a restart cannot fix as TableFailed, which stops that stream alone: the
    query starts again without it and the sink's other streams go on (tables_failed)."""
    try:
        return call(*args)
    except (PermanentError, RowsRefused) as e:
        raise TableFailed(stream, str(e)) from None


def each(action, items) -> None:
    """`action` on each item, a few at a time; the first alone, so that what the items share
    (e.g. a progress table in one database) is made once, not raced."""
    items = list(items)
    if items:
        action(items[0])
    with ThreadPoolExecutor(min(THREADS, max(1, len(items) - 1))) as pool:
        list(pool.map(action, items[1:]))


def _by_stream(messages) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {}
    for m in messages:
        for stream, staged in (m.parts if m is not None else {}).items():
            out.setdefault(stream, []).append(staged)
    return out


def _rows(batches) -> Iterator[tuple[str, bytes]]:
    for rb in batches:
        yield from zip(
            rb.column(STREAM_COLUMN).to_pylist(), rb.column(ROWS_COLUMN).to_pylist(), strict=True
        )


def _decoded(blobs, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The rows of each blob in the stream's Arrow types and columns (a column added to the
    stream after a file was written is null in its rows, as Spark's file source reads it)."""
    for blob in blobs:
        rows = pa.ipc.open_stream(blob).read_all()
        arrays = [
            rows.column(f.name).cast(f.type)
            if f.name in rows.column_names
            else pa.nulls(rows.num_rows, f.type)
            for f in schema
        ]
        yield from pa.Table.from_arrays(arrays, schema=schema).to_batches()
