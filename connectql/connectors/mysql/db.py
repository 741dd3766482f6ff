"""The MySQL dialect of polling.Db: backtick quoting, text bounds, and range reads into Arrow.

pymysql parses every value of every row in Python, which made reads several times slower than
the `mariadb` client. A range on one integer key is therefore read grouped: the server writes
each row as a CSV line and joins the lines of GROUP_ROWS consecutive keys into one value, so
Python handles a few large strings and pyarrow's CSV reader does the parsing. A group longer
than the server allows (huge rows) comes back cut short: the row count tells, and the range is
read row by row instead.

Faster still, a range with integer bounds (a bulk copy, a cdc snapshot chunk) is read through
connectorx (arrowread) when the reader gave the dialect an address: integers arrive as Arrow,
every other column as the server's text of it (CAST AS CHAR), converted by the same functions as
the text paths, so that values stay exactly what they were."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
import pymysql
from pymysql.converters import conversions
from pyspark.sql.types import BinaryType, StructType

from connectql.connectors.mysql.client import quote
from connectql.connectors.mysql.types import (
    GEOMETRY_TYPES,
    INTEGERS,
    Column,
    _from_text,
    arrow_schema,
    csv_expr,
    csv_to_arrow,
    rows_to_arrow,
    select_expr,
    spatial,
)
from connectql.connectors.relational import arrowread

ROWS_PER_ARROW_BATCH = 65_536
GROUP_ROWS = 2048  # keys per grouped value
# encoders only: result values arrive as the server's text (bytes for binary columns)
RAW = {k: v for k, v in conversions.items() if not isinstance(k, int)}
# as the pymysql connections run (client.connect_kwargs): UTF-8 text, TIMESTAMP values in UTC
SESSION = ["SET NAMES utf8mb4", "SET time_zone = '+00:00'"]
NATIVE = {"int", "integer", "bigint"}  # signed: connectorx's Arrow integers are exact


class MyDb:
    def __init__(self, conn, types: dict[str, str], address: str | None = None, read_s=None):
        self.conn, self.types = conn, types  # types: column -> COLUMN_TYPE
        self.address = address  # a connectorx URL: ranges may be read through it
        self.read_s = read_s  # read.timeout.ms, as the server's statement timeout there

    def quote(self, name: str) -> str:
        return quote(name)

    def as_text(self, column: str) -> str:
        return f"CAST({quote(column)} AS CHAR)"

    def param(self, column: str) -> str:
        return "%s"  # the server converts the text bound to the column's type

    def rows(self, sql: str, params: Sequence = ()) -> list[tuple]:
        with self.conn.cursor() as cur:
            cur.execute(sql, list(params) or None)
            return [tuple(_str(v) for v in row) for row in cur.fetchall()]

    def _column(self, name: str) -> Column:
        return Column(name, self.types.get(name, ""))

    def select_list(self, schema: StructType) -> str:
        return ", ".join(select_expr(self._column(f.name)) for f in schema)

    def read(self, relation, where, params, schema, order) -> Iterator[pa.RecordBatch]:
        columns = [self._column(f.name) for f in schema]
        batches = self.fast(relation, where, params, schema, order)
        for batch in batches or self._read(relation, where, params, schema, order):
            yield spatial(batch, columns)

    def fast(self, relation, where, params, schema, order) -> Iterator[pa.RecordBatch] | None:
        """The rows through connectorx; None when it cannot read them (no address, bounds on
        columns that are not integers, a column type it does not know) or cannot keep
        read.timeout.ms here (arrowread.read)."""
        integers = all(self._column(c).data_type in INTEGERS for c in order)
        if any(self._column(f.name).data_type in GEOMETRY_TYPES for f in schema):
            return None  # connectorx panics on them
        sql = (
            self.address
            and (integers or not params)
            and arrowread.inline(f"SELECT {self.fast_list(schema)} FROM {relation}{where}", params)
        )
        if not sql:
            return None
        return arrowread.read(
            self.address, sql, self._setup(), arrow_schema(schema), _from_text, read_s=self.read_s
        )

    def _setup(self) -> list[str]:
        """connectorx's session: as client.connect's, with the read bound as the server's
        statement timeout (connectorx has no client-side one)."""
        return [*SESSION, *([f"SET max_statement_time = {self.read_s:g}"] if self.read_s else [])]

    def fast_list(self, schema: StructType) -> str:
        """Signed integers as they are, binary columns as bytes, the rest as the server's text."""
        out = []
        for f in schema:
            c = self._column(f.name)
            native = isinstance(f.dataType, BinaryType) or (
                c.data_type in NATIVE and not c.unsigned
            )
            out.append(select_expr(c) if native else f"CAST({select_expr(c)} AS CHAR)")
        return ", ".join(out)

    def _read(self, relation, where, params, schema, order) -> Iterator[pa.RecordBatch]:
        if len(order) == 1 and self._column(order[0]).data_type in INTEGERS:
            batches = self.grouped(relation, where, params, schema, order[0])
            if batches is not None:
                yield from batches
                return
        sql = f"SELECT {self.select_list(schema)} FROM {relation}{where}"
        yield from self.arrow(sql, params, schema)

    def grouped(self, relation, where, params, schema, key) -> list[pa.RecordBatch] | None:
        """The rows read as CSV lines grouped by key; None when a group came back cut short."""
        line = (
            "CONCAT("
            + ", ',', ".join(csv_expr(self._column(f.name), f.dataType) for f in schema)
            + ")"
        )
        sql = (
            f"SELECT COUNT(*), GROUP_CONCAT(cq_line SEPARATOR '\\n') FROM (SELECT {line} AS"
            f" cq_line, {quote(key)} DIV {GROUP_ROWS} AS cq_g FROM {relation}{where}) x"
            " GROUP BY cq_g"
        )
        out, texts, pending = [], [], 0
        with self.conn.cursor(pymysql.cursors.SSCursor) as cur:
            cur.execute("SET SESSION group_concat_max_len = @@max_allowed_packet")
            cur.execute(sql, list(params) or None)
            for count, text in cur.fetchall_unbuffered():
                texts.append(text if isinstance(text, bytes) else text.encode())
                pending += int(count)
                if pending >= ROWS_PER_ARROW_BATCH:
                    out.append(self._parse(texts, pending, schema))
                    texts, pending = [], 0
        if pending:
            out.append(self._parse(texts, pending, schema))
        return None if any(b is None for b in out) else out

    def _parse(self, texts: list[bytes], rows: int, schema) -> pa.RecordBatch | None:
        try:
            batch = csv_to_arrow(b"\n".join(texts), schema)
        except pa.ArrowInvalid:  # a line cut short inside a quoted value
            return None
        return batch if batch.num_rows == rows else None

    def arrow(self, sql: str, params: Sequence, schema: StructType) -> Iterator[pa.RecordBatch]:
        with self.conn.cursor(pymysql.cursors.SSCursor) as cur:
            cur.execute(sql, list(params) or None)
            while rows := cur.fetchmany(ROWS_PER_ARROW_BATCH):
                yield rows_to_arrow(rows, schema)


def _str(value):
    return value.decode() if isinstance(value, (bytes, bytearray)) else value
