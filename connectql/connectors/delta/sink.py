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
import pyarrow.compute as pc

from connectql.config import Option
from connectql.toolkit import Sink, ValidationError
from connectql.toolkit.envelope import META_COLUMNS, OP, POS
from connectql.toolkit.messages import MESSAGE_COLUMNS

SINK_OPTIONS = (
    Option("path", required=True, doc="the Delta table's directory (created when missing)"),
    Option(
        "mode",
        "enum",
        choices=("append", "upsert"),
        doc="append: every row is added; upsert: a change stream applied by its key (updates,"
        " inserts, deletes); default: upsert when the stream has a key, else append",
    ),
    Option("key", doc="the columns a row is matched by in upsert mode (default: the stream's key)"),
    Option("partition.by", doc="columns to partition a table this sink creates by, a comma list"),
)


class DeltaSink(Sink):
    options = SINK_OPTIONS
    delivery = "exactly-once"
    several = True  # streams = 'shop_*' with path = '/lake/${table}': a table per stream

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.path = options["path"]

    def _mode(self) -> str:
        return self.options.get("mode") or ("upsert" if self._key() else "append")

    def _key(self) -> list[str]:
        given = self.options.get("key")
        return (
            [c.strip() for c in given.split(",") if c.strip()] if given else list(self.stream_key)
        )

    def _written(self, schema: pa.Schema) -> pa.Schema:
        """The table's columns: an upsert leaves the change and message columns out."""
        if self._mode() == "append":
            return schema
        left_out = {*META_COLUMNS, *MESSAGE_COLUMNS}
        return pa.schema([f for f in schema if f.name not in left_out])

    def check(self, schema: pa.Schema) -> None:
        where = f"delta sink at {self.path}"
        if self._mode() == "upsert":
            missing = [c for c in self._key() if c not in schema.names]
            if not self._key():
                raise ValidationError(f"{where}: mode = 'upsert' needs a key (key = '...')")
            if missing:
                raise ValidationError(
                    f"{where}: key column {', '.join(missing)} is not in the stream"
                )
        self._table(self._written(schema), where)

    def open(self, writer: str, schema: pa.Schema) -> None:
        self._table(self._written(schema), f"sink connector '{self.connector}'")

    def _table(self, schema: pa.Schema, where: str):
        """The Delta table, created from `schema` when missing; the columns the stream has
        and the table lacks (a source table that gained one) are added to it."""
        from deltalake import DeltaTable, Field
        from deltalake.exceptions import DeltaError, TableNotFoundError

        try:
            table = DeltaTable(self.path)
        except TableNotFoundError:
            parts = [
                c.strip() for c in (self.options.get("partition.by") or "").split(",") if c.strip()
            ]
            return DeltaTable.create(
                self.path, _plain(schema), partition_by=parts or None, mode="ignore"
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

        return DeltaTable(self.path).transaction_version(_app(writer))

    def write(self, writer: str, batch_id: int, data: pa.Table) -> None:
        from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

        done = CommitProperties(app_transactions=[Transaction(_app(writer), batch_id)])
        rows = _plain_table(data)
        if self._mode() == "append":
            write_deltalake(self.path, rows, mode="append", commit_properties=done)
            return
        changes = _last_per_key(rows, self._key())
        columns = self._written(rows.schema).names
        on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in self._key())
        is_delete = "s.`__op` = 'd'" if OP in changes.schema.names else "false"
        source = changes.select([*columns, *([OP] if OP in changes.schema.names else [])])
        (
            DeltaTable(self.path)
            .merge(source, on, source_alias="s", target_alias="t", commit_properties=done)
            .when_matched_delete(predicate=is_delete)
            .when_matched_update_all(predicate=f"NOT ({is_delete})", except_cols=[OP])
            .when_not_matched_insert_all(predicate=f"NOT ({is_delete})", except_cols=[OP])
            .execute()
        )


def _app(writer: str) -> str:
    return f"connectql-{writer}"


def _last_per_key(rows: pa.Table, key: list[str]) -> pa.Table:
    """Each key's last change of the batch (by __pos, else row order)."""
    order = "__pos_order" if POS in rows.schema.names else "__row"
    numbered = rows.append_column("__row", pa.array(range(rows.num_rows), pa.int64()))
    if POS in rows.schema.names:
        ranks = pc.rank(numbered.column(POS), sort_keys="ascending", tiebreaker="first")
        numbered = numbered.append_column(order, ranks)
    last = numbered.group_by(key, use_threads=False).aggregate([(order, "max")])
    picked = numbered.join(
        last.rename_columns([*key, order]), keys=[*key, order], join_type="inner"
    )
    return picked.drop_columns([c for c in ("__row", "__pos_order") if c in picked.schema.names])


def _plain(schema: pa.Schema) -> pa.Schema:
    """The schema Delta takes: field metadata (a declared type's comment) left out."""
    return pa.schema([pa.field(f.name, f.type, f.nullable) for f in schema])


def _plain_table(data: pa.Table) -> pa.Table:
    return data.cast(_plain(data.schema))
