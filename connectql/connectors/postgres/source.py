"""The PostgreSQL source: the shared table source (tablereader) with PostgreSQL's options,
connection, table description and dialect, and for `cdc` a logical replication slot as its
change log (positions are LSNs, under the offset key "lsn")."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import psycopg
import pyarrow as pa

from connectql.connectors.postgres import cdc, walstream
from connectql.connectors.postgres.client import connect, connection_config, qualified
from connectql.connectors.postgres.db import PgDb
from connectql.connectors.postgres.options import SOURCE_OPTIONS, PostgresTables
from connectql.connectors.postgres.pgoutput import Decoder
from connectql.connectors.postgres.tables import count, describe_source, discover
from connectql.connectors.relational import arrowread, polling
from connectql.connectors.relational.bounds import BOUND_OPTIONS, Bounds
from connectql.connectors.relational.tablereader import (
    Group,
    Range,
    Table,
    TableConfig,
    TableSource,
    Window,
)
from connectql.toolkit.source import DeadLetter


@dataclass(frozen=True)
class ReaderConfig(TableConfig):
    """A PostgreSQL source's settings: the table reader's plus its replication slot."""

    slot: str = ""
    keyless: str = "refuse"  # a table without replica identity: refused, or its inserts only
    checkpoint: str = ""  # the query's checkpoint directory (the change log spool is beside)

    def relation(self) -> str:
        if self.query:
            return f"({self.query}) q"
        return qualified(self.schema, self.table).as_string(None)


def default_slot(connector: str) -> str:
    """connectql_<connector>, in the characters a slot name may hold."""
    return "connectql_" + re.sub(r"[^a-z0-9_]", "_", connector.lower())[:50]


# DROP waits this long at most on the server for the slot's cleanup (a server that hangs
# would otherwise hold the DROP for connect.timeout.ms); what it could not drop it says
DROP_BOUNDS = {"connect.timeout.ms": 3000, "read.timeout.ms": 10_000}


def drop_config(opts: dict[str, Any]) -> dict[str, Any]:
    """The connection config of the cleanup: the connector's bounds capped by DROP_BOUNDS."""
    cfg = connection_config(opts)
    for key, cap in DROP_BOUNDS.items():
        own = int(cfg.get(key) or BOUND_OPTIONS[key].default)
        cfg[key] = min(own, cap) if own > 0 else cap
    return cfg


class PostgresSource(PostgresTables, TableSource):
    """cdc: while streaming, a walstream.Tailer holds the slot and spools changes; each batch's
    range is read from the spool ('spool' partitions). A run = 'once' source peeks the slot
    over SQL to its target instead ('changes' partitions)."""

    options = SOURCE_OPTIONS
    config_class = ReaderConfig
    LOG_KEY = "lsn"
    UNREADABLE = (*TableSource.UNREADABLE, psycopg.errors.DataError)
    _tailer: walstream.Tailer | None = None
    discover = staticmethod(discover)
    count = staticmethod(count)

    def settings(self) -> dict:
        slot = self.slot_of(self.connector)
        keyless = self.options.get("keyless") or "refuse"
        return {
            **super().settings(),
            "slot": slot,
            "keyless": keyless,
            "checkpoint": self.checkpoint,
        }

    def slot_of(self, connector: str) -> str:
        """The replication slot (and publication) of the connector of that name."""
        return self.options.get("slot.name") or default_slot(connector)

    def on_drop(self, connector: str) -> str | None:
        """DROP CONNECTOR of a cdc source drops its replication slot (it would pin WAL
        forever) and its publication (named as the slot), within DROP_BOUNDS (or the
        connector's own, if shorter)."""
        if self.options.get("mode", "cdc") != "cdc":
            return None
        slot = self.slot_of(connector)
        with connect(drop_config(self.options), autocommit=True) as conn:
            dropped = [
                f"{what} {slot}"
                for what, done in (
                    ("replication slot", cdc.drop_slot(conn, slot)),
                    ("publication", cdc.drop_publication(conn, slot)),
                    ("publication", cdc.drop_publication(conn, cdc.inserts_publication(slot))),
                )
                if done
            ]
        return f"dropped {' and '.join(dropped)}" if dropped else None

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
        cfg = self.cfg
        return cdc.ensure_slot(
            conn, cfg.slot, cfg.schema, self.tables_read, cfg.keyless, self.where
        )

    finds_tables = True

    def estimate_rows(self, conn, table: str) -> int | None:
        found = conn.execute(
            "SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(%s)",
            (self.relation(table),),
        ).fetchone()
        return int(found[0]) if found and found[0] is not None and found[0] > 0 else None

    def log_after(self, position: int) -> int:
        """After every change committed at `position` (a commit's LSN: the next is further
        on by a WAL record at least) and before any later one."""
        return position + 1

    def log_tables_changed(self, conn) -> None:
        """A table added: the publications take it before its snapshot begins, so that each
        change after that snapshot's reads is decoded."""
        cfg, live = self.cfg, [t for t in self.tables_read if t not in self.failed]
        cdc.ensure_publications(conn, cfg.slot, cfg.schema, live, cfg.keyless, self.where)

    def log_now(self, conn) -> int:
        """While streaming: as far as the tailer has spooled (a batch never ends beyond)."""
        if self.once or self._tailer is None:
            return cdc.current_lsn(conn)
        return self._tailer.seen

    def log_behind(self, conn, position: int) -> int:
        """While streaming, from the end of WAL the server last told the tailer: no query, so
        a server that hangs holds no batch up for a lag."""
        if self.once or self._tailer is None:
            return max(0, cdc.current_lsn(conn) - position)
        return max(0, self._tailer.server_end - position)

    def _captured(self) -> set[str]:
        return {cdc.decoded_name(self.cfg.schema, t) for t in self.tables_read}

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
        if self.once:
            cdc.advance(conn, self.cfg.slot, position)
        else:
            self._tailing(position).confirm(position)

    def _partitions(self, start: dict, end: dict) -> list[Range | Group]:
        parts = super()._partitions(start, end)
        if self.once or not any(getattr(p, "kind", "") == "changes" for p in parts):
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
        keys = {t: self.meta(conn, t).key for t in self.live_schemas}
        txns = walstream.read_spool(self._spool(), part.log_from, part.log_to)
        yield from self._changes_out(self._changes(conn, keys, txns))

    def _changes(self, conn, keys: dict, txns) -> Iterator[tuple[str, pa.RecordBatch] | DeadLetter]:
        """(table, change rows), less those a keyless table's snapshot already read."""
        seen = {
            cdc.decoded_name(self.cfg.schema, t): s
            for t, s in walstream.snapshots(self._spool()).items()
        }

        def in_snapshot(table: str, xid: int) -> bool:
            return table in seen and walstream.visible(xid, seen[table])

        decoder = Decoder(cdc.type_names(conn))
        yield from cdc.change_batches(
            self.cfg, self.live_schemas, keys, txns, decoder, in_snapshot, self.tolerant,
            self.cannot_read,
        )  # fmt: skip

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
            yield self._out(part.table, batch)
        conn.execute("COMMIT")

    def close(self) -> None:
        if self._tailer is not None:
            self._tailer.close()
        super().close()

    def log_read(self, conn, part: Range) -> Iterator[tuple[str, pa.RecordBatch] | DeadLetter]:
        keys = {t: self.meta(conn, t).key for t in self.live_schemas}
        txns = cdc.transactions(conn, self.cfg.slot, part.log_from, part.log_to)
        yield from self._changes(conn, keys, txns)

    def with_snapshot_columns(self, batch: pa.RecordBatch, table, position: int):
        cfg = self.cfg.for_table(table)
        return cdc.with_snapshot_columns(batch, cfg, self.schemas[table], position)
