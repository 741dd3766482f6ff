"""The MySQL dialect of polling.Db: backtick quoting, text bounds, and range reads fetched as
text (no per-value Python conversions) and converted to Arrow column by column."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
import pymysql
from pymysql.converters import conversions
from pyspark.sql.types import StructType

from connectql.connectors.mysql.client import quote
from connectql.connectors.mysql.types import Column, rows_to_arrow, select_expr

ROWS_PER_ARROW_BATCH = 65_536
# encoders only: result values arrive as the server's text (bytes for binary columns)
RAW = {k: v for k, v in conversions.items() if not isinstance(k, int)}


class MyDb:
    def __init__(self, conn, types: dict[str, str]):
        self.conn, self.types = conn, types  # types: column -> COLUMN_TYPE

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

    def select_list(self, schema: StructType) -> str:
        return ", ".join(select_expr(Column(f.name, self.types.get(f.name, ""))) for f in schema)

    def arrow(self, sql: str, params: Sequence, schema: StructType) -> Iterator[pa.RecordBatch]:
        with self.conn.cursor(pymysql.cursors.SSCursor) as cur:
            cur.execute(sql, list(params) or None)
            while rows := cur.fetchmany(ROWS_PER_ARROW_BATCH):
                yield rows_to_arrow(rows, schema)


def _str(value):
    return value.decode() if isinstance(value, (bytes, bytearray)) else value
