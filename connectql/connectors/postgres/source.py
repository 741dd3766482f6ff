"""The PostgreSQL source's Spark reader: the shared table reader (tablereader) with PostgreSQL's
connection, table description and dialect, and for `cdc` a logical replication slot as its
change log (positions are LSNs, under the offset key "lsn")."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace

import psycopg
import pyarrow as pa

from connectql.connectors.postgres import cdc, walstream
from connectql.connectors.postgres.client import connect, qualified
from connectql.connectors.postgres.db import PgDb
from connectql.connectors.postgres.tables import describe_source
from connectql.connectors.relational import arrowread, polling
from connectql.connectors.relational.bounds import Bounds
from connectql.connectors.relational.tablereader import (
    Range,
    Table,
    TableConfig,
    TableStreamReader,
    Window,
)


@dataclass(frozen=True)
class ReaderConfig(TableConfig):
    """A PostgreSQL source's settings: the table reader's plus its replication slot."""

    slot: str = ""
    checkpoint: str = ""  # the query's checkpoint directory (the change log spool is beside)

    @classmethod
    def from_options(cls, options: dict[str, str]) -> ReaderConfig:
        cfg = super().from_options(options)
        fill = {"checkpoint": options.get("connectql.checkpoint", "")}
        if not cfg.slot:
            fill["slot"] = default_slot(cfg.connector)
        return replace(cfg, **fill)

    def relation(self) -> str:
        if self.query:
            return f"({self.query}) q"
        return qualified(self.schema, self.table).as_string(None)


def default_slot(connector: str) -> str:
    """connectql_<connector>, in the characters a slot name may hold."""
    return "connectql_" + re.sub(r"[^a-z0-9_]", "_", connector.lower())[:50]


class PostgresStreamReader(TableStreamReader):
    """cdc: while streaming, a walstream.Tailer holds the slot and spools changes; each batch's
    range is read from the spool ('spool' partitions). A run = 'once' source peeks the slot
    over SQL to its target instead ('changes' partitions)."""

    config_class = ReaderConfig
    LOG_KEY = "lsn"
    UNREADABLE = (*TableStreamReader.UNREADABLE, psycopg.errors.DataError)
    _tailer: walstream.Tailer | None = None

    def connect(self):
        return connect(self.cfg.connection, autocommit=True)

    def is_closed(self, conn) -> bool:
        return conn.closed

    def describe(self, conn, table: str | None) -> Table:
        return describe_source(conn, self.cfg.for_table(table))

    def dialect(self, conn, table: Table) -> PgDb:
        address = arrowread.url("postgresql", self.cfg.connection, 5432)
        read_s = Bounds.of(self.cfg.connection).read_s
        return PgDb(conn, {n: pg for n, pg, _s in table.columns}, address, read_s)

    def relation(self, table: str | None) -> str:
        return self.cfg.for_table(table).relation()

    def log_start(self, conn) -> int:
        return cdc.ensure_slot(conn, self.cfg.slot, self.cfg.schema, self.tables)

    def log_now(self, conn) -> int:
        """While streaming: as far as the tailer has spooled (a batch never ends beyond)."""
        if self.available_now or self._tailer is None:
            return cdc.current_lsn(conn)
        return self._tailer.seen

    def log_behind(self, conn, position: int) -> int:
        """While streaming, from the end of WAL the server last told the tailer: no query, so
        a server that hangs holds no batch up for a lag."""
        if self.available_now or self._tailer is None:
            return max(0, cdc.current_lsn(conn) - position)
        return max(0, self._tailer.server_end - position)

    def _captured(self) -> set[str]:
        return {cdc.decoded_name(self.cfg.schema, t) for t in self.tables}

    def _spool(self):
        return walstream.spool_dir(self.cfg.checkpoint, self.cfg)

    def _tailing(self, start: int) -> walstream.Tailer:
        """The tailer following the slot from `start` or before. A tailer that failed (its
        connection lost, its server silent) fails the source with its error, so that the
        connector shows the trouble and is restarted with backoff."""
        failed = self._tailer is not None and self._tailer.error is not None
        if failed:
            tailer, self._tailer = self._tailer, None
            tailer.close()
            raise tailer.error
        if self._tailer is None or not self._tailer.covers(start):
            if self._tailer is not None:
                self._tailer.close()
            self._tailer = walstream.Tailer(
                self.cfg, self._spool(), start, self._captured(), self.cfg.batch_rows
            )
        return self._tailer

    def log_scan(self, conn, start: int, target: int | None) -> Window:
        if target is None:
            return self._tailing(start).window(start)
        return cdc.scan(conn, self.cfg.slot, self.cfg.batch_rows, self._captured(), target)

    def log_done(self, conn, position: int) -> None:
        if self.available_now:
            cdc.advance(conn, self.cfg.slot, position)
        else:
            self._tailing(position).confirm(position)

    def partitions(self, start: dict, end: dict) -> list[Range]:
        parts = super().partitions(start, end)
        if self.available_now or not any(getattr(p, "kind", "") == "changes" for p in parts):
            return parts
        self._tailing(start[self.LOG_KEY])  # a batch replayed after a restart: spool it again
        return [replace(p, kind="spool") if p.kind == "changes" else p for p in parts]

    def _read(self, conn, part: Range, fast: bool = True):
        if part.kind == "rows" and self.cdc and not self.meta(conn, part.table).key:
            yield from self._keyless_snapshot(conn, part)
            return
        if part.kind != "spool":
            yield from super()._read(conn, part, fast)
            return
        keys = {t: self.meta(conn, t).key for t in self.tables}
        txns = walstream.read_spool(self._spool(), part.log_from, part.log_to)
        for table, batch in self._changes(keys, txns):
            yield self._shape(table, batch)

    def _changes(self, keys: dict, txns) -> Iterator[tuple[str, pa.RecordBatch]]:
        """(table, change rows), less those a keyless table's snapshot already read."""
        seen = {
            cdc.decoded_name(self.cfg.schema, t): s
            for t, s in walstream.snapshots(self._spool()).items()
        }

        def in_snapshot(table: str, xid: int) -> bool:
            return table in seen and walstream.visible(xid, seen[table])

        yield from cdc.change_batches(
            self.cfg, self.live_schemas, keys, txns, in_snapshot, self.tolerant, self.cannot_read
        )

    def _keyless_snapshot(self, conn, part: Range) -> Iterator[pa.RecordBatch]:
        """A table without a primary key is read whole in one transaction whose snapshot is
        kept beside the checkpoint: its changes from transactions that snapshot saw are left
        out, so no row arrives twice."""
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        snapshot = conn.execute("SELECT pg_current_snapshot()::text").fetchone()[0]
        name = self.cfg.for_table(part.table).table
        walstream.save_snapshot(self._spool(), name, snapshot)
        # on `conn`, in its transaction's snapshot: no connectorx
        db = PgDb(conn, {n: pg for n, pg, _s in self.meta(conn, part.table).columns})
        for batch in polling.read_range(db, self._src(part.table), [], None, None):
            batch = self.with_snapshot_columns(batch, part.table, part.log_from)
            yield self._shape(part.table, batch)
        conn.execute("COMMIT")

    def stop(self) -> None:
        if self._tailer is not None:
            self._tailer.close()
        super().stop()

    def log_read(self, conn, part: Range) -> Iterator[tuple[str, pa.RecordBatch]]:
        keys = {t: self.meta(conn, t).key for t in self.tables}
        txns = cdc.transactions(conn, self.cfg.slot, part.log_from, part.log_to)
        yield from self._changes(keys, txns)

    def with_snapshot_columns(self, batch: pa.RecordBatch, table, position: int):
        cfg = self.cfg.for_table(table)
        return cdc.with_snapshot_columns(batch, cfg, self.schemas[table], position)
