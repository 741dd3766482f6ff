"""The PostgreSQL dialect of polling.Db: quoting, casts, and range reads through
`COPY (SELECT ...) TO STDOUT (FORMAT csv)` parsed into Arrow."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.types import StructType

from connectql.connectors.postgres.types import csv_to_arrow, select_expr

ROWS_PER_ARROW_BATCH = 65_536


class PgDb:
    def __init__(self, conn, types: dict[str, str]):
        self.conn, self.types = conn, types  # types: column -> PostgreSQL type

    def quote(self, name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def as_text(self, column: str) -> str:
        return f"{self.quote(column)}::text"

    def param(self, column: str) -> str:
        return f"%s::{self.types[column]}"

    def rows(self, sql: str, params: Sequence = ()) -> list[tuple]:
        return self.conn.execute(sql, list(params)).fetchall()

    def select_list(self, schema: StructType) -> str:
        return ", ".join(select_expr(f.name, f.dataType) for f in schema.fields)

    def read(self, relation, where, params, schema, order) -> Iterator[pa.RecordBatch]:
        yield from self.arrow(
            f"SELECT {self.select_list(schema)} FROM {relation}{where}", params, schema
        )

    def arrow(self, sql: str, params: Sequence, schema: StructType) -> Iterator[pa.RecordBatch]:
        chunk: list = []
        with self.conn.cursor().copy(f"COPY ({sql}) TO STDOUT (FORMAT csv)", list(params)) as cp:
            for row in cp:
                chunk.append(row)
                if len(chunk) >= ROWS_PER_ARROW_BATCH:
                    yield from csv_to_arrow(b"".join(chunk), schema, self.types).to_batches()
                    chunk = []
        if chunk:
            yield from csv_to_arrow(b"".join(chunk), schema, self.types).to_batches()
