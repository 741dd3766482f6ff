"""The PostgreSQL sink's Spark writer: each task COPYs its rows into an unlogged staging table;
the driver's commit merges the batch into the target, records its id and drops the staging
tables in one transaction, so a replayed batch is skipped (exactly-once). The protocol is
dbsink.Target's; this is the PostgreSQL dialect."""

from __future__ import annotations

import psycopg
import pyarrow as pa
from pyspark.sql.types import StructType

from connectql.connectors.dbsink import (
    SEQ_COLUMN,
    DbStreamWriter,
    SinkSettings,
    Target,
)
from connectql.connectors.postgres.client import connect
from connectql.connectors.postgres.types import arrow_to_csv, pg_type
from connectql.errors import PlanError

# what a target rejects row by row (constraint, type, length), as opposed to transient errors
REJECTED = (psycopg.errors.DataError, psycopg.errors.IntegrityError)


def column_types(schema: StructType, where: str) -> dict[str, str]:
    out = {}
    for f in schema.fields:
        t = pg_type(f.dataType)
        if t is None:
            raise PlanError(
                f"{where}: column {f.name} has type {f.dataType.simpleString()}, which the"
                " postgres sink cannot write"
            )
        out[f.name] = t
    return out


class PgTarget(Target):
    PROGRESS_TIMESTAMP = "timestamptz"

    def connect(self, autocommit: bool):
        return connect(self.s.connection, autocommit=autocommit)

    def quote(self, name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def execute(self, conn, statement: str, params=None) -> list[tuple]:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []

    def transaction(self, conn):
        return conn.transaction()

    def savepoint(self, conn):
        return conn.transaction()

    def column_types(self, where: str) -> dict[str, str]:
        return column_types(self.schema, where)

    def load(self, conn, stage: str, batches, first_seq: int) -> int:
        types = self.column_types("")
        defs = [f"{self.quote(n)} {types[n]}" for n in self.names]
        defs.append(f"{self.quote(SEQ_COLUMN)} bigint")
        conn.execute(f"CREATE UNLOGGED TABLE {self.table(stage)} ({', '.join(defs)})")
        columns = self.columns([*self.names, SEQ_COLUMN])
        rows = 0
        with conn.cursor().copy(
            f"COPY {self.table(stage)} ({columns}) FROM STDIN (FORMAT csv)"
        ) as copy:
            for rb in batches:
                if rb.num_rows == 0:
                    continue
                seq = pa.array(range(first_seq + rows, first_seq + rows + rb.num_rows), pa.int64())
                copy.write(arrow_to_csv(rb.append_column(SEQ_COLUMN, seq)))
                rows += rb.num_rows
        return rows

    def temp_table(self, conn, name: str, select: str) -> None:
        conn.execute(f"DROP TABLE IF EXISTS {name}")
        conn.execute(f"CREATE TEMP TABLE {name} ON COMMIT DROP AS {select}")

    def new_value(self, column: str) -> str:
        return f"EXCLUDED.{self.quote(column)}"

    def on_conflict(self, key: list[str], assignments: list[str]) -> str:
        action = f"DO UPDATE SET {', '.join(assignments)}" if assignments else "DO NOTHING"
        return f"ON CONFLICT ({self.columns(key)}) {action}"

    def delete_sql(self, target: str, changes: str) -> str:
        match = self.key_match("t", "l")
        return f"DELETE FROM {target} t USING {changes} l WHERE l.__op = 'd' AND {match}"

    def add_column_sql(self, column: str, type_: str) -> str:
        return (
            f"ALTER TABLE {self.table(self.s.table)} ADD COLUMN IF NOT EXISTS"
            f" {self.quote(column)} {type_}"
        )

    def has_unique(self, conn) -> bool:
        rows = conn.execute(
            "SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i"
            " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
            " WHERE i.indrelid = %s::regclass AND i.indisunique GROUP BY i.indexrelid",
            (self.table(self.s.table),),
        ).fetchall()
        return any(sorted(r[0]) == sorted(self.s.key) for r in rows)

    def row_json(self, conn, select: str) -> tuple[str, int]:
        row = conn.execute(
            f"SELECT row_to_json(r)::text, r.{self.quote(SEQ_COLUMN)} FROM ({select}) r"
        ).fetchone()
        return row[0], row[1]

    def rejects(self, e: Exception) -> bool:
        return isinstance(e, REJECTED)


def prepare_target(s: SinkSettings, schema: StructType, where: str) -> dict[str, str]:
    """Create the progress table and (auto.create) the target, or say what is wrong with it
    (PlanError); returns the PostgreSQL type of each column."""
    return PgTarget(s, schema).prepare(where)


class PostgresStreamWriter(DbStreamWriter):
    TARGET = PgTarget
