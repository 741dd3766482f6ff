"""The PostgreSQL sink's Spark writer: each task COPYs its rows (Arrow encoded by pgpq into
COPY's binary format) straight into the target when they only insert keys it lacks, else into
an unlogged staging table; the driver's commit merges the staged rows into the target, records
the batch id and drops the staging tables in one transaction, so a replayed batch is skipped
(exactly-once). The protocol is relational.sink.Target's; this is the PostgreSQL dialect."""

from __future__ import annotations

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from pgpq import ArrowToPostgresBinaryEncoder
from pgpq.encoders import StringEncoderBuilder
from pgpq.schema import Jsonb
from pyspark.sql.types import StringType, StructType

from connectql.connectors.postgres.client import connect
from connectql.connectors.postgres.options import SINK_OPTIONS, PostgresTables
from connectql.connectors.postgres.types import created_type, pg_type
from connectql.connectors.relational import declared
from connectql.connectors.relational.sink import (
    IDLE_IN_TRANSACTION_S,
    SEQ_COLUMN,
    Direct,
    NotInsertOnly,
    Target,
    change_order,
    target_columns,
)
from connectql.connectors.relational.tablesink import TableSink
from connectql.errors import PlanError

# what a target rejects row by row (constraint, type, length), as opposed to transient errors
REJECTED = (psycopg.errors.DataError, psycopg.errors.IntegrityError)


def column_types(schema: StructType, where: str) -> dict[str, str]:
    """The type each column is staged (and COPYed) as: its Spark type's, but jsonb for text a
    source declared jsonb (a PostgreSQL jsonb column, a nested column written as JSON), whose
    binary COPY form is its text (so the rows go straight into a jsonb column, uncast)."""
    out = {}
    for f in schema.fields:
        t = "jsonb" if _is_jsonb(f) else pg_type(f.dataType)
        if t is None:
            raise PlanError(
                f"{where}: column {f.name} has type {f.dataType.simpleString()}, which the"
                " postgres sink cannot write"
            )
        out[f.name] = t
    return out


def _is_jsonb(field) -> bool:
    d = declared.of(field)
    return isinstance(field.dataType, StringType) and d == declared.Declared("postgres", "jsonb")


# the target column types that take a sink type's binary COPY form as their own value (the
# session is in UTC, so timestamp and timestamptz both read microseconds of UTC wall time)
_SAME_BINARY = (
    "(VALUES ('character varying', 'text'), ('timestamp', 'timestamptz'),"
    " ('timestamptz', 'timestamp')) p(target, ours)"
)
# the columns (name, the sink's type for it) whose target type does not take that type's form
_UNFIT_COLUMNS = f"""
SELECT c.name FROM unnest(%s::text[], %s::text[]) AS c(name, ours)
LEFT JOIN pg_attribute a ON a.attrelid = %s::regclass AND a.attname = c.name
  AND a.attnum > 0 AND NOT a.attisdropped
WHERE a.atttypid IS DISTINCT FROM c.ours::regtype AND NOT EXISTS (SELECT 1 FROM {_SAME_BINARY}
  WHERE p.target::regtype = a.atttypid AND p.ours::regtype = c.ours::regtype)
"""


# the target columns that do not take their staged column by assignment: text staged for a
# column of another category (uuid, jsonb, inet, interval, an enum, ...: casts from text are
# explicit), numeric(38,18) staged for an unconstrained numeric (its trailing zeros trimmed),
# and a declared jsonb column (cast whichever way it was staged)
_CASTS = """
SELECT c.name, format_type(a.atttypid, a.atttypmod),
  a.atttypid = 'numeric'::regtype AND c.ours LIKE 'numeric(%%'
FROM unnest(%s::text[], %s::text[]) AS c(name, ours)
JOIN pg_attribute a ON a.attrelid = %s::regclass AND a.attname = c.name
  AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type e ON e.oid = t.typelem AND t.typcategory = 'A'
WHERE (c.ours IN ('text', 'text[]') AND coalesce(e.typcategory, t.typcategory) <> 'S')
  OR (a.atttypid = 'numeric'::regtype AND a.atttypmod = -1 AND c.ours LIKE 'numeric(%%')
  OR c.ours = 'jsonb'
"""  # a ride's task, given rows without their declared types, stages such a column as text


def copy_type(pg: str) -> str:
    """The column type whose binary COPY form pgpq writes for a column of type `pg`: its own,
    but an array's elements name their type and pgpq names every timestamp's 'timestamp'."""
    return "timestamp[]" if pg == "timestamptz[]" else pg


def copy_rows(
    conn, table: str, columns: str, batches, seq_from: int | None = None, jsonb=frozenset()
) -> int:
    """COPY Arrow batches into `table` (`columns`, quoted) in COPY's binary format (the
    columns named in `jsonb` as jsonb); with `seq_from`, each row gets SEQ_COLUMN (seq_from,
    seq_from + 1, ...) last. Returns the rows."""
    rows, encoder = 0, None
    batches = iter(batches)
    with conn.cursor().copy(f"COPY {table} ({columns}) FROM STDIN (FORMAT binary)") as copy:
        for rb in batches:
            if seq_from is not None:
                seq = pa.array(range(seq_from + rows, seq_from + rows + rb.num_rows), pa.int64())
                rb = rb.append_column(SEQ_COLUMN, seq)
            if encoder is None:
                encoder = _encoder(rb.schema, jsonb)
                copy.write(encoder.write_header())
            copy.write(encoder.write_batch(rb))
            rows += rb.num_rows
        if encoder is not None:
            copy.write(encoder.finish())
    return rows


def _encoder(schema: pa.Schema, jsonb) -> ArrowToPostgresBinaryEncoder:
    if not jsonb:
        return ArrowToPostgresBinaryEncoder(schema)
    infer = ArrowToPostgresBinaryEncoder.infer_encoder
    encoders = {
        f.name: StringEncoderBuilder.new_with_output(f, Jsonb()) if f.name in jsonb else infer(f)
        for f in schema
    }
    return ArrowToPostgresBinaryEncoder.new_with_encoders(schema, encoders)


class Newest:
    """Passes batches on, noting the greatest __pos among them (byte order, as COLLATE "C"
    compares; None without __pos)."""

    def __init__(self, batches):
        self.batches, self.pos = batches, None

    def __iter__(self):
        for rb in self.batches:
            if "__pos" in rb.schema.names:
                found = pc.max(rb.column("__pos")).as_py()
                if found is not None and (self.pos is None or found > self.pos):
                    self.pos = found
            yield rb


class PgTarget(Target):
    PROGRESS_TIMESTAMP = "timestamptz"
    DIRECT = True

    def connect(self, autocommit: bool):
        # named for the sink and its lease epoch, so that a newer epoch can end this session
        conn = connect(self.s.connection, autocommit, application_name=self.session_name())
        conn.execute(f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_S * 1000}")
        if not autocommit:
            conn.commit()
        return conn

    def session_name(self) -> str:
        return f"connectql sink {self.s.writer_id} e{self.s.epoch}"

    def end_older_epochs(self, conn) -> None:
        if not (self.s.writer_id and self.s.epoch):
            return
        self.execute(
            conn,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE pid <> pg_backend_pid() AND usename = current_user"
            " AND application_name LIKE %s"
            " AND substring(application_name from ' e([0-9]+)$')::bigint < %s",
            (f"connectql sink {self.s.writer_id} e%", self.s.epoch),
        )

    def quote(self, name: str) -> str:
        return '"' + name.replace('"', '""') + '"'

    def execute(self, conn, statement: str, params=None) -> list[tuple]:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description else []

    def transaction(self, conn):
        return conn.transaction()

    def savepoint(self, conn):
        return conn.transaction()

    def make_durable(self, conn) -> None:
        # with synchronous_commit = off a crash can undo a commit that was answered
        conn.execute(
            "SELECT set_config('synchronous_commit', 'on', true)"
            " WHERE current_setting('synchronous_commit') = 'off'"
        )

    def column_types(self, where: str) -> dict[str, str]:
        return column_types(self.schema, where)

    def prepare(self, where: str) -> dict[str, str]:
        types = super().prepare(where)
        cols = target_columns(self.names, self.s.mode)
        with self.session(autocommit=True) as conn:
            rows = conn.execute(
                _CASTS, (cols, [types[c] for c in cols], self.table(self.s.table))
            ).fetchall()
        self.casts = {name: "trim_scale" if numeric else to for name, to, numeric in rows}
        return types

    def staged_select(self) -> str:
        casts = getattr(self, "casts", {})
        return ", ".join(
            self.quote(c)
            if c not in casts
            else f"{casts[c]}({self.quote(c)}) AS {self.quote(c)}"
            if casts[c] == "trim_scale"
            else f"CAST({self.quote(c)} AS {casts[c]}) AS {self.quote(c)}"
            for c in [*self.names, SEQ_COLUMN]
        )

    def created_types(self, conn, types: dict[str, str]) -> dict[str, str]:
        out = dict(types)
        for f in self.schema.fields:
            found = created_type(f) if f.name in out else None
            if found is None:
                continue
            type_, labels = found
            if labels:
                type_ = self._enum(conn, type_, labels)
            elif conn.execute("SELECT to_regtype(%s)", (type_,)).fetchone()[0] is None:
                continue  # an extension's type the target lacks (citext): the Spark type's
            out[f.name] = type_
        return out

    def _enum(self, conn, declared: str, labels: tuple[str, ...]) -> str:
        """The enum `declared` ('"mood"' or '"mood"[]') in the target's schema, created with
        `labels` when missing; its type name there."""
        name = self.quote(self.s.schema) + "." + declared.removesuffix("[]")
        if conn.execute("SELECT to_regtype(%s)", (name,)).fetchone()[0] is None:
            values = ", ".join("'" + label.replace("'", "''") + "'" for label in labels)
            try:
                conn.execute(f"CREATE TYPE {name} AS ENUM ({values})")
            except psycopg.errors.DuplicateObject:
                pass  # another sink made it meanwhile
        return name + ("[]" if declared.endswith("[]") else "")

    def load(self, conn, stage: str, batches, first_seq: int) -> int:
        types = self.column_types("")
        defs = [f"{self.quote(n)} {copy_type(types[n])}" for n in self.names]
        defs.append(f"{self.quote(SEQ_COLUMN)} bigint")
        conn.execute(f"CREATE UNLOGGED TABLE {self.table(stage)} ({', '.join(defs)})")
        columns = self.columns([*self.names, SEQ_COLUMN])
        live = (rb for rb in batches if rb.num_rows)
        return copy_rows(conn, self.table(stage), columns, live, first_seq, self.jsonb(types))

    @staticmethod
    def jsonb(types: dict[str, str]) -> frozenset[str]:
        return frozenset(n for n, t in types.items() if t == "jsonb")

    def insert_direct(self, batches, first_seq: int) -> Direct | None:
        cols = target_columns(self.names, self.s.mode)
        target = self.table(self.s.table)
        types = self.column_types("")
        with self.session(autocommit=True) as conn:
            unfit = conn.execute(
                _UNFIT_COLUMNS, (cols, [copy_type(types[c]) for c in cols], target)
            ).fetchall()
            if unfit:
                return None
            newest = Newest(batches)
            try:
                with conn.transaction():
                    # the batch's commit may come after a crash of the server, which would undo
                    # this write had it not reached disk: it must, before the task reports it
                    self.make_durable(conn)
                    self.check_epoch(conn, "a direct write")  # a worker that lost its lease
                    xid = conn.execute("SELECT txid_current() % 4294967296").fetchone()[0]
                    rows = copy_rows(
                        conn,
                        target,
                        self.columns(cols),
                        (b.select(cols) for b in newest),
                        jsonb=self.jsonb(types),
                    )
            except (*REJECTED, psycopg.errors.DatatypeMismatch, NotInsertOnly):
                return None  # staging takes them (and casts what the target's types differ in)
        return Direct(xid, newest.pos, first_seq + rows - 1)

    def overlaps(self, conn, source: str, direct: list[Direct]) -> bool:
        order = [f"s.{self.quote(c)}" for c in change_order(self.names)]
        if "__pos" in self.names:
            order[0] += ' COLLATE "C"'
        last = ["d.pos", "d.seq"] if "__pos" in self.names else ["d.seq"]
        values = ", ".join(["(%s::bigint, %s::text, %s::bigint)"] * len(direct))
        params = [v for d in direct for v in (d.xid, d.last_pos, d.last_seq)]
        found = conn.execute(
            f"SELECT 1 FROM ({source}) s JOIN {self.table(self.s.table)} t"
            f" ON {self.key_match('t', 's')} JOIN (VALUES {values}) d(xid, pos, seq)"
            " ON t.xmin::text::bigint = d.xid"
            f" WHERE NOT coalesce(({', '.join(order)}) > ({', '.join(last)}), false) LIMIT 1",
            params,
        ).fetchone()
        return found is not None

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


class PostgresSink(PostgresTables, TableSink):
    """PostgreSQL tables as a toolkit sink."""

    options = SINK_OPTIONS
    target = PgTarget
