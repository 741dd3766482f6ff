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

    @property
    def qualified_table(self) -> str:
        """As logical decoding names it: schema.table."""
        return f"{self.schema}.{self.table}"


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

    def describe(self, conn) -> Table:
        return describe_source(conn, self.cfg)

    def dialect(self, conn, table: Table) -> PgDb:
        return PgDb(conn, {n: pg for n, pg, _s in table.columns})

    def relation(self) -> str:
        return self.cfg.relation()

    def log_start(self, conn) -> int:
        return cdc.ensure_slot(conn, self.cfg.slot)

    def log_now(self, conn) -> int:
        return cdc.current_lsn(conn)

    def log_scan(self, conn, start: int, target: int | None) -> Window:
        captured = {self.cfg.qualified_table}
        return cdc.scan(conn, self.cfg.slot, self.cfg.batch_rows, captured, target)

    def log_done(self, conn, position: int) -> None:
        cdc.advance(conn, self.cfg.slot, position)

    def log_read(self, conn, part: Range) -> Iterator[pa.RecordBatch]:
        key = self._meta(conn).key
        yield from cdc.read_changes(conn, self.cfg, self.schema, key, part)

    def with_snapshot_columns(self, batch: pa.RecordBatch, position: int) -> pa.RecordBatch:
        return cdc.with_snapshot_columns(batch, self.cfg, self.schema, position)
