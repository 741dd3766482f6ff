"""The sqlite sink: a stream's rows inserted or upserted into a table, exactly-once."""

from __future__ import annotations

import datetime
import decimal
from contextlib import closing

import pyarrow as pa

from connectql.toolkit import META_COLUMNS, OP, Option, PermanentError, Sink, ValidationError
from connectql_sqlite.db import PATH, TABLE, columns, connect, declared_type, quote

# (writer, batch_id, epoch): the last batch each writer committed, by a worker of that epoch
PROGRESS = "connectql_sink_progress"


class TableSink(Sink):
    """Each batch is one transaction that writes its rows and records its batch id; a batch
    Spark replays after a crash finds its id recorded and is skipped. The transaction also
    checks the worker's lease epoch: a worker that lost its lease to a standby writes nothing."""

    options = (
        PATH,
        TABLE,
        Option(
            "key",
            doc="comma list of key columns: rows are upserted by them and change rows with"
            " __op = 'd' delete; absent: every row is inserted",
        ),
        Option("create", "bool", True, doc="create the table (and database file) when missing"),
    )
    delivery = "exactly-once"

    @property
    def key(self) -> list[str]:
        return [k.strip() for k in (self.options.get("key") or "").split(",") if k.strip()]

    def check(self, schema: pa.Schema) -> None:
        data = [f for f in schema if f.name not in META_COLUMNS]
        names = [f.name for f in data]
        missing_key = [k for k in self.key if k not in names]
        if missing_key:
            raise ValidationError(
                f"sqlite sink: key column(s) {', '.join(missing_key)} not in the stream"
                f" (its columns: {', '.join(names)})"
            )
        with closing(connect(self.options["path"], must_exist=not self.options["create"])) as con:
            self._prepare(con, data)
            con.execute(
                f"CREATE TABLE IF NOT EXISTS {PROGRESS} (writer TEXT PRIMARY KEY,"
                " batch_id INTEGER NOT NULL, epoch INTEGER NOT NULL DEFAULT 0)"
            )
            if "epoch" not in {name for name, _ in columns(con, PROGRESS)}:  # an older file
                con.execute(f"ALTER TABLE {PROGRESS} ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0")

    def _prepare(self, con, data: list[pa.Field]) -> None:
        table = self.options["table"]
        exists = con.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        ).fetchone()
        if exists:
            have = {name for name, _ in columns(con, table)}
            lacking = [f.name for f in data if f.name not in have]
            if lacking:
                raise ValidationError(
                    f"sqlite sink: table '{table}' has no column(s) {', '.join(lacking)}"
                )
            return
        if not self.options["create"]:
            raise ValidationError(f"sqlite sink: there is no table '{table}' (create = false)")
        cols = [f"{quote(f.name)} {declared_type(f.type)}" for f in data]
        if self.key:
            cols.append(f"PRIMARY KEY ({', '.join(quote(k) for k in self.key)})")
        con.execute(f"CREATE TABLE {quote(table)} ({', '.join(cols)})")

    def last_batch(self, writer: str) -> int | None:
        with closing(connect(self.options["path"])) as con:
            row = con.execute(f"SELECT batch_id FROM {PROGRESS} WHERE writer = ?", (writer,))
            found = row.fetchone()
        return found[0] if found else None

    def write(self, writer: str, batch_id: int, data: pa.Table) -> None:
        con = connect(self.options["path"])
        try:
            con.execute("BEGIN IMMEDIATE")
            self._check_epoch(con, writer, batch_id)
            for row in data.to_pylist():
                self._apply(con, row)
            con.execute(
                f"INSERT INTO {PROGRESS} VALUES (?, ?, ?) ON CONFLICT (writer)"
                " DO UPDATE SET batch_id = excluded.batch_id, epoch = excluded.epoch",
                (writer, batch_id, self.epoch or 0),
            )
            con.execute("COMMIT")
        except BaseException:
            if con.in_transaction:
                con.execute("ROLLBACK")
            raise
        finally:
            con.close()

    def _check_epoch(self, con, writer: str, batch_id: int) -> None:
        found = con.execute(f"SELECT epoch FROM {PROGRESS} WHERE writer = ?", (writer,))
        row = found.fetchone()
        if row and row[0] > (self.epoch or 0):
            raise PermanentError(
                f"sqlite sink: batch {batch_id} refused: the worker of lease epoch {row[0]} owns"
                f" it, this one has epoch {self.epoch} (it lost its lease)"
            )

    def _apply(self, con, row: dict) -> None:
        table, key = quote(self.options["table"]), self.key
        if key and row.get(OP) == "d":
            where = " AND ".join(f"{quote(k)} = ?" for k in key)
            con.execute(f"DELETE FROM {table} WHERE {where}", [row[k] for k in key])
            return
        names = [n for n in row if n not in META_COLUMNS]
        sql = (
            f"INSERT INTO {table} ({', '.join(quote(n) for n in names)})"
            f" VALUES ({', '.join('?' for _ in names)})"
        )
        if key:
            updates = [f"{quote(n)} = excluded.{quote(n)}" for n in names if n not in key]
            conflict = ", ".join(quote(k) for k in key)
            sql += f" ON CONFLICT ({conflict}) DO " + (
                f"UPDATE SET {', '.join(updates)}" if updates else "NOTHING"
            )
        con.execute(sql, [_value(row[n]) for n in names])


def _value(value):
    """A value SQLite stores: times as ISO text, decimals as floats, the rest as they are."""
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value
