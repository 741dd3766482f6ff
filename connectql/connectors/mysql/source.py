"""The MySQL source: the shared table source (tablereader) with MySQL's options, connection,
table description and dialect, and for `cdc` the binary log as its change log
(positions are binlog coordinates, under the offset key "binlog")."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.types import StringType

from connectql.connectors.mysql import binlog, keyless
from connectql.connectors.mysql.client import connect, qualified
from connectql.connectors.mysql.db import RAW, MyDb
from connectql.connectors.mysql.discovery import count, discover
from connectql.connectors.mysql.options import SOURCE_OPTIONS, MysqlTables
from connectql.connectors.mysql.tables import columns_of, describe_source
from connectql.connectors.relational import arrowread
from connectql.connectors.relational import tablereader as tr
from connectql.connectors.relational.bounds import Bounds
from connectql.errors import PlanError
from connectql.toolkit.source import DeadLetter


@dataclass(frozen=True)
class ReaderConfig(tr.TableConfig):
    """A MySQL source's settings: the table reader's plus its binlog client id."""

    server_id: int = 0  # 0: derived from the connector's name

    def relation(self) -> str:
        if self.query:
            return f"({self.query}) q"
        return qualified(self.schema, self.table)


class MysqlSource(MysqlTables, tr.TableSource):
    options = SOURCE_OPTIONS
    config_class = ReaderConfig
    LOG_KEY = "binlog"
    discover = staticmethod(discover)
    count = staticmethod(count)
    _scanner: binlog.Scanner | None = None
    _tailer: binlog.Tailer | None = None

    def connect(self):
        return connect(self.cfg.connection, conv=RAW)

    def is_closed(self, conn) -> bool:
        return not conn.open

    def describe(self, conn, table: str | None) -> tr.Table:
        return describe_source(conn, self.cfg.for_table(table))

    def dialect(self, conn, table: tr.Table) -> MyDb:
        address = arrowread.url("mysql", self.cfg.connection, 3306)
        read_s = Bounds.of(self.cfg.connection).read_s
        return MyDb(conn, {n: t for n, t, _s in table.columns}, address, read_s)

    def relation(self, table: str | None) -> str:
        return self.cfg.for_table(table).relation()

    def _walker(self, conn, reader: int) -> binlog.Walker:
        columns = {t: columns_of(conn, self.cfg.schema, t) for t in self.live_schemas}
        texts = {
            t: {f.name for f in s.fields if isinstance(f.dataType, StringType)}
            for t, s in self.schemas.items()
        }
        return binlog.Walker(self.cfg, columns, reader, texts)

    finds_tables = True

    def find_tables(self) -> list[str]:
        return [t.name for t in discover(self.cfg, self.cdc, self.where, log_checks=False)]

    def estimate_rows(self, conn, table: str) -> int | None:
        found = MyDb(conn, {}).rows(
            "SELECT TABLE_ROWS FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s"
            " AND TABLE_NAME = %s",
            (self.cfg.schema, table),
        )
        return int(found[0][0]) if found and found[0][0] not in (None, "") else None

    def log_after(self, position: dict) -> dict:
        """After every change of the transaction ending at `position` and before the next's
        (binlog.text_pos); the binlog walks from `position` itself."""
        return binlog.after(position)

    def log_start(self, conn) -> dict:
        return binlog.current(conn)

    def log_now(self, conn) -> dict:
        return binlog.current(conn)

    def log_behind(self, conn, position: dict) -> int:
        return binlog.bytes_behind(conn, position)

    def log_scan(self, conn, start: dict, target: dict | None) -> tr.Window:
        if target is not None:  # available-now: walk to the target now, not as a tailer goes
            if self._scanner is None:
                self._scanner = binlog.Scanner(self._walker(conn, reader=0))
            return self._scanner.scan(start, self.cfg.batch_rows, target, conn)
        if self._tailer is None or not self._tailer.covers(start):
            if self._tailer is not None:
                self._tailer.close()
            walker = self._walker(conn, reader=0)
            self._tailer = binlog.Tailer(walker, start, self.cfg.batch_rows)
        return self._tailer.window(start)

    def settings(self) -> dict:
        server_id = self.options.get("server.id") or 0
        if server_id < 0:
            raise PlanError(f"{self.where}: server.id must be a positive number")
        return {**super().settings(), "server_id": server_id}

    def close(self) -> None:
        if self._tailer is not None:
            self._tailer.close()
        super().close()

    def log_order(self, position: dict):
        return binlog.order(position)

    def log_read(self, conn, part: tr.Range) -> Iterator[tuple[str, pa.RecordBatch] | DeadLetter]:
        keys = {t: self.meta(conn, t).key for t in self.live_schemas}
        walker = self._walker(conn, 1)
        yield from binlog.read_changes(
            walker, part, self.live_schemas, keys, conn, self.tolerant, self.cannot_read
        )

    def log_snapshot(self, conn, table, part: tr.Range) -> Iterator[pa.RecordBatch]:
        src = self._src(table)

        def read(c) -> Iterator[pa.RecordBatch]:  # on `c`, in its snapshot: no connectorx
            types = {n: t for n, t, _s in self.meta(c, table).columns}
            return MyDb(c, types).read(src.relation, "", (), src.schema, [])

        yield from keyless.read_as_of(self, conn, table, part.log_from, src.schema, read)

    def with_snapshot_columns(self, batch: pa.RecordBatch, table, position: dict):
        cfg = self.cfg.for_table(table)
        return binlog.with_snapshot_columns(batch, cfg, self.schemas[table], position)
