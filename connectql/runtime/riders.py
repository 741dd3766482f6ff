"""What writes a chained sink's rides (ride.py): any exactly-once toolkit sink (the database
sinks among them), behind the four calls a ride makes (open, committed, write in a task, commit)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.types import StructType

TOOLKIT = "toolkit"  # the spec of a toolkit sink's rider (its class is in the options)


def rider_spec(writer) -> str | None:
    """What writes the rides of a sink with WriterSpec `writer`: TOOLKIT for an exactly-once
    toolkit sink of one stream; None: it cannot ride (a sink that cannot tell which batches it
    has written would write a ride's batch twice; a sink of several streams reads them packed)."""
    from connectql.connectors.registry import load
    from connectql.toolkit.routed import ROUTES_KEY
    from connectql.toolkit.spark import CLASS_KEY, FORMAT

    if writer.format != FORMAT or ROUTES_KEY in writer.options:
        return None
    return TOOLKIT if load(writer.options[CLASS_KEY]).delivery == "exactly-once" else None


def make_rider(spec: str, options: dict[str, str], schema: StructType):
    """The rider of `spec` (rider_spec) writing for the writer id in `options`."""
    return ToolkitRider(options, schema)


class ToolkitRider:
    """An exactly-once toolkit sink as a rider: a task stages its rows (stage_batches), the
    driver commits them as the sink's own query would (the toolkit's StreamWriter: a batch the
    sink has is skipped, rejected rows become dead letters)."""

    def __init__(self, options: dict[str, str], schema: StructType):
        from connectql.toolkit.spark import connector_of, told

        self.options, self.schema = options, schema
        self.sink = told(connector_of(options), options)
        self.writer_id = options["connectql.writer"]
        self.stream_writer = None  # the driver's, made by open

    def open(self, where: str) -> None:
        from connectql.toolkit.spark import StreamWriter

        self.stream_writer = StreamWriter(self.sink, self.schema, self.options)

    def committed(self) -> int:
        done = self.sink.last_batch(self.writer_id)
        return -1 if done is None else done

    def write(self, batch_id: int, task: int, batches: Iterator[pa.RecordBatch]):
        from connectql.toolkit.spark import Staged, arrow_schema

        counted = [0]

        def rows() -> Iterator[pa.RecordBatch]:
            for rb in batches:
                counted[0] += rb.num_rows
                yield rb

        reader = pa.RecordBatchReader.from_batches(arrow_schema(self.schema), rows())
        value = self.sink.stage_batches(self.writer_id, batch_id, task, reader)
        return Staged(value, counted[0])

    def commit(self, messages: list, batch_id: int) -> None:
        self.stream_writer.commit(messages, batch_id)
