"""What writes a chained sink's rides (ride.py): a database sink's Target, or any exactly-once
toolkit sink, behind the four calls a ride makes (open, committed, write in a task, commit)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.types import StructType

TOOLKIT = "toolkit"  # the spec of a toolkit sink's rider (its class is in the options)


def rider_spec(writer) -> str | None:
    """What writes the rides of a sink with WriterSpec `writer`: a database sink's Target
    ("module:Class"), TOOLKIT for an exactly-once toolkit sink; None: it cannot ride (a sink
    that cannot tell which batches it has written would write a ride's batch twice)."""
    from connectql.connectors.registry import load
    from connectql.connectors.relational.datasource import TableDataSource
    from connectql.runtime.session import python_data_sources
    from connectql.toolkit.spark import CLASS_KEY, FORMAT

    if writer.format == FORMAT:
        return TOOLKIT if load(writer.options[CLASS_KEY]).delivery == "exactly-once" else None
    for ds in python_data_sources():
        if issubclass(ds, TableDataSource) and ds.format == writer.format:
            return ds.target
    return None


def make_rider(spec: str, options: dict[str, str], schema: StructType):
    """The rider of `spec` (rider_spec) writing for the writer id in `options`."""
    if spec == TOOLKIT:
        return ToolkitRider(options, schema)
    from connectql.connectors.registry import load
    from connectql.connectors.relational.sink import SinkSettings

    return TargetRider(load(spec)(SinkSettings.from_options(options), schema))


class TargetRider:
    """A database sink's Target as a rider."""

    def __init__(self, target):
        self.target = target

    def open(self, where: str) -> None:
        self.target.prepare(where)
        self.target.ensure_progress_row()

    def committed(self) -> int:
        with self.target.session(autocommit=True) as conn:
            return self.target.committed(conn)

    def write(self, batch_id: int, task: int, batches: Iterator[pa.RecordBatch]):
        return self.target.write(batch_id, task, batches)

    def commit(self, messages: list, batch_id: int) -> None:
        self.target.commit(messages, batch_id)


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
