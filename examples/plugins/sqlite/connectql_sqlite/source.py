"""The sqlite source: new rows of a table, found by an incrementing integer column."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import closing

import pyarrow as pa

from connectql.toolkit import DeadLetter, Option, Source, ValidationError
from connectql_sqlite.db import PATH, TABLE, arrow_type, columns, connect, quote


class TableSource(Source):
    """Offsets are {"after": the last value of the incrementing column read} (None: nothing
    yet). A row whose value does not fit its column's declared type (SQLite stores it anyway)
    is a dead letter."""

    options = (
        PATH,
        TABLE,
        Option(
            "incrementing.column",
            required=True,
            doc="an integer column whose value grows with each new row (e.g. the INTEGER"
            " PRIMARY KEY): rows are read in its order and the offset is its last value",
        ),
    )
    lag_field = "after"

    def _columns(self, con) -> list[tuple[str, str]]:
        return columns(con, self.options["table"])

    def check(self) -> None:
        with closing(connect(self.options["path"])) as con:
            found = dict(self._columns(con))
        column = self.options["incrementing.column"]
        if column not in found:
            raise ValidationError(
                f"sqlite source: incrementing.column '{column}' is not a column of table"
                f" '{self.options['table']}' (its columns: {', '.join(found)})"
            )
        if arrow_type(found[column]) != pa.int64():
            raise ValidationError(
                f"sqlite source: incrementing.column '{column}' is declared {found[column]!r},"
                " not an integer type"
            )

    def schema(self) -> pa.Schema:
        with closing(connect(self.options["path"])) as con:
            return pa.schema([(name, arrow_type(t)) for name, t in self._columns(con)])

    def initial_offset(self) -> dict:
        return {"after": None}

    def latest_offset(self, start: dict) -> dict:
        (latest,) = self._query("SELECT max({col}) FROM {table}").fetchone()
        return start if latest is None else {"after": latest}

    def end_offset(self, start: dict, latest: dict, max_records: int) -> dict:
        where, args = _range(start["after"], latest["after"])
        sql = "SELECT {col} FROM {table}" + where + " ORDER BY {col} LIMIT 1 OFFSET ?"
        row = self._query(sql, (*args, max_records - 1)).fetchone()
        return {"after": row[0]} if row else latest

    def partitions(self, start: dict, end: dict) -> list[dict]:
        return [{"after": start["after"], "upto": end["after"]}]

    def read(self, partition: dict) -> Iterator[dict | DeadLetter]:
        where, args = _range(partition["after"], partition["upto"])
        cursor = self._query("SELECT * FROM {table}" + where + " ORDER BY {col}", args)
        names = [d[0] for d in cursor.description]
        types = {name: arrow_type(t) for name, t in self._columns(cursor.connection)}
        for values in cursor:
            row = dict(zip(names, values, strict=True))
            problem = _misfit(row, types)
            if problem is None:
                yield row
            else:
                key = row[self.options["incrementing.column"]]
                raw = json.dumps(row, default=repr)
                yield DeadLetter(raw=raw, error=problem, offset={"after": key})

    def _query(self, sql: str, args: tuple = ()):
        col, table = quote(self.options["incrementing.column"]), quote(self.options["table"])
        con = connect(self.options["path"])
        return con.execute(sql.format(col=col, table=table), args)


def _range(after, upto) -> tuple[str, tuple]:
    """The WHERE clause of the rows after `after` (None: from the first) up to `upto`."""
    if after is None:
        return " WHERE {col} <= ?", (upto,)
    return " WHERE {col} > ? AND {col} <= ?", (after, upto)


_FITS = {
    pa.int64(): (int,),
    pa.float64(): (int, float),
    pa.string(): (str,),
    pa.binary(): (bytes,),
}


def _misfit(row: dict, types: dict[str, pa.DataType]) -> str | None:
    """Why a row does not fit the declared types, or None."""
    for name, value in row.items():
        if value is not None and not isinstance(value, _FITS[types[name]]):
            return f"column '{name}' holds {value!r}, which is not {types[name]}"
    return None
