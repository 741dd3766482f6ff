"""A database sink of several streams (option `streams`): each stream's rows, read by
streamsread.py, go into a table of their own through a Target of their own (sink.py), with
a progress row of their own, so that each stream is written exactly once as a one-stream sink's."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from connectql.connectors.relational.lending import Lender
from connectql.connectors.relational.sink import SinkSettings, Staged, Target
from connectql.connectors.streamsread import ROWS_COLUMN, STREAM_COLUMN

ROUTES_OPTION = "connectql.routes"  # JSON [{"stream", "config", "schema"}], one per stream
THREADS = 4  # targets prepared / committed at once (each is its own connection)


def route_id(writer_id: str, stream: str) -> str:
    """The progress row of one stream's writes (stable: the stream's name keys it)."""
    return writer_id + hashlib.sha1(stream.encode()).hexdigest()[:8]


@dataclass
class Routed(WriterCommitMessage):
    parts: dict[str, Staged]  # stream -> what the task staged for it


class RoutedWriter(DataSourceStreamArrowWriter):
    """The Spark writer of a sink of several streams into `target` (a Target subclass)."""

    def __init__(self, target: type[Target], options: dict[str, str]):
        base = {k: v for k, v in options.items() if k != ROUTES_OPTION}
        self.targets: dict[str, Target] = {}
        self.lender = Lender()  # the targets share a few connections, not one each per step
        for r in json.loads(options[ROUTES_OPTION]):
            s = SinkSettings.from_options({**base, "config": r["config"]})
            s = replace(s, writer_id=route_id(s.writer_id, r["stream"]))
            self.targets[r["stream"]] = t = target(s, StructType.fromJson(r["schema"]))
            t.lender = self.lender
        with self._lending():
            _each(_ready, self.targets.values())

    @contextlib.contextmanager
    def _lending(self):
        try:
            yield
        finally:
            self.lender.close()

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Routed:
        ctx = TaskContext.get()
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId"))
        parts = {}
        with self._lending():
            for stream, blobs in itertools.groupby(_rows(iterator), key=lambda r: r[0]):
                t = self.targets[stream]
                rows = _decoded((b for _, b in blobs), to_arrow_schema(t.schema))
                parts[stream] = t.write(batch_id, ctx.partitionId(), rows)
        return Routed(parts)

    def commit(self, messages: list[Routed], batch_id: int) -> None:
        staged = _by_stream(messages).items()
        with self._lending():
            _each(lambda item: self.targets[item[0]].commit(item[1], batch_id), staged)

    def abort(self, messages: list[Routed], batch_id: int) -> None:
        with self._lending():
            for stream, staged in _by_stream(messages).items():
                self.targets[stream].abort(staged)


def _ready(t: Target) -> None:
    t.prepare(f"sink connector '{t.s.connector}'")
    t.ensure_progress_row()


def _each(action, items) -> None:
    """`action` on each item, a few at a time (each target has its own connection); the first
    alone, so that what the targets share (the progress table) is made once, not raced."""
    items = list(items)
    if items:
        action(items[0])
    with ThreadPoolExecutor(min(THREADS, max(1, len(items) - 1))) as pool:
        list(pool.map(action, items[1:]))


def _by_stream(messages) -> dict[str, list[Staged]]:
    out: dict[str, list[Staged]] = {}
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
