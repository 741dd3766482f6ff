"""The PostgreSQL dialect of polling.Db: quoting, casts, and range reads through
`COPY (SELECT ...) TO STDOUT (FORMAT csv)` parsed into Arrow, or, for a range with integer bounds
(a bulk copy, a cdc snapshot chunk) of columns connectorx reads exactly, through connectorx's
binary COPY (arrowread): twice as fast, no Python per row."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.types import ArrayType, BinaryType, DecimalType, StringType, StructType

from connectql.connectors.postgres.types import arrow_schema, csv_to_arrow, select_expr
from connectql.connectors.relational import arrowread

ROWS_PER_ARROW_BATCH = 65_536
INTEGERS = {"smallint", "integer", "bigint"}
# string columns connectorx reads as PostgreSQL's output function writes them
PLAIN_TEXT = re.compile(r"^(text|character varying(\(\d+\))?)$")
SESSION = ["SET TimeZone = 'UTC'"]  # as client.connect_kwargs


class PgDb:
    def __init__(self, conn, types: dict[str, str], address: str | None = None, read_s=None):
        self.conn, self.types = conn, types  # types: column -> PostgreSQL type
        self.address = address  # a connectorx URL: ranges may be read through it
        self.read_s = read_s  # read.timeout.ms, as the server's statement timeout there

    def quote(self, name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def as_text(self, column: str) -> str:
        return f"{self.quote(column)}::text"

    def param(self, column: str) -> str:
        return f"%s::{self.types[column]}"

    def rows(self, sql: str, params: Sequence = ()) -> list[tuple]:
        return self.conn.execute(sql, list(params)).fetchall()

    def select_list(self, schema: StructType) -> str:
        return ", ".join(select_expr(f.name, f.dataType, self.types.get(f.name)) for f in schema)

    def read(self, relation, where, params, schema, order) -> Iterator[pa.RecordBatch]:
        fast = self.fast(relation, where, params, schema, order)
        if fast is not None:
            yield from fast
            return
        yield from self.arrow(
            f"SELECT {self.select_list(schema)} FROM {relation}{where}", params, schema
        )

    def fast(self, relation, where, params, schema, order) -> Iterator[pa.RecordBatch] | None:
        """The rows through connectorx; None when it cannot read them exactly (no address,
        bounds on columns that are not integers, a column type outside fast_list's) or cannot
        keep read.timeout.ms here (arrowread.read)."""
        columns = self.fast_list(schema)
        integers = all(self.types.get(c) in INTEGERS for c in order)
        sql = (
            self.address
            and columns
            and (integers or not params)
            and arrowread.inline(f"SELECT {columns} FROM {relation}{where}", params)
        )
        if not sql:
            return None
        return arrowread.read(
            self.address, sql, self._setup(), arrow_schema(schema), read_s=self.read_s
        )

    def _setup(self) -> list[str]:
        """connectorx's session: as client.connect's, with the read bound as the server's
        statement timeout (connectorx has no client-side one)."""
        return [
            *SESSION,
            *([f"SET statement_timeout = {int(self.read_s * 1000)}"] if self.read_s else []),
        ]

    def fast_list(self, schema: StructType) -> str | None:
        """select_expr's columns, decimals (and an unconstrained numeric's text) as text
        (connectorx's decimals hold 10 digits of scale), bytea as bytes; None when a column is
        an array or a string not of text, varchar or numeric."""
        out = []
        for f in schema.fields:
            expr = select_expr(f.name, f.dataType, self.types.get(f.name))
            numeric = isinstance(f.dataType, DecimalType) or self.types.get(f.name) == "numeric"
            if isinstance(f.dataType, ArrayType):
                return None
            if isinstance(f.dataType, StringType) and not (
                numeric or PLAIN_TEXT.match(self.types[f.name])
            ):
                return None
            if isinstance(f.dataType, BinaryType):
                expr = self.quote(f.name)
            out.append(f"({expr})::text" if numeric else expr)
        return ", ".join(out)

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
