"""The PostgreSQL sink's Spark writer: each task COPYs its rows into an unlogged staging table;
the driver's commit merges the batch into the target and records its id in one transaction, so
a replayed batch is skipped (exactly-once)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone

import psycopg
import pyarrow as pa
from psycopg import sql
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from connectql.catalog.streams import append_table
from connectql.connectors.dbsink import (
    PROGRESS_TABLE,
    SEQ_COLUMN,
    SinkSettings,
    change_order,
    check_columns,
    deadletter_name,
    has_deletes,
    stage_name,
    staged_columns,
    target_columns,
)
from connectql.connectors.postgres.client import connect, qualified
from connectql.connectors.postgres.types import arrow_to_csv, pg_type
from connectql.errors import PlanError
from connectql.runtime.deadletters import DEADLETTER_ARROW


@dataclass
class Staged(WriterCommitMessage):
    table: str | None  # None: the batch was committed before (a replay); nothing staged
    rows: int


def _ident(name: str) -> sql.Identifier:
    return sql.Identifier(name)


def _columns(names) -> sql.Composed:
    return sql.SQL(", ").join(_ident(n) for n in names)


# ------------------------------------------------------------------ the target table


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


def prepare_target(s: SinkSettings, schema: StructType, where: str) -> dict[str, str]:
    """Create the progress table and (auto.create) the target; check that an existing target has
    every column and, for upserts, a unique key. Raises PlanError naming what is wrong. Returns
    the PostgreSQL type of each column."""
    names = schema.fieldNames()
    check_columns(names, s, where)
    types = column_types(schema, where)
    cols = target_columns(names, s.mode)
    with connect(s.connection, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (writer_id text PRIMARY KEY, connector text,"
                " batch_id bigint NOT NULL, updated_at timestamptz NOT NULL DEFAULT now())"
            ).format(qualified(s.schema, PROGRESS_TABLE))
        )
        existing = _existing_columns(conn, s)
        if not existing:
            if not s.auto_create:
                raise PlanError(
                    f"{where}: table {s.schema}.{s.table} does not exist (auto.create = false)"
                )
            _create_table(conn, s, cols, types)
            return types
        missing = [c for c in cols if c not in existing]
        if missing and not s.auto_evolve:
            raise PlanError(
                f"{where}: table {s.schema}.{s.table} has no column {', '.join(missing)}"
                " (auto.evolve = false)"
            )
        for c in missing:
            conn.execute(
                sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
                    qualified(s.schema, s.table), _ident(c), sql.SQL(types[c])
                )
            )
        if s.mode == "upsert" and not _has_unique(conn, s):
            raise PlanError(
                f"{where}: upsert needs a primary key or unique index on ({', '.join(s.key)})"
                f" in table {s.schema}.{s.table}"
            )
    return types


def _existing_columns(conn, s: SinkSettings) -> list[str]:
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s"
        " AND table_name = %s",
        (s.schema, s.table),
    ).fetchall()
    return [r[0] for r in rows]


def _has_unique(conn, s: SinkSettings) -> bool:
    rows = conn.execute(
        "SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_index i"
        " JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)"
        " WHERE i.indrelid = %s::regclass AND i.indisunique GROUP BY i.indexrelid",
        (f'"{s.schema}"."{s.table}"',),
    ).fetchall()
    return any(sorted(r[0]) == sorted(s.key) for r in rows)


def _create_table(conn, s: SinkSettings, cols: list[str], types: dict[str, str]) -> None:
    defs = [sql.SQL("{} {}").format(_ident(c), sql.SQL(types[c])) for c in cols]
    if s.mode == "upsert":
        defs.append(sql.SQL("PRIMARY KEY ({})").format(_columns(s.key)))
    conn.execute(
        sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
            qualified(s.schema, s.table), sql.SQL(", ").join(defs)
        )
    )


# ------------------------------------------------------------------ the Spark writer


class PostgresStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, schema: StructType, options: dict[str, str]):
        self.s = SinkSettings.from_options(options)
        self.names = staged_columns(schema.fieldNames(), self.s.mode)
        self.types = prepare_target(self.s, schema, f"sink connector '{self.s.connector}'")

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Staged:
        ctx = TaskContext.get()
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId"))
        partition = ctx.partitionId()
        name = stage_name(self.s.writer_id, batch_id, partition)
        with connect(self.s.connection, autocommit=True) as conn:
            if _committed(conn, self.s) >= batch_id:
                return Staged(None, 0)
            stage = qualified(self.s.schema, name)
            defs = [sql.SQL("{} {}").format(_ident(n), sql.SQL(self.types[n])) for n in self.names]
            defs.append(sql.SQL("{} bigint").format(_ident(SEQ_COLUMN)))
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(stage))
            conn.execute(
                sql.SQL("CREATE UNLOGGED TABLE {} ({})").format(stage, sql.SQL(", ").join(defs))
            )
            batches = (rb.select(self.names) for rb in iterator)
            rows = _copy(conn, stage, [*self.names, SEQ_COLUMN], batches, partition << 40)
        return Staged(name, rows)

    def commit(self, messages: list[Staged], batch_id: int) -> None:
        stages = [m.table for m in messages if m is not None and m.table]
        with connect(self.s.connection) as conn, conn.transaction():
            if _committed(conn, self.s, lock=True) >= batch_id:
                _drop(conn, self.s, stages)
                return
            if stages:
                self._apply(conn, stages, batch_id)
            _record(conn, self.s, batch_id)
            _drop(conn, self.s, stages)

    def _apply(self, conn, stages: list[str], batch_id: int) -> None:
        """Merge the batch; with a dead-letter stream, rows the target rejects go there (in the
        same commit, before the batch counts as done) and the others are written."""
        source = _union(self.s, stages)
        try:
            with conn.transaction():  # a savepoint: a rejected batch leaves nothing behind
                merge(conn, self.s, self.names, source)
        except REJECTED:
            if not self.s.deadletter:
                raise
            rejected = isolate(conn, self.s, self.names, source)
            name = deadletter_name(self.s.writer_id, batch_id)
            append_table(self.s.deadletter, name, dead_letters(self.s, batch_id, rejected))

    def abort(self, messages: list[Staged], batch_id: int) -> None:
        stages = [m.table for m in messages if m is not None and m.table]
        with connect(self.s.connection, autocommit=True) as conn:
            _drop(conn, self.s, stages)


def _copy(conn, stage, columns: list[str], batches, first_seq: int) -> int:
    rows = 0
    copy_sql = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(stage, _columns(columns))
    with conn.cursor().copy(copy_sql) as copy:
        for rb in batches:
            if rb.num_rows == 0:
                continue
            seq = pa.array(range(first_seq + rows, first_seq + rows + rb.num_rows), pa.int64())
            copy.write(arrow_to_csv(rb.append_column(SEQ_COLUMN, seq)))
            rows += rb.num_rows
    return rows


def _committed(conn, s: SinkSettings, lock: bool = False) -> int:
    row = conn.execute(
        sql.SQL(
            "SELECT batch_id FROM {} WHERE writer_id = %s" + (" FOR UPDATE" if lock else "")
        ).format(qualified(s.schema, PROGRESS_TABLE)),
        (s.writer_id,),
    ).fetchone()
    return row[0] if row else -1


def _record(conn, s: SinkSettings, batch_id: int) -> None:
    conn.execute(
        sql.SQL(
            "INSERT INTO {} (writer_id, connector, batch_id) VALUES (%s, %s, %s)"
            " ON CONFLICT (writer_id) DO UPDATE SET batch_id = EXCLUDED.batch_id,"
            " updated_at = now()"
        ).format(qualified(s.schema, PROGRESS_TABLE)),
        (s.writer_id, s.connector, batch_id),
    )


def _drop(conn, s: SinkSettings, stages: list[str]) -> None:
    for name in stages:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(qualified(s.schema, name)))


def _union(s: SinkSettings, stages: list[str]) -> sql.Composed:
    return sql.SQL(" UNION ALL ").join(
        sql.SQL("SELECT * FROM {}").format(qualified(s.schema, t)) for t in stages
    )


# what a target rejects row by row (constraint, type, length), as opposed to transient errors
REJECTED = (psycopg.errors.DataError, psycopg.errors.IntegrityError)


def isolate(conn, s: SinkSettings, names: list[str], source) -> list[tuple[str, int, Exception]]:
    """Write every row of `source` the target accepts, in change order, splitting the rows in
    halves until each rejected one stands alone; returns (row as JSON, seq, error) for those."""
    conn.execute("DROP TABLE IF EXISTS cq_all")
    order = sql.SQL(", ").join(_ident(c) for c in change_order(names))
    conn.execute(
        sql.SQL(
            "CREATE TEMP TABLE cq_all ON COMMIT DROP AS SELECT *, row_number() OVER (ORDER BY {})"
            " AS cq_n FROM ({}) src"
        ).format(order, source)
    )
    total = conn.execute("SELECT count(*) FROM cq_all").fetchone()[0]
    rejected: list[tuple[str, int, Exception]] = []
    cols = _columns([*names, SEQ_COLUMN])

    def attempt(lo: int, hi: int) -> None:
        part = sql.SQL("SELECT {} FROM cq_all WHERE cq_n BETWEEN {} AND {}").format(
            cols, sql.Literal(lo), sql.Literal(hi)
        )
        try:
            with conn.transaction():
                merge(conn, s, names, part)
        except REJECTED as e:
            if lo == hi:
                row = conn.execute(
                    sql.SQL("SELECT row_to_json(r)::text, r.{} FROM ({}) r").format(
                        _ident(SEQ_COLUMN), part
                    )
                ).fetchone()
                rejected.append((row[0], row[1], e))
                return
            mid = (lo + hi) // 2
            attempt(lo, mid)
            attempt(mid + 1, hi)

    if total:
        attempt(1, total)
    return rejected


def dead_letters(s: SinkSettings, batch_id: int, rejected) -> pa.Table:
    now = datetime.now(timezone.utc)
    rows = [
        {
            "connector": s.connector,
            "stage": "write",
            "source_offset": json.dumps({"batch": batch_id, "row": seq}),
            "error_class": type(e).__name__,
            "error_message": str(e).strip().splitlines()[0],
            "raw_record": raw,
            "time": now,
        }
        for raw, seq, e in rejected
    ]
    return pa.Table.from_pylist(rows, schema=DEADLETTER_ARROW)


def merge(conn, s: SinkSettings, names: list[str], union) -> None:
    """Apply the rows of `union` (a SELECT of staged rows) to the target inside the caller's
    transaction."""
    target = qualified(s.schema, s.table)
    cols = target_columns(names, s.mode)
    if s.mode == "append":
        conn.execute(
            sql.SQL("INSERT INTO {} ({}) SELECT {} FROM ({}) src ORDER BY {}").format(
                target, _columns(cols), _columns(cols), union, _ident(SEQ_COLUMN)
            )
        )
        return
    key = _columns(s.key)
    order = sql.SQL(", ").join(
        [
            *(_ident(k) for k in s.key),
            *(sql.SQL("{} DESC").format(_ident(c)) for c in change_order(names)),
        ]
    )
    conn.execute("DROP TABLE IF EXISTS cq_last")
    conn.execute(
        sql.SQL(
            "CREATE TEMP TABLE cq_last ON COMMIT DROP AS SELECT DISTINCT ON ({}) * FROM ({}) src"
            " ORDER BY {}"
        ).format(key, union, order)
    )
    live = sql.SQL("")
    if "__op" in names:
        live = sql.SQL(" WHERE __op IS DISTINCT FROM 'd'")
        if has_deletes(names, s):
            match = sql.SQL(" AND ").join(
                sql.SQL("t.{} = l.{}").format(_ident(k), _ident(k)) for k in s.key
            )
            conn.execute(
                sql.SQL("DELETE FROM {} t USING cq_last l WHERE l.__op = 'd' AND {}").format(
                    target, match
                )
            )
    rest = [c for c in cols if c not in s.key]
    action = (
        sql.SQL("DO UPDATE SET {}").format(
            sql.SQL(", ").join(
                sql.SQL("{} = EXCLUDED.{}").format(_ident(c), _ident(c)) for c in rest
            )
        )
        if rest
        else sql.SQL("DO NOTHING")
    )
    conn.execute(
        sql.SQL("INSERT INTO {} ({}) SELECT {} FROM cq_last{} ON CONFLICT ({}) {}").format(
            target, _columns(cols), _columns(cols), live, key, action
        )
    )
