"""The PostgreSQL source's Spark reader: the shared table reader (tablereader) with PostgreSQL's
connection, table description and dialect, and for `cdc` a logical replication slot as its
change log (positions are LSNs, under the offset key "lsn")."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from connectql.connectors.postgres import cdc
from connectql.connectors.postgres.client import connect, qualified
from connectql.connectors.postgres.db import PgDb
from connectql.connectors.postgres.tables import describe_source
from connectql.connectors.tablereader import Range, Table, TableConfig, TableStreamReader, Window


@dataclass(frozen=True)
class ReaderConfig(TableConfig):
    """A PostgreSQL source's settings: the table reader's plus its replication slot."""

    slot: str = ""

    @classmethod
    def from_options(cls, options: dict[str, str]) -> ReaderConfig:
        cfg = super().from_options(options)
        if not cfg.slot:
            cfg = ReaderConfig(**{**cfg.__dict__, "slot": default_slot(cfg.connector)})
        return cfg

    def relation(self) -> str:
        if self.query:
            return f"({self.query}) q"
        return qualified(self.schema, self.table).as_string(None)


def default_slot(connector: str) -> str:
    """connectql_<connector>, in the characters a slot name may hold."""
    return "connectql_" + re.sub(r"[^a-z0-9_]", "_", connector.lower())[:50]


class PostgresStreamReader(TableStreamReader):
    config_class = ReaderConfig
    LOG_KEY = "lsn"

    def connect(self):
        return connect(self.cfg.connection, autocommit=True)

    def is_closed(self, conn) -> bool:
        return conn.closed

    def describe(self, conn, table: str | None) -> Table:
        return describe_source(conn, self.cfg.for_table(table))

    def dialect(self, conn, table: Table) -> PgDb:
        return PgDb(conn, {n: pg for n, pg, _s in table.columns})

    def relation(self, table: str | None) -> str:
        return self.cfg.for_table(table).relation()

    def log_start(self, conn) -> int:
        return cdc.ensure_slot(conn, self.cfg.slot)

    def log_now(self, conn) -> int:
        return cdc.current_lsn(conn)

    def log_scan(self, conn, start: int, target: int | None) -> Window:
        captured = {cdc.decoded_name(self.cfg.schema, t) for t in self.tables}
        return cdc.scan(conn, self.cfg.slot, self.cfg.batch_rows, captured, target)

    def log_done(self, conn, position: int) -> None:
        cdc.advance(conn, self.cfg.slot, position)

    def log_read(self, conn, part: Range) -> Iterator[tuple[str, pa.RecordBatch]]:
        keys = {t: self.meta(conn, t).key for t in self.tables}
        yield from cdc.read_changes(conn, self.cfg, self.schemas, keys, part)

    def with_snapshot_columns(self, batch: pa.RecordBatch, table, position: int):
        cfg = self.cfg.for_table(table)
        return cdc.with_snapshot_columns(batch, cfg, self.schemas[table], position)
