"""The iceberg sink: a stream into an Apache Iceberg table through pyiceberg (no Spark jar), its
catalog a SQL catalog (`catalog.uri`: SQLite for one machine, PostgreSQL for shared use) or an
Iceberg REST catalog (`catalog.type = 'rest'`), its files on a local path or S3. Each
micro-batch is one Iceberg transaction whose snapshots record the writer and the batch id in their
summary (`connectql.writer`, `connectql.batch`): a batch Spark replays after a crash finds its id
in the table's snapshots (`last_batch`) and is skipped; the data and the record are committed
together or not at all.

`mode = 'append'` adds every row; `mode = 'upsert'` applies a change stream by its key: the rows
of each key changed in the batch are deleted and each key's last change (by __pos) that is not a
delete is appended, in one transaction (copy-on-write)."""

from __future__ import annotations

import warnings
from typing import Any

import pyarrow as pa

from connectql.config import Option
from connectql.connectors.iceberg.catalog import CATALOG_OPTIONS, calls, catalog_of
from connectql.connectors.lake import (
    COMMIT_OPTIONS,
    MODE_OPTIONS,
    Layout,
    commit_interval,
    compacts_after,
)
from connectql.toolkit import Sink, ValidationError

WRITER, BATCH = "connectql.writer", "connectql.batch"  # a snapshot summary's properties

SINK_OPTIONS = (
    *CATALOG_OPTIONS,
    Option(
        "table",
        required=True,
        doc="namespace.name of the table (created from the stream's schema when missing)",
    ),
    *MODE_OPTIONS,
    *COMMIT_OPTIONS,
)


class IcebergSink(Sink):
    options = SINK_OPTIONS
    delivery = "exactly-once"
    several = True  # streams = 'shop_*' with table = 'shop.${table}': a table per stream
    target_options = {"table": ""}

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.name = options["table"]
        if "." not in self.name:
            raise ValidationError(f"iceberg sink: table must be namespace.name, not {self.name!r}")

    @property
    def layout(self) -> Layout:
        return Layout(self.options, self.stream_key)

    def _catalog(self):
        return catalog_of(self.options, "iceberg sink")

    def flush_interval_ms(self) -> int | None:
        return commit_interval(self.options, "iceberg sink")

    def check(self, schema: pa.Schema) -> None:
        where = f"iceberg sink into {self.name}"
        compacts_after(self.options, 0, where)
        self.layout.check(schema, where)
        with self._calls():
            self._table(self.layout.written(schema), where)

    def open(self, writer: str, schema: pa.Schema) -> None:
        with self._calls():
            self._table(self.layout.written(schema), f"sink connector '{self.connector}'")

    def _calls(self):
        return calls(self.options, "iceberg sink")

    def _table(self, schema: pa.Schema, where: str):
        """The table, created (with its namespace) from `schema` when missing; columns the
        stream has and the table lacks are added by Iceberg schema evolution."""
        from pyiceberg.exceptions import NoSuchTableError

        catalog = self._catalog()
        try:
            table = catalog.load_table(self.name)
        except NoSuchTableError:
            catalog.create_namespace_if_not_exists(self.name.rsplit(".", 1)[0])
            return catalog.create_table_if_not_exists(self.name, schema=schema)
        have = {f.name for f in table.schema().fields}
        missing = [f for f in schema if f.name not in have]
        if missing:
            with table.update_schema() as update:
                update.union_by_name(pa.schema(missing))
        return catalog.load_table(self.name)

    def last_batch(self, writer: str) -> int | None:
        with self._calls():
            table = self._catalog().load_table(self.name)
        found = [
            int(s.summary.additional_properties[BATCH])
            for s in table.snapshots()
            if s.summary is not None and s.summary.additional_properties.get(WRITER) == writer
        ]
        return max(found) if found else None

    def write(self, writer: str, batch_id: int, data: pa.Table) -> None:
        with self._calls():
            self._write(writer, batch_id, data)
            if compacts_after(self.options, batch_id, "iceberg sink"):
                self._compact(writer, batch_id)

    def _compact(self, writer: str, batch_id: int) -> None:
        """The table rewritten as one OVERWRITE snapshot (pyiceberg has no rewrite of data
        files): every data file of the current snapshot replaced by files of its rows read
        whole, the snapshot marked with the batch just committed so that last_batch reads the
        same after it; a reader of appends (the iceberg source) skips it. The sink writes no
        delete files (copy-on-write), so the data files are the whole table."""
        from pyiceberg.io.pyarrow import _dataframe_to_data_files  # what Transaction.append uses

        table = self._catalog().load_table(self.name)
        tasks = list(table.scan().plan_files())
        if len(tasks) < 2:
            return
        rows = table.scan().to_arrow()
        marks = {WRITER: writer, BATCH: str(batch_id)}
        with table.transaction() as tx, tx.update_snapshot(marks).overwrite() as rewrite:
            for task in tasks:
                rewrite.delete_data_file(task.file)
            for written in _dataframe_to_data_files(
                table_metadata=tx.table_metadata,
                write_uuid=rewrite.commit_uuid,
                df=rows,
                io=table.io,
            ):
                rewrite.append_data_file(written)

    def _write(self, writer: str, batch_id: int, data: pa.Table) -> None:
        marks = {WRITER: writer, BATCH: str(batch_id)}
        layout = self.layout
        table = self._catalog().load_table(self.name)
        columns = table.schema().as_arrow()
        with table.transaction() as tx:
            if layout.mode == "append":
                rows = data.cast(layout.written(data.schema))
                tx.append(_as(rows, columns), snapshot_properties=marks)
                return
            last, live = layout.changes(data)
            with warnings.catch_warnings():  # a batch of new keys deletes nothing: no news
                warnings.filterwarnings("ignore", "Delete operation did not match any records")
                tx.delete(_keys_in(last, layout.key), snapshot_properties=marks)
            if live.num_rows:
                tx.append(_as(live, columns), snapshot_properties=marks)


def _as(rows: pa.Table, columns: pa.Schema) -> pa.Table:
    """The rows as the table holds them: its columns, in its order and types (a column the
    rows lack: NULL)."""
    n = rows.num_rows
    arrays = [
        rows.column(f.name).cast(f.type) if f.name in rows.schema.names else pa.nulls(n, f.type)
        for f in columns
    ]
    return pa.Table.from_arrays(arrays, schema=columns)


def _keys_in(rows: pa.Table, key: list[str]):
    """A row filter matching the rows' keys."""
    from pyiceberg.expressions import And, EqualTo, In, Or

    if len(key) == 1:
        return In(key[0], rows.column(key[0]).to_pylist())
    matches = [And(*(EqualTo(k, r[k]) for k in key)) for r in rows.select(key).to_pylist()]
    return matches[0] if len(matches) == 1 else Or(*matches)
