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

import contextlib
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
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
from connectql.toolkit import Retryable, Sink, ValidationError

WRITER, BATCH = "connectql.writer", "connectql.batch"  # a snapshot summary's properties
_POOLED = threading.Lock()


@contextlib.contextmanager
def pooled() -> Iterator[None]:
    """pyiceberg's work inside, on a thread pool of its own that is shut down after (pyiceberg
    keeps one pool for the process's life otherwise, whose threads outlive the connector).
    One at a time in a process: the pool is pyiceberg's global."""
    from pyiceberg.utils.concurrent import ExecutorFactory

    with _POOLED, ThreadPoolExecutor(ExecutorFactory.max_workers()) as pool:
        ExecutorFactory._instance, ExecutorFactory._instance_pid = pool, os.getpid()
        try:
            yield
        finally:
            ExecutorFactory._instance = None


SINK_OPTIONS = (
    Option(
        "catalog.type",
        "enum",
        "sql",
        choices=("sql", "rest"),
        doc="sql: a SQL catalog (a table of SQLite or PostgreSQL); rest: an Iceberg REST catalog",
    ),
    Option(
        "catalog.uri",
        required=True,
        doc="sql: the catalog's SQLAlchemy URL, e.g. 'sqlite:////data/lake/catalog.db' (one"
        " machine) or 'postgresql+psycopg://user@host/db' (shared); rest: the catalog's URL,"
        " e.g. 'http://127.0.0.1:8181'",
    ),
    Option(
        "catalog.name",
        default="connectql",
        doc="the catalog's name in the SQL catalog's tables (a reader opens it by this name)",
    ),
    Option(
        "catalog.credential",
        secret=True,
        doc="rest: OAuth2 client credentials 'client_id:client_secret', exchanged for a token"
        " at the catalog (a secret: never shown)",
    ),
    Option("catalog.token", secret=True, doc="rest: a bearer token (a secret: never shown)"),
    Option(
        "warehouse",
        doc="where the tables' files go: a directory (a path or file:// URL) or an s3:// URL"
        " (then endpoint, region and keys reach its server); required for a SQL catalog, for a"
        " REST catalog the warehouse it names (absent: its default)",
    ),
    Option(
        "table",
        required=True,
        doc="namespace.name of the table (created from the stream's schema when missing)",
    ),
    *MODE_OPTIONS,
    *COMMIT_OPTIONS,
    *S3_OPTIONS,
)


class IcebergSink(Sink):
    options = SINK_OPTIONS
    delivery = "exactly-once"
    several = True  # streams = 'shop_*' with table = 'shop.${table}': a table per stream

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.name = options["table"]
        if "." not in self.name:
            raise ValidationError(f"iceberg sink: table must be namespace.name, not {self.name!r}")

    @property
    def layout(self) -> Layout:
        return Layout(self.options, self.stream_key)

    def _catalog(self):
        options, kind = self.options, self.options.get("catalog.type") or "sql"
        warehouse = options.get("warehouse") or ""
        files = Store(options, warehouse, "iceberg sink").iceberg()
        name = options.get("catalog.name") or "connectql"
        if kind == "rest":
            from pyiceberg.catalog.rest import RestCatalog

            uri = options["catalog.uri"].rstrip("/")
            given = {
                "credential": options.get("catalog.credential"),
                "token": options.get("catalog.token"),
                "warehouse": warehouse,
            }
            if given["credential"]:  # the REST spec's token endpoint, said (else a warning)
                given["oauth2-server-uri"] = f"{uri}/v1/oauth/tokens"
            return RestCatalog(name, uri=uri, **{k: v for k, v in given.items() if v}, **files)
        from pyiceberg.catalog.sql import SqlCatalog

        if not warehouse:
            raise ValidationError("iceberg sink: a SQL catalog needs warehouse = '...'")
        if "://" not in warehouse:
            warehouse = f"file://{warehouse}"
        return SqlCatalog(name, uri=options["catalog.uri"], warehouse=warehouse, **files)

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

    @contextlib.contextmanager
    def _calls(self) -> Iterator[None]:
        """pyiceberg's work, pooled, its catalog's refusals and absences as connectql's errors:
        refused credentials a ValidationError, a catalog that does not answer Retryable."""
        import requests
        from pyiceberg import exceptions as ice

        where = f"iceberg sink: the catalog at {self.options['catalog.uri']}"
        try:
            with pooled():
                yield
        except (ice.UnauthorizedError, ice.ForbiddenError, ice.OAuthError) as e:
            raise ValidationError(f"{where} refused the credentials: {e}") from None
        except (requests.ConnectionError, ice.ServiceUnavailableError, ice.ServerError) as e:
            raise Retryable(f"{where} does not answer: {e}") from None

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
        """The table rewritten in one overwrite (pyiceberg has no rewrite of data files): its
        rows read whole, written as few large files, the snapshot marked with the batch just
        committed so that last_batch reads the same after it."""
        table = self._catalog().load_table(self.name)
        rows = table.scan().to_arrow()
        table.overwrite(rows, snapshot_properties={WRITER: writer, BATCH: str(batch_id)})

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
