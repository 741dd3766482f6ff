"""TableSink: a database table as a toolkit Sink (PostgreSQL, MySQL). The exactly-once protocol
is the dialect's Target (sink.py): a task stages its rows (or inserts them straight into the
target), the driver's commit merges them and records the batch id in one transaction; this
module gives it the toolkit's contract (options, rejected rows, several streams) and writes
nested columns as JSON (nested.py)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructField, StructType

from connectql.connectors.relational.bounds import check_bounds, endpoint
from connectql.connectors.relational.lending import Lender
from connectql.connectors.relational.nested import as_written, written
from connectql.connectors.relational.sink import SinkSettings, Target, sink_mode, unread_columns
from connectql.errors import PlanError
from connectql.toolkit.sink import Sink

COMMENT = b"comment"  # the field metadata of a DDL COMMENT (a source's declared type)


class TableSink(Sink):
    """A database gives its `target` (Target subclass), `database` (its name in messages),
    `place` (as its TableSource's) and `connection_config`."""

    delivery = "exactly-once"
    rejects = True
    several = True
    target_options = {"table": ""}
    target: ClassVar[type[Target]]
    database: ClassVar[str]
    #: the option naming the tables' container, and split('c.t', default) -> (container, table)
    place: ClassVar[tuple[str, Callable]]

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        check_bounds(self.options, self.where)
        self.lender: Lender | None = None  # several streams: connections lent for a round
        self._target: Target | None = None

    @staticmethod
    def connection_config(options: dict[str, Any]) -> dict:
        raise NotImplementedError

    def table_place(self) -> tuple[str, str]:
        """(container, table) of the target table its options name."""
        key, split = self.place
        return split(self.options["table"], self.options[key])

    @property
    def where(self) -> str:
        return f"{self.database} sink into {'.'.join(self.table_place())}"

    def settings(self, writer: str = "") -> SinkSettings:
        """The Target's settings, for `writer` (mode and key need the stream's key)."""
        opts = self.options
        mode, key = sink_mode(opts, self.stream_key)
        delete = opts.get("delete.enabled")
        if delete and mode == "append":
            raise PlanError(
                "delete.enabled = true needs mode = 'upsert': mode = 'append' inserts every row,"
                " a delete (__op = 'd') too, since it has no key to delete by"
            )
        schema, table = self.table_place()
        return SinkSettings(
            connection=self.connection_config(opts),
            schema=schema,
            table=table,
            mode=mode,
            key=key,
            delete_enabled=(mode == "upsert") if delete is None else bool(delete),
            auto_create=opts["auto.create"],
            auto_evolve=opts["auto.evolve"],
            writer_id=writer,
            connector=self.connector,
            tolerant=opts.get("errors.tolerance") == "all",
            epoch=self.epoch or 0,
        )

    def _made(self, writer: str, schema: pa.Schema | None) -> Target:
        """The Target for `writer` of rows of `schema` (None: only asked its progress)."""
        t = self.target(self.settings(writer), spark_struct(as_written(schema)))
        t.lender = self.lender
        return t

    # ---------------------------------------------------------------- the driver
    def unread_columns(self) -> Sequence[str]:
        return unread_columns(self.settings().mode)

    def endpoint(self) -> str | None:
        return endpoint(self.connection_config(self.options))

    def check(self, schema: pa.Schema) -> None:
        self._made("", schema).prepare(self.where)

    def open(self, writer: str, schema: pa.Schema) -> None:
        self._target = self._made(writer, schema)
        self._target.prepare(f"sink connector '{self.connector}'")
        self._target.ensure_progress_row()

    def last_batch(self, writer: str) -> int | None:
        t = self._target if self._target is not None else self._made(writer, None)
        t.lender = self.lender
        with t.session(autocommit=True) as conn:
            done = t.committed(conn)
        return None if done < 0 else done

    def commit(self, writer: str, batch_id: int, staged: list[Any]) -> None:
        self._opened().left_out = self.rejected
        self._target.commit(staged, batch_id)

    def abort(self, writer: str, batch_id: int, staged: list[Any]) -> None:
        self._opened().abort(staged, batch_id)

    # ---------------------------------------------------------------- a task
    def stage_batches(self, writer: str, batch_id: int, task: int, rows: pa.RecordBatchReader):
        if self._target is None:  # a ride's task (runtime/riders.py) has a sink not opened
            self._target = self._made(writer, rows.schema)
        return self._opened().write(batch_id, task, (written(b) for b in rows))

    def _opened(self) -> Target:
        if self._target is None:
            raise RuntimeError(f"{self.where}: used before open")
        self._target.lender = self.lender
        return self._target

    # ---------------------------------------------------------------- several streams
    @classmethod
    @contextlib.contextmanager
    def together(cls, sinks: Sequence[Sink]) -> Iterator[None]:
        """The sinks of several streams share a few connections for a round, not one each per
        step (1,000 streams would open thousands at every start and batch)."""
        lender = Lender()
        for s in sinks:
            s.lender = lender
        try:
            yield
        finally:
            for s in sinks:
                s.lender = None
            lender.close()


def spark_struct(schema: pa.Schema | None) -> StructType:
    """The Spark schema of the rows (as the Target's dialects read types), each field's DDL
    COMMENT (a source's declared type) back in its metadata."""
    if schema is None:
        return StructType([])
    struct = from_arrow_schema(schema, prefer_timestamp_ntz=True)
    fields = []
    for f, a in zip(struct.fields, schema, strict=True):
        note = (a.metadata or {}).get(COMMENT)
        meta = {"comment": note.decode()} if note else {}
        fields.append(StructField(f.name, f.dataType, f.nullable, meta))
    return StructType(fields)
