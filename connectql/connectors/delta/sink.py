"""The delta sink: a stream into a Delta Lake table through delta-rs (`deltalake`), no Spark jar.
Each micro-batch is one Delta commit that carries an application transaction (app id
`connectql-<writer>`, version = the batch id), Delta's own idempotent-write mark, as Spark's Delta
streaming sink uses it: a batch Spark replays after a crash finds its version in the table
(`last_batch`) and is skipped, and the data and the mark are committed together or not at all.

`mode = 'append'` adds every row; `mode = 'upsert'` (the default for a stream with a key)
applies a change stream by its key in one MERGE per batch: each key's last change of the batch
(by __pos) updates or inserts its row, or deletes it (__op = 'd'). The change and message
columns are not written in upsert mode."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from connectql.config import Option
from connectql.connectors.lake import (
    COMMIT_OPTIONS,
    MODE_OPTIONS,
    S3_OPTIONS,
    Layout,
    Store,
    commit_interval,
    compacts_after,
)
from connectql.toolkit import Sink, ValidationError
from connectql.toolkit.envelope import OP

SINK_OPTIONS = (
    Option(
        "path",
        required=True,
        doc="the Delta table's directory (created when missing): a local path, or an s3:// URL"
        " (then endpoint, region and keys reach its server)",
    ),
    *MODE_OPTIONS,
    Option("partition.by", doc="columns to partition a table this sink creates by, a comma list"),
    *COMMIT_OPTIONS,
    *S3_OPTIONS,
)


class DeltaSink(Sink):
    options = SINK_OPTIONS
    delivery = "exactly-once"
    several = True  # streams = 'shop_*' with path = '/lake/${table}': a table per stream
    target_options = {"path": ""}

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.path = options["path"]
        self.storage = Store(options, self.path, "delta sink").delta()

    @property
    def layout(self) -> Layout:
        return Layout(self.options, self.stream_key)

    def flush_interval_ms(self) -> int | None:
        return commit_interval(self.options, "delta sink")

    def check(self, schema: pa.Schema) -> None:
        where = f"delta sink at {self.path}"
        compacts_after(self.options, 0, where)
        self.layout.check(schema, where)
        self._table(self.layout.written(schema), where)

    def open(self, writer: str, schema: pa.Schema) -> None:
        self._table(self.layout.written(schema), f"sink connector '{self.connector}'")

    def _table(self, schema: pa.Schema, where: str):
        """The Delta table, created from `schema` when missing; the columns the stream has
        and the table lacks (a source table that gained one) are added to it."""
        from deltalake import DeltaTable, Field
        from deltalake.exceptions import DeltaError, TableNotFoundError

        try:
            table = DeltaTable(self.path, storage_options=self.storage)
        except TableNotFoundError:
            parts = [
                c.strip() for c in (self.options.get("partition.by") or "").split(",") if c.strip()
            ]
            return DeltaTable.create(
                self.path,
                schema,
                partition_by=parts or None,
                mode="ignore",
                storage_options=self.storage,
            )
        have = set(pa.schema(table.schema().to_arrow()).names)
        missing = [pa.field(f.name, f.type) for f in schema if f.name not in have]
        if missing:
            try:
                table.alter.add_columns([Field.from_arrow(f) for f in missing])
            except (DeltaError, ValueError) as e:
                names = ", ".join(f.name for f in missing)
                raise ValidationError(
                    f"{where}: cannot add {names} to the Delta table at {self.path}: {e}"
                ) from None
        return table

    def last_batch(self, writer: str) -> int | None:
        from deltalake import DeltaTable

        return DeltaTable(self.path, storage_options=self.storage).transaction_version(_app(writer))

    def write(self, writer: str, batch_id: int, data: pa.Table) -> None:
        from deltalake import DeltaTable

        self._write(writer, batch_id, data)
        if compacts_after(self.options, batch_id, "delta sink"):
            # its own commit, after the batch's: the batch's mark stays in the table's state
            DeltaTable(self.path, storage_options=self.storage).optimize.compact()

    def _write(self, writer: str, batch_id: int, data: pa.Table) -> None:
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

        done = CommitProperties(app_transactions=[Transaction(_app(writer), batch_id)])
        layout = self.layout
        if layout.mode == "append":
            rows = data.cast(layout.written(data.schema))
            write_deltalake(
                self.path,
                rows,
                mode="append",
                commit_properties=done,
                storage_options=self.storage,
            )
            return
        last, _live = layout.changes(data)
        columns = layout.written(data.schema).names
        on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in layout.key)
        has_op = OP in last.schema.names
        is_delete = "s.`__op` = 'd'" if has_op else "false"
        source = last.select([*columns, *([OP] if has_op else [])])
        (
            DeltaTable(self.path, storage_options=self.storage)
            .merge(source, on, source_alias="s", target_alias="t", commit_properties=done)
            .when_matched_delete(predicate=is_delete)
            .when_matched_update_all(predicate=f"NOT ({is_delete})", except_cols=[OP])
            .when_not_matched_insert_all(predicate=f"NOT ({is_delete})", except_cols=[OP])
            .execute()
        )


def _app(writer: str) -> str:
    return f"connectql-{writer}"
