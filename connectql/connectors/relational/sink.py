"""What every database sink (PostgreSQL, MySQL) shares: its settings, which columns reach the
target, staging-table names, the order that picks the last change per key, the progress table,
the exactly-once write/commit protocol (`Target`; tablesink.py makes it a toolkit Sink) and the
rows a target rejects."""

from __future__ import annotations

import itertools
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow.compute as pc
import pyarrow.ipc as ipc

from connectql.connectors.options import Option
from connectql.connectors.relational.lending import Lender
from connectql.errors import PlanError, RowsRefused
from connectql.toolkit.envelope import META_COLUMNS, UNCHANGED
from connectql.toolkit.messages import MESSAGE_COLUMNS
from connectql.toolkit.sink import Rejected

SEQ_COLUMN = "__cq_seq"  # a staged row's place in the batch: partition << 40 | row number
PROGRESS_TABLE = "connectql_sink_progress"
# a session idle this long inside a transaction is ended by the server: a worker frozen mid-batch
# (SIGSTOP, a hung machine) must not hold the progress row's lock against the standby that took over
IDLE_IN_TRANSACTION_S = 10


@dataclass(frozen=True)
class SinkSettings:
    """A database sink's settings (tablesink.TableSink makes them from its options)."""

    connection: dict[str, Any]
    schema: str
    table: str
    mode: str  # 'append' | 'upsert'
    key: tuple[str, ...]
    delete_enabled: bool
    auto_create: bool
    auto_evolve: bool = True
    writer_id: str = ""
    connector: str = ""
    tolerant: bool = False  # errors.tolerance = 'all': rows the target rejects are set apart
    epoch: int = 0  # the worker's lease epoch: a batch from an older one is refused


def sink_mode(opts: dict[str, Any], stream_key: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """(mode, key): upsert when the stream has a key or primary.key is given, else append."""
    given = tuple(k.strip() for k in (opts.get("primary.key") or "").split(",") if k.strip())
    key = given or tuple(stream_key)
    mode = opts.get("mode") or ("upsert" if key else "append")
    if mode == "upsert" and not key:
        raise PlanError(
            "mode = 'upsert' needs a key: the stream has none, so give primary.key = 'col, ...'"
        )
    return mode, key


def sink_options(qualified: str) -> dict[str, Option]:
    """The options of a database sink beyond its connection; `qualified` names a table with its
    container ('schema.name', 'database.name')."""
    return {
        o.name: o
        for o in [
            Option(
                "table",
                required=True,
                doc=f"target table, 'name' or '{qualified}'; with streams, each stream's"
                " (e.g. 'out_${table}')",
            ),
            Option(
                "mode",
                "enum",
                choices=("append", "upsert"),
                doc="'append' inserts every row; 'upsert' applies the last change per key"
                " (deletes for __op = 'd'); default: upsert when the stream has a key",
            ),
            Option(
                "primary.key",
                doc="key columns for upsert, 'a, b'; default: the stream's key (the source"
                " table's primary key)",
            ),
            Option(
                "auto.create",
                "bool",
                True,
                doc="create the target table from the stream's columns when it does not exist",
            ),
            Option(
                "auto.evolve",
                "bool",
                True,
                doc="add columns the stream has and the target table lacks (e.g. after an"
                " upstream schema change)",
            ),
            Option(
                "delete.enabled",
                "bool",
                doc="apply __op = 'd' rows as deletes; default: true in upsert mode; refused"
                " with mode = 'append' (which inserts every row)",
            ),
        ]
    }


def target_columns(names: list[str], mode: str) -> list[str]:
    """The columns written to the target: an upsert keeps the row, not its change metadata nor
    the message columns of a broker's change events (a replica of the rows)."""
    if mode == "append":
        return list(names)
    return [n for n in names if n not in META_COLUMNS and n not in MESSAGE_COLUMNS]


def staged_columns(names: list[str], mode: str) -> list[str]:
    """The columns a batch stages: the target's, plus what an upsert orders and deletes by."""
    keep = [c for c in ("__op", "__pos", UNCHANGED) if c in names] if mode == "upsert" else []
    return target_columns(names, mode) + keep


def unread_columns(mode: str) -> tuple[str, ...]:
    """The change and message columns a sink in `mode` neither writes nor stages (the engine
    drops them before the writer, so Spark does not read them)."""
    every = [*META_COLUMNS, *MESSAGE_COLUMNS]
    kept = staged_columns(every, mode)
    return tuple(c for c in every if c not in kept)


def check_columns(names: list[str], s: SinkSettings, where: str) -> None:
    missing = [k for k in s.key if k not in names]
    if missing:
        raise PlanError(
            f"{where}: key column {', '.join(missing)} is not in the stream's columns"
            f" ({', '.join(names)})"
        )


def stage_name(writer_id: str, batch_id: int, partition: int) -> str:
    return f"{stage_prefix(writer_id)}{batch_id}_{partition}"


def change_order(names: list[str]) -> list[str]:
    """Columns ordering a key's changes oldest to newest: the source's log position, then the
    row's place in the stream."""
    return (["__pos"] if "__pos" in names else []) + [SEQ_COLUMN]


def has_deletes(names: list[str], s: SinkSettings) -> bool:
    return s.mode == "upsert" and s.delete_enabled and "__op" in names


def stage_prefix(writer_id: str) -> str:
    return f"cq_stage_{writer_id}_"


def progress_ddl(table: str, timestamp: str) -> str:
    """The progress table (one row per writer: the last batch it committed), in SQL that both
    PostgreSQL and MySQL read; `timestamp` is the dialect's type for updated_at."""
    return (
        f"CREATE TABLE IF NOT EXISTS {table} (writer_id VARCHAR(64) PRIMARY KEY,"
        f" connector TEXT, batch_id BIGINT NOT NULL, epoch BIGINT NOT NULL DEFAULT 0,"
        f" updated_at {timestamp} NOT NULL DEFAULT CURRENT_TIMESTAMP)"
    )


def last_change_select(quote: Callable[[str], str], key, names: list[str], source: str) -> str:
    """The last change per key among the rows of `source` (a SELECT of staged rows), newest by
    change_order; ROW_NUMBER() works on PostgreSQL and on MySQL 8 / MariaDB 10.2+."""
    part = ", ".join(quote(k) for k in key)
    order = ", ".join(f"{quote(c)} DESC" for c in change_order(names))
    return (
        f"SELECT * FROM (SELECT src.*, ROW_NUMBER() OVER (PARTITION BY {part} ORDER BY {order})"
        f" AS cq_rn FROM ({source}) src) ranked WHERE cq_rn = 1"
    )


LIVE = " WHERE (__op IS NULL OR __op <> 'd')"  # the rows of a change set that are not deletes


def isolate(
    total: int,
    attempt: Callable[[int, int], None],
    row_of: Callable[[int], tuple[str, int]],
    rejects: Callable[[Exception], bool],
) -> list[tuple[str, int, Exception]]:
    """Write rows 1..total (`attempt(lo, hi)` writes a range, all or nothing), splitting a
    range the target rejects in halves until each rejected row stands alone; returns (row as
    JSON, seq, error) of those, from `row_of(n)`. Errors that are not rejections are raised."""
    rejected: list[tuple[str, int, Exception]] = []

    def go(lo: int, hi: int) -> None:
        try:
            attempt(lo, hi)
        except Exception as e:
            if not rejects(e):
                raise
            if lo == hi:
                raw, seq = row_of(lo)
                rejected.append((raw, seq, e))
                return
            mid = (lo + hi) // 2
            go(lo, mid)
            go(mid + 1, hi)

    if total:
        go(1, total)
    return rejected


@dataclass(frozen=True)
class Direct:
    """A task's rows written straight into the target (Target.write): the transaction that
    inserted them and the newest change among them (its __pos, if the rows have one, and seq)."""

    xid: int
    last_pos: str | None
    last_seq: int


@dataclass
class Staged:
    """What a task's write gives the commit (pickled)."""

    table: str | None  # None: nothing staged (a replay, or rows written directly)
    rows: int
    ops: tuple[str, ...] = ()  # the distinct __op values among the rows (none: no __op column)
    direct: Direct | None = None  # the rows went straight into the target


class NotInsertOnly(Exception):
    """A task's rows turned out to hold an update or a delete: they cannot go in directly."""


class Spill:
    """The batches a direct write has taken, kept in a temporary Arrow file so that they can
    be staged after all when the write is refused (memory stays at one batch)."""

    def __init__(self):
        self.rows, self._file, self._writer = 0, tempfile.TemporaryFile(), None

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()

    def tee(self, batches, allowed: Callable[[], bool]):
        """Yield `batches`, keeping each; raise NotInsertOnly (the batch kept) once not
        `allowed()` after a batch."""
        for rb in batches:
            if self._writer is None:
                self._writer = ipc.new_stream(self._file, rb.schema)
            self._writer.write_batch(rb)
            self.rows += rb.num_rows
            if not allowed():
                raise NotInsertOnly()
            yield rb

    def replay(self):
        if self._writer is None:
            return
        self._writer.close()
        self._file.seek(0)
        yield from ipc.open_stream(self._file)


class Fenced(RuntimeError):
    """A batch or start of a sink whose worker lost its lease: a newer epoch owns the sink."""


class DirectOverlap(RuntimeError):
    """Rows a task inserted straight into the target share keys with older changes another
    task staged: the batch fails and its replay stages every row (those keys now conflict)."""


class Target:
    """A database sink's target table and the exactly-once protocol around it; a subclass
    gives the dialect (connection, quoting, staging, the statements that differ).

    write (each task): skip a batch the progress table already has; else load the task's rows
    into a staging table. commit (the driver, once per batch), in one transaction: lock the
    writer's progress row, skip a replayed batch, merge the staging tables into the target
    (rows the target rejects go to the dead-letter stream when there is one), record the batch
    id; then drop the staging tables (inside the transaction where DDL is transactional)."""

    DDL_IN_TRANSACTION = True
    DIRECT = False  # the dialect can insert a task's rows straight into the target
    PROGRESS_TIMESTAMP = "TIMESTAMP"
    TABLE_OPTIONS = ""  # after CREATE TABLE (...)

    def __init__(self, s: SinkSettings, schema):
        self.s = s
        self.schema = schema
        self.names = staged_columns(schema.fieldNames(), s.mode)
        self.lender: Lender | None = None  # a sink of several streams: its targets' connections
        self.left_out: frozenset[int] = frozenset()  # seqs of rows rejected in an earlier round

    # -- the dialect ------------------------------------------------------------------
    def connect(self, autocommit: bool):  # a connection usable as a context manager
        raise NotImplementedError

    def quote(self, name: str) -> str:
        raise NotImplementedError

    def execute(self, conn, statement: str, params=None) -> list[tuple]:
        raise NotImplementedError

    def transaction(self, conn):  # the batch's transaction; on a nested call, a savepoint
        raise NotImplementedError

    def savepoint(self, conn):
        raise NotImplementedError

    def make_durable(self, conn) -> None:
        """Inside a transaction: make its commit wait until it is on disk, whatever the
        server's default. The batch's commit (Spark counts the batch done once commit()
        returns) and each direct write (a crash before the batch's commit must not undo it
        while the batch still gets recorded) call it."""

    def column_types(self, where: str) -> dict[str, str]:
        raise NotImplementedError

    def load(self, conn, stage: str, batches, first_seq: int) -> int:
        """Create the staging table `stage` and load the rows; returns how many."""
        raise NotImplementedError

    def temp_table(self, conn, name: str, select: str) -> None:
        raise NotImplementedError

    def insert_direct(self, batches, first_seq: int) -> Direct | None:
        """Insert the rows (an iterator of Arrow batches) into the target in one transaction;
        None (nothing written) when the target refuses any of them (a key it has, a value that
        does not fit), its column types do not take the rows as they are, or `batches` raises
        NotInsertOnly."""
        raise NotImplementedError

    def overlaps(self, conn, source: str, direct: list[Direct]) -> bool:
        """Whether a staged row (of `source`) has the key of a row written directly in this
        batch and is not newer than every row of that write."""
        raise NotImplementedError

    def new_value(self, column: str) -> str:  # in an upsert's update: the row's new value
        raise NotImplementedError

    def on_conflict(self, key: list[str], assignments: list[str]) -> str:
        """The clause that turns an INSERT into an upsert on `key` (assignments may be [])."""
        raise NotImplementedError

    def delete_sql(self, target: str, changes: str) -> str:
        """Delete the target rows whose key has a last change __op = 'd' in `changes`."""
        raise NotImplementedError

    def add_column_sql(self, column: str, type_: str) -> str:
        raise NotImplementedError

    def created_types(self, conn, types: dict[str, str]) -> dict[str, str]:
        """The types auto.create and auto.evolve give the columns (`types`: the sink's own for
        their Spark types); a dialect may use the types the source declared (declared.py)."""
        return types

    def has_unique(self, conn) -> bool:
        raise NotImplementedError

    def row_json(self, conn, select: str) -> tuple[str, int]:
        raise NotImplementedError

    def rejects(self, e: Exception) -> bool:
        """Whether the target refused the rows (constraint, type, length) rather than failed."""
        raise NotImplementedError

    def describe(self, e: Exception) -> tuple[str, str]:
        return type(e).__name__, str(e).strip().splitlines()[0]

    # -- shared -----------------------------------------------------------------------
    def session(self, autocommit: bool):
        """A connection for one step, as a context manager: the lender's when there is one,
        else a new one closed after the step."""
        if self.lender is not None:
            return self.lender.session(self, autocommit)
        return self.connect(autocommit)

    def table(self, name: str) -> str:
        return f"{self.quote(self.s.schema)}.{self.quote(name)}"

    def columns(self, names) -> str:
        return ", ".join(self.quote(n) for n in names)

    def key_match(self, left: str, right: str) -> str:
        return " AND ".join(f"{left}.{self.quote(k)} = {right}.{self.quote(k)}" for k in self.s.key)

    def ensure_progress_row(self) -> None:
        """Give the writer its progress row (batch -1) up front, so that commit's SELECT ...
        FOR UPDATE always locks a row: locking a missing one takes a gap lock in InnoDB, and
        two sinks committing their first batch into one database would deadlock."""
        with self.session(autocommit=True) as conn:
            self.end_older_epochs(conn)
            self.execute(
                conn,
                f"INSERT INTO {self.table(PROGRESS_TABLE)} (writer_id, connector, batch_id)"
                " VALUES (%s, %s, -1) " + self.on_conflict(["writer_id"], []),
                (self.s.writer_id, self.s.connector),
            )
            # this epoch's worker owns the sink from now on: an older one's batches are refused
            self.execute(
                conn,
                f"UPDATE {self.table(PROGRESS_TABLE)} SET epoch = %s WHERE writer_id = %s"
                " AND epoch < %s",
                (self.s.epoch, self.s.writer_id, self.s.epoch),
            )
            self.check_epoch(conn, "start")

    def end_older_epochs(self, conn) -> None:
        """End the sessions on the target that this sink's workers of older lease epochs left
        open, where the database can tell them apart (a paused worker's transaction would
        hold its locks, and the new worker's writes behind them, until it resumes)."""

    def check_epoch(self, conn, what: str) -> None:
        """Refuse (Fenced) when a worker of a newer lease epoch owns this sink: this one lost
        its lease (it was paused while a standby took over) and must not write."""
        rows = self.execute(
            conn,
            f"SELECT epoch FROM {self.table(PROGRESS_TABLE)} WHERE writer_id = %s",
            (self.s.writer_id,),
        )
        if rows and rows[0][0] > self.s.epoch:
            raise Fenced(
                f"sink {self.s.connector}: {what} refused: the worker of lease epoch {rows[0][0]}"
                f" owns it, this one has epoch {self.s.epoch} (it lost its lease)"
            )

    def record_sql(self) -> str:
        """Upsert (writer_id, connector, batch_id) into the progress table."""
        return (
            f"INSERT INTO {self.table(PROGRESS_TABLE)} (writer_id, connector, batch_id, epoch)"
            " VALUES (%s, %s, %s, %s) "
            + self.on_conflict(
                ["writer_id"],
                [
                    f"batch_id = {self.new_value('batch_id')}",
                    f"epoch = {self.new_value('epoch')}",
                    "updated_at = CURRENT_TIMESTAMP",
                ],
            )
        )

    def upsert_sql(self, target: str, cols: list[str], select: str) -> str:
        rest = [c for c in cols if c not in self.s.key]
        sets = [f"{self.quote(c)} = {self.new_value(c)}" for c in rest]
        return f"INSERT INTO {target} ({self.columns(cols)}) {select} " + self.on_conflict(
            list(self.s.key), sets
        )

    def prepare(self, where: str) -> dict[str, str]:
        """Create the progress table and (auto.create) the target; check that an existing
        target has every column and, for upserts, a unique key. Raises PlanError naming what
        is wrong. Returns the type of each column."""
        s = self.s
        check_columns(self.schema.fieldNames(), s, where)
        types = self.column_types(where)
        cols = target_columns(self.schema.fieldNames(), s.mode)
        with self.session(autocommit=True) as conn:
            self.execute(
                conn,
                progress_ddl(self.table(PROGRESS_TABLE), self.PROGRESS_TIMESTAMP)
                + self.TABLE_OPTIONS,
            )
            self.add_epoch_column(conn)
            existing = {
                r[0]
                for r in self.execute(
                    conn,
                    "SELECT column_name FROM information_schema.columns WHERE table_schema = %s"
                    " AND table_name = %s",
                    (s.schema, s.table),
                )
            }
            if not existing:
                if not s.auto_create:
                    raise PlanError(
                        f"{where}: table {s.schema}.{s.table} does not exist (auto.create = false)"
                    )
                made = self.created_types(conn, types)
                defs = [f"{self.quote(c)} {made[c]}" for c in cols]
                if s.mode == "upsert":
                    defs.append(f"PRIMARY KEY ({self.columns(s.key)})")
                self.execute(
                    conn,
                    f"CREATE TABLE IF NOT EXISTS {self.table(s.table)} ({', '.join(defs)})"
                    + self.TABLE_OPTIONS,
                )
                return types
            missing = [c for c in cols if c not in existing]
            if missing and not s.auto_evolve:
                raise PlanError(
                    f"{where}: table {s.schema}.{s.table} has no column {', '.join(missing)}"
                    " (auto.evolve = false)"
                )
            made = self.created_types(conn, types) if missing else types
            for c in missing:
                self.execute(conn, self.add_column_sql(c, made[c]))
            if s.mode == "upsert" and not self.has_unique(conn):
                raise PlanError(
                    f"{where}: upsert needs a primary key or unique index on ({', '.join(s.key)})"
                    f" in table {s.schema}.{s.table}"
                )
        return types

    def add_epoch_column(self, conn) -> None:
        """A progress table made before epochs were recorded gets its epoch column."""
        has = self.execute(
            conn,
            "SELECT 1 FROM information_schema.columns WHERE table_schema = %s"
            " AND table_name = %s AND column_name = 'epoch'",
            (self.s.schema, PROGRESS_TABLE),
        )
        if not has:
            self.execute(
                conn,
                f"ALTER TABLE {self.table(PROGRESS_TABLE)} ADD COLUMN epoch BIGINT NOT NULL DEFAULT 0",
            )

    def committed(self, conn, lock: bool = False) -> int:
        rows = self.execute(
            conn,
            f"SELECT batch_id FROM {self.table(PROGRESS_TABLE)} WHERE writer_id = %s"
            + (" FOR UPDATE" if lock else ""),
            (self.s.writer_id,),
        )
        return rows[0][0] if rows else -1

    def stage(self, batch_id: int, partition: int, batches) -> Staged:
        """A task's part of a batch, loaded into its staging table (nothing for a replay)."""
        name = stage_name(self.s.writer_id, batch_id, partition)
        with self.session(autocommit=True) as conn:
            if self.committed(conn) >= batch_id:
                return Staged(None, 0)
            self.execute(conn, f"DROP TABLE IF EXISTS {self.table(name)}")
            ops: set[str] = set()
            rows = self.load(conn, name, self._selected(batches, ops), partition << 40)
        return Staged(name, rows, tuple(sorted(ops)))

    def write(self, batch_id: int, partition: int, batches) -> Staged:
        """A task's part of a batch (the Spark writer's entry): an upsert's rows that only
        read or insert go straight into the target when it takes them all; else stage().
        A replay of such a write conflicts with its own rows, so it is staged and merged."""
        if not (self.DIRECT and self.s.mode == "upsert"):
            return self.stage(batch_id, partition, batches)
        with self.session(autocommit=True) as conn:
            if self.committed(conn) >= batch_id:
                return Staged(None, 0)
        ops: set[str] = set()
        rows = (rb for rb in self._selected(batches, ops) if rb.num_rows)
        with Spill() as spill:
            direct = self.insert_direct(spill.tee(rows, lambda: ops <= {"r", "c"}), partition << 40)
            if direct is not None:
                return Staged(None, spill.rows, tuple(sorted(ops)), direct)
            return self.stage(batch_id, partition, itertools.chain(spill.replay(), rows))

    def _selected(self, batches, ops: set[str]):
        """The staged columns of each batch, noting the change kinds (__op) they hold."""
        for rb in batches:
            rb = rb.select(self.names)
            if "__op" in self.names:
                ops.update(str(op) for op in pc.unique(rb.column("__op")).to_pylist())
            yield rb

    def commit(self, messages: list[Staged | None], batch_id: int) -> None:
        stages = staged_tables(messages)
        direct = [m.direct for m in messages if m is not None and m.direct]
        with self.session(autocommit=False) as conn:
            with self.transaction(conn):
                self.make_durable(conn)
                done = self.committed(conn, lock=True)
                self.check_epoch(conn, f"batch {batch_id}")  # in the batch's transaction
                if done < batch_id:
                    if stages and direct and self.overlaps(conn, self.union(stages), direct):
                        raise DirectOverlap(
                            f"batch {batch_id}: rows inserted directly share keys with older"
                            " staged changes; the replay stages them all"
                        )
                    if stages:
                        self.apply(conn, stages, batch_id, inserts_only(messages))
                    self.execute(
                        conn,
                        self.record_sql(),
                        (self.s.writer_id, self.s.connector, batch_id, self.s.epoch),
                    )
                if self.DDL_IN_TRANSACTION:
                    self.drop(conn, stages)
            if not self.DDL_IN_TRANSACTION:
                self.drop(conn, stages)
            self.drop_stale(conn, batch_id)

    def abort(self, messages: list[Staged | None], batch_id: int | None = None) -> None:
        """Drop what the tasks staged; when batch `batch_id` is a replay of one committed,
        also the staging tables a crash left behind (as its commit would have)."""
        with self.session(autocommit=True) as conn:
            self.drop(conn, staged_tables(messages))
            if batch_id is not None and self.committed(conn) >= batch_id:
                self.drop_stale(conn, batch_id)

    def drop(self, conn, stages: list[str]) -> None:
        for name in stages:
            self.execute(conn, f"DROP TABLE IF EXISTS {self.table(name)}")

    def drop_stale(self, conn, batch_id: int) -> None:
        """Drop this writer's staging tables of batches up to `batch_id` that are still there
        (a drop lost to a crash, a task that failed without abort)."""
        prefix = stage_prefix(self.s.writer_id)
        pattern = prefix.replace("_", "\\_") + "%"
        rows = self.execute(
            conn,
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
            " AND table_name LIKE %s",
            (self.s.schema, pattern),
        )
        stale = [r[0] for r in rows if _stage_batch(r[0], prefix) <= batch_id]
        self.drop(conn, stale)

    def union(self, stages: list[str], cast: bool = True) -> str:
        """The staged rows of the batch, less those left out (rejected in an earlier round), as
        the target takes them (`cast`) or as staged."""
        listed = self.staged_select() if cast else "*"
        out = sorted(self.left_out)
        where = (
            f" WHERE {self.quote(SEQ_COLUMN)} NOT IN ({', '.join(map(str, out))})" if out else ""
        )
        return " UNION ALL ".join(f"SELECT {listed} FROM {self.table(t)}{where}" for t in stages)

    def staged_select(self) -> str:
        """What the merge selects from a staging table: its columns as the target takes them
        (a dialect casts what its target does not take as staged)."""
        return "*"

    def apply(self, conn, stages: list[str], batch_id: int, fresh: bool = False) -> None:
        """Merge the batch (`fresh`: only reads and inserts, so try a plain insert first); when
        `tolerant`, rows the target rejects are found one by one and raised as Rejected (keyed
        by their seq, the batch rolled back) for the toolkit to set apart and commit again
        without them (left_out)."""
        source = self.union(stages)
        try:
            with self.savepoint(conn):  # a rejected batch leaves nothing behind
                self.merge(conn, source, fresh)
        except Exception as e:
            if not self.rejects(e):
                raise
            if not self.s.tolerant:  # a sink of several streams: this stream stops alone
                kind, message = self.describe(e)
                raise RowsRefused(
                    f"the target refuses a row of the batch ({kind}): {message} (errors.tolerance"
                    " = 'all' sends such rows to a dead-letter stream)"
                ) from None
            rejected = self.isolate(conn, stages)
            if not rejected:  # every range went in on its own: the batch is written
                return
            raise Rejected(
                {seq: self.describe(err) for _raw, seq, err in rejected},
                {seq: raw for raw, seq, _err in rejected},
            ) from None

    def isolate(self, conn, stages: list[str]) -> list[tuple[str, int, Exception]]:
        """Number the batch's rows in change order, then write them range by range (isolate).
        They are numbered as staged and cast range by range: a value the target's type
        refuses (text that is no date) is one row's rejection, not the whole batch's."""
        order = ", ".join(self.quote(c) for c in change_order(self.names))
        source = self.union(stages, cast=False)
        self.temp_table(
            conn,
            "cq_all",
            f"SELECT src.*, ROW_NUMBER() OVER (ORDER BY {order}) AS cq_n FROM ({source}) src",
        )
        total = self.execute(conn, "SELECT count(*) FROM cq_all")[0][0]
        cols = self.columns([*self.names, SEQ_COLUMN])

        def rows(lo: int, hi: int) -> str:
            return f"SELECT {cols} FROM cq_all WHERE cq_n BETWEEN {lo} AND {hi}"

        def attempt(lo: int, hi: int) -> None:
            with self.savepoint(conn):
                self.merge(conn, f"SELECT {self.staged_select()} FROM ({rows(lo, hi)}) r")

        return isolate(total, attempt, lambda n: self.row_json(conn, rows(n, n)), self.rejects)

    def merge(self, conn, source: str, fresh: bool = False) -> None:
        """Apply the rows of `source` (a SELECT of staged rows) to the target inside the
        caller's transaction: append in stream order, or the last change per key (deletes,
        then an upsert of the rest); `fresh` (only reads and inserts among the rows) tries
        insert_new first."""
        s, names = self.s, self.names
        target = self.table(s.table)
        cols = target_columns(names, s.mode)
        listed = self.columns(cols)
        if s.mode == "append":
            self.execute(
                conn,
                f"INSERT INTO {target} ({listed}) SELECT {listed} FROM ({source}) src"
                f" ORDER BY {self.quote(SEQ_COLUMN)}",
            )
            return
        if fresh and self.insert_new(
            conn, f"INSERT INTO {target} ({listed}) SELECT {listed} FROM ({source}) src"
        ):
            return
        self.temp_table(conn, "cq_last", last_change_select(self.quote, s.key, names, source))
        if UNCHANGED in names:
            self.keep_unchanged(conn, target, source, cols)
        live = ""
        if "__op" in names:
            live = LIVE
            if has_deletes(names, s):
                self.execute(conn, self.delete_sql(target, "cq_last"))
        self.execute(conn, self.upsert_sql(target, cols, f"SELECT {listed} FROM cq_last{live}"))

    def keep_unchanged(self, conn, target: str, source: str, cols: list[str]) -> None:
        """Fill in cq_last the values an update left unchanged (UNCHANGED lists them): from
        the key's latest earlier row in the batch that carried the column, else from the
        target (the value before this batch)."""
        lists = self.execute(
            conn, f"SELECT DISTINCT {UNCHANGED} FROM cq_last WHERE {UNCHANGED} IS NOT NULL"
        )
        named = {c for (text,) in lists for c in json.loads(text)}
        key = [self.quote(k) for k in self.s.key]
        order = ", ".join(f"x.{self.quote(c)} DESC" for c in change_order(self.names))
        for c in [c for c in cols if c in named and c not in self.s.key]:
            q, listed = self.quote(c), unchanged_pattern(c)
            same = " AND ".join(f"x.{k} = cq_last.{k}" for k in key)
            self.execute(
                conn,
                f"UPDATE cq_last SET {q} = (SELECT x.{q} FROM {target} x WHERE {same})"
                f" WHERE {UNCHANGED} LIKE %s",
                (listed,),
            )
            carried = (
                f"SELECT x.{q} FROM ({source}) x WHERE {same}"
                " AND (x.__op IS NULL OR x.__op <> 'd')"
                f" AND (x.{UNCHANGED} IS NULL OR x.{UNCHANGED} NOT LIKE %s)"
                f" ORDER BY {order} LIMIT 1"
            )
            self.execute(
                conn,
                f"UPDATE cq_last SET {q} = ({carried}) WHERE {UNCHANGED} LIKE %s"
                f" AND EXISTS ({carried})",
                (listed, listed, listed),
            )

    def insert_new(self, conn, insert: str) -> bool:
        """Run `insert`, a plain INSERT of the batch's rows, in a savepoint. Without deletes,
        it does what the upsert does when no key repeats in the batch or exists in the target
        (a snapshot, a first bulk copy), at about half the cost; a key that does raises a
        unique violation, which undoes it: False, and the caller merges."""
        try:
            with self.savepoint(conn):
                self.execute(conn, insert)
            return True
        except Exception as e:
            if self.rejects(e):
                return False
            raise


def unchanged_pattern(column: str) -> str:
    """A LIKE pattern matching an UNCHANGED list that names `column`."""
    quoted = json.dumps(column)
    return "%" + quoted.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def inserts_only(messages) -> bool:
    """Whether a batch's staged rows are all reads or inserts (or have no __op): then a plain
    insert is worth a try. Updates would mostly hit keys the target has."""
    return all(set(m.ops) <= {"r", "c"} for m in messages if m is not None and m.table)


def staged_tables(messages) -> list[str]:
    return [m.table for m in messages if m is not None and m.table]


def _stage_batch(table: str, prefix: str) -> int:
    try:
        return int(table[len(prefix) :].split("_")[0])
    except ValueError:
        return -1
