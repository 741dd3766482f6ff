"""The toolkit source every database table source shares (PostgreSQL, MySQL): offsets, snapshot
chunks, incremental polling, bulk copies and splitting into tasks, for one table or several
(snapshots table after table, then one change log for all). It plans its own batches (a
snapshot chunk, a change-log window). A database subclass supplies its options, connection,
table discovery and description, its SQL dialect (polling.Db) and, for `cdc`, its change log
(slot LSNs, binlog coordinates) through the `log_*` hooks."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from typing import Any, ClassVar

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from connectql.connectors.relational import polling, signals
from connectql.connectors.relational.bounds import endpoint
from connectql.connectors.relational.changerows import UNREADABLE, cannot_read, dead_letter
from connectql.connectors.relational.source import (
    BATCH_ROWS,
    SNAPSHOT_ROWS,
    check_source_options,
    config_fields,
    table_place,
)
from connectql.errors import (
    ConnectQLError,
    PlanError,
    SchemaEvolved,
    TableFailed,
    TableMissing,
)
from connectql.errortext import short_error
from connectql.toolkit.envelope import META_COLUMNS
from connectql.toolkit.source import DeadLetter, Source
from connectql.toolkit.source import Table as StreamTable

LAG_EVERY_S = 1.0  # how often reportLatestOffset asks the database how far behind it is
LAG_ROWS_CAP = 1_000_000  # an incremental source's lag is counted up to this many rows
DISCOVER_EVERY_S = 10.0  # how often a cdc source of several tables looks for tables created

CDC_COLUMNS = (
    ("__op", "STRING"),
    ("__ts_ms", "BIGINT"),
    ("__pos", "STRING"),
    ("__source", "STRING"),
)


@dataclass(frozen=True)
class Table:
    """A source's columns (name, database type, Spark DDL type) and primary key."""

    schema: str
    name: str
    columns: tuple[tuple[str, str, str], ...]
    key: tuple[str, ...]
    extra_cdc: tuple[tuple[str, str], ...] = ()  # a database's own change-data columns
    declared: tuple[str, ...] = ()  # each column's declared type as a DDL COMMENT (declared.py)

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    def ddl(self, cdc: bool) -> str:
        changes = [*CDC_COLUMNS, *self.extra_cdc] if cdc else []
        notes = self.declared or ("",) * len(self.columns)
        cols = [(n, s + note) for (n, _db, s), note in zip(self.columns, notes, strict=True)]
        return ", ".join(f"`{n}` {t}" for n, t in cols + changes)


@dataclass(frozen=True)
class TableConfig:
    """A table source's settings, made from its options; databases add their own fields in a
    subclass."""

    connection: dict
    schema: str  # PostgreSQL schema, MySQL database
    table: str | None  # one table (None: a query, or several tables)
    query: str | None
    mode: str  # 'cdc' | 'incremental' | 'bulk'
    snapshot: str = "initial"
    heartbeat_ms: int = 30_000
    incrementing: str | None = None
    timestamp: str | None = None
    batch_rows: int = BATCH_ROWS
    snapshot_rows: int = SNAPSHOT_ROWS  # one table's cdc snapshot chunk
    poll_ms: int = 1000
    tasks: int = 1
    schema_change: str = "fail"
    connector: str = ""
    patterns: tuple[str, ...] = ()  # several tables: names and patterns, resolved at CREATE
    tolerance: str = "none"  # errors.tolerance: 'all' sends a change it cannot read to dead letters
    signal_table: str | None = None  # signal.table: snapshots asked by rows (signals.py)

    def for_table(self, table: str | None):
        """These settings for one of the source's tables."""
        return self if table == self.table else replace(self, table=table, patterns=())

    @property
    def ordering(self) -> list[str]:
        """Incremental mode's ordering columns: timestamp first, then the incrementing one."""
        return [c for c in (self.timestamp, self.incrementing) if c]


@dataclass(frozen=True)
class Window:
    """What a look ahead in the change log found for the next batch."""

    last_relevant: Any  # log position ending the last transaction touching the table
    last_commit: Any  # log position ending the last transaction seen at all
    full: bool  # the look ahead stopped at its change limit: more may follow


@dataclass(frozen=True)
class Range:
    """One task's work, a partition (as a dict: partition_of)."""

    kind: str  # 'rows' (a key or ordering range) or 'changes' (from the change log)
    after: list | None
    upto: list | None
    log_from: Any = None  # change-log positions: snapshot rows' position, or changes' range
    log_to: Any = None
    table: str | None = None  # whose rows ('rows'); None: the source's one table


@dataclass(frozen=True)
class Group:
    """Several ranges read by one task, one after the other (small tables' snapshots)."""

    parts: tuple[Range, ...]


def partition_of(value: dict) -> Range | Group:
    """The Range or Group a partition's JSON value (asdict) holds."""
    if "parts" in value:
        return Group(tuple(Range(**p) for p in value["parts"]))
    return Range(**value)


# rows x columns of one multi-table snapshot batch at most: the batch is collected whole in the
# driver (when its rows travelled in one union schema of every table's columns, 1,000 tables'
# 6,000 columns x 100,000 rows lost the 2 GB JVM)
BATCH_CELLS = 20_000_000


def wide_batch_rows(batch_rows: int, columns: int) -> int:
    """batch.rows, fewer when the widest table's row is wide (BATCH_CELLS)."""
    return max(1, min(batch_rows, BATCH_CELLS // max(1, columns)))


class TableSource(Source):
    """Offsets: cdc {"after": last key read, LOG_KEY: change-log position, "phase":
    "snapshot"|"stream", "upto": the snapshot's last key} (keys as text lists or null), plus
    "table" (the table being snapshotted) and "parts" (the [table, after, upto] ranges the
    batch ending here reads, across tables) with several tables; incremental {"after": ordering
    text list or null}, with several tables {"after": {table: ordering text list or null}};
    bulk {"run": n}."""

    plans_batches = True
    #: cdc of several tables: the database finds tables created later that the patterns match,
    #: and snapshots a table added while the change log flows (log_after, log_tables_changed)
    finds_tables: ClassVar[bool] = False
    # its commit confirms to the running reader's change-log follower; the next start's
    # first trigger confirms the last batch instead
    commits_at_stop = False
    config_class: type[TableConfig] = TableConfig
    LOG_KEY = "log"
    # what reading a value may raise when the value does not fit its Spark type (a database
    # adds its driver's data errors)
    UNREADABLE: tuple[type[Exception], ...] = UNREADABLE
    #: the database's name in messages ("postgres source: ...")
    database: ClassVar[str]
    #: the option naming the tables' container, and split('c.t', default) -> (container, table)
    place: ClassVar[tuple[str, Callable]]

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.once = False  # run = 'once': ends at the log position `target`
        self.target = None
        self._polled_at = 0.0
        self._beat_at = self._looked_at = time.monotonic()
        self._conn = None
        self._metas: dict[str | None, Table] = {}
        self._found: list[Table] | None = None  # what discovery found (CREATE)
        self._lag: int | None = None
        self._lag_at = 0.0
        self._signals_at = 0.0
        self._estimates: dict[str, int | None] = {}

    @property
    def where(self) -> str:
        named = f" '{self.connector}'" if self.connector else ""
        return f"{self.database} source{named}"

    # ---------------------------------------------------------------- configuration
    def settings(self) -> dict[str, Any]:
        """The config_class fields from the options; a database adds its own."""
        key, split = self.place
        return {
            "connection": self.connection_config(self.options),
            **table_place(self.options, key, split, self.where),
            **config_fields(self.options),
            "connector": self.connector,
        }

    @cached_property
    def cfg(self) -> TableConfig:
        return self.config_class(**self.settings())

    @cached_property
    def schemas(self) -> dict[str | None, StructType]:
        """Each table's stream schema (the one table's under its name, None for a query)."""
        structs = {t: from_arrow_schema(s, True) for t, s in self.stream_schemas.items()}
        if None in structs:
            return {self.cfg.table: structs[None]}
        return structs

    @property
    def tables_read(self) -> list[str | None]:
        return list(self.schemas)

    @property
    def multi(self) -> bool:
        return bool(self.cfg.patterns)

    @property
    def cdc(self) -> bool:
        return self.cfg.mode == "cdc"

    def adds_tables(self) -> bool:
        return self.finds_tables and self.multi and self.cdc

    # ---------------------------------------------------------------- at CREATE
    def check(self) -> None:
        check_source_options(self.options, self.where)
        self.cfg  # noqa: B018 (its table names are checked as it is made)

    def _discovered(self) -> list[Table]:
        """The tables read (one per pattern's match), asked of the database once, checking
        that the ordering columns exist."""
        if self._found is None:
            found = self.discover(self.cfg, self.cdc, self.where)
            for t in found:
                names = {n for n, _d, _s in t.columns}
                missing = [c for c in self.cfg.ordering if c not in names]
                if missing:
                    raise PlanError(
                        f"{self.where}: {t.qualified} has no column {', '.join(missing)}"
                    )
            if self.cfg.signal_table:
                self._check_signals()
            self._found = found
        return self._found

    def _check_signals(self) -> None:
        try:
            self._signal_rows()
        except Exception as e:
            name = self.cfg.signal_table
            raise PlanError(
                f"{self.where}: signal.table {name} cannot be read: {short_error(str(e))}"
                f" (create it: {signals.CREATE.format(name=name)})"
            ) from None

    def tables(self) -> list[StreamTable] | None:
        if not self.multi:
            return None
        return [StreamTable(t.name, t.ddl(self.cdc), t.key) for t in self._discovered()]

    def schema(self) -> str:
        return self._discovered()[0].ddl(self.cdc)

    def key(self) -> tuple[str, ...]:
        return tuple(self._discovered()[0].key)

    def total_records(self) -> int | None:
        """A cdc snapshot's rows (progress)."""
        if not (self.cdc and self.cfg.snapshot == "initial"):
            return None
        return self.count(self.cfg, self.where)

    def endpoint(self) -> str | None:
        return endpoint(self.cfg.connection)

    def available_now(self) -> None:
        self.once = True  # the run's end is fixed at its first latest_offset

    # ---------------------------------------------------------------- what a database supplies
    @staticmethod
    def connection_config(options: dict[str, Any]) -> dict:
        """The connection settings of the options."""
        raise NotImplementedError

    @staticmethod
    def discover(cfg, cdc: bool, where: str) -> list[Table]:
        """At CREATE: the tables read (checking what cdc needs), a PlanError naming what is
        wrong."""
        raise NotImplementedError

    @staticmethod
    def count(cfg, where: str) -> int:
        """The rows of the tables read (a snapshot's progress)."""
        raise NotImplementedError

    def connect(self):
        raise NotImplementedError

    def is_closed(self, conn) -> bool:
        raise NotImplementedError

    def describe(self, conn, table: str | None) -> Table:
        raise NotImplementedError

    def dialect(self, conn, table: Table) -> polling.Db:
        raise NotImplementedError

    def relation(self, table: str | None) -> str:
        raise NotImplementedError

    def log_start(self, conn):
        """cdc: the change-log position from which changes will be read (made durable)."""
        raise NotImplementedError

    def log_now(self, conn):
        raise NotImplementedError

    def log_scan(self, conn, start, target) -> Window:
        raise NotImplementedError

    def log_done(self, conn, position) -> None:
        """Every change up to `position` is processed (e.g. advance a replication slot)."""

    def log_read(
        self, conn, part: Range
    ) -> Iterator[tuple[str | None, pa.RecordBatch] | DeadLetter]:
        """(table, its change rows) of the captured tables' changes in the range; changes it
        cannot read as DeadLetters when `self.tolerant`, else a ConnectQLError (cannot_read)
        naming the table and the change's position."""
        raise NotImplementedError

    @property
    def live_schemas(self) -> dict[str | None, StructType]:
        """The schemas of the tables still read (less the failed ones)."""
        return {t: s for t, s in self.schemas.items() if t not in self.failed}

    def cannot_read(self, table: str | None, message: str, hint: str) -> ConnectQLError:
        """What a value that cannot be read raises with errors.tolerance = 'none': with several
        tables, TableFailed (that table stops, the others go on); with one, the connector fails."""
        if self.multi and table is not None:
            return TableFailed(
                table, f"{message} (the table stops, the other tables go on; {hint})"
            )
        return cannot_read(table, message, hint)

    @property
    def tolerant(self) -> bool:
        """A change or range that cannot be read goes to the dead-letter stream and the rest
        goes on (errors.tolerance = 'all'); else it fails the connector."""
        return self.cfg.tolerance == "all"

    def log_snapshot(self, conn, table: str | None, part: Range) -> Iterator[pa.RecordBatch]:
        """cdc: a table without a key, read whole; a database that can should read it as it
        was at the change-log position `part.log_from`, so that no row is both in it and in
        the changes after that position. By default: as it is now."""
        db = self.dialect(conn, self.meta(conn, table))
        return polling.read_range(db, self._src(table), [], None, None)

    def estimate_rows(self, conn, table: str) -> int | None:
        """The database's estimate of a table's rows (its statistics, no count): a snapshot's
        progress in connector_tables; None when it has none."""
        return None

    def _estimate(self, table: str) -> int | None:
        """A table's rows for progress: the database's estimate, else counted up to
        LAG_ROWS_CAP; asked once per process."""
        if table not in self._estimates:
            try:
                rows = self.estimate_rows(self._connection(), table)
                if not rows:  # no statistics yet (a table just filled)
                    rows = polling.rows_after(
                        self._db(table), self._src(table), [], None, LAG_ROWS_CAP
                    )
            except Exception:  # advisory: progress without an estimate rather than no snapshot
                rows = None
            self._estimates[table] = rows
        return self._estimates[table]

    def find_tables(self) -> list[str]:
        """While running: the tables the patterns match now that it could capture."""
        return [t.name for t in self.discover(self.cfg, self.cdc, self.where)]

    def log_order(self, position):
        """A sortable form of a position."""
        return position

    def log_after(self, position):
        """A position after every change up to `position` and before any later one: that of a
        table's rows snapshotted while the change log flows (finds_tables)."""
        raise NotImplementedError

    def log_tables_changed(self, conn) -> None:
        """The tables read changed (one was added): e.g. bring a publication up to date."""

    def log_behind(self, conn, position) -> int | None:
        """Bytes of change log the server has written after `position` (None: unknown)."""
        return None

    def with_snapshot_columns(self, batch: pa.RecordBatch, table, position) -> pa.RecordBatch:
        raise NotImplementedError

    # ---------------------------------------------------------------- plumbing
    def _connection(self):
        if self._conn is None or self.is_closed(self._conn):
            self._conn = self.connect()
        return self._conn

    def meta(self, conn, table: str | None) -> Table:
        """A table's column types and key, looked up once per process. A table of several
        that was dropped stops alone (TableFailed): its stream keeps what was read, and the
        changes not read before the DROP are lost with the table's definition."""
        if table not in self._metas:
            try:
                self._metas[table] = self.describe(conn, table)
            except TableMissing as e:
                if not (self.multi and table is not None):
                    raise
                raise TableFailed(
                    table,
                    f"{short_error(str(e))}: dropped, its stream's changes end (the other tables"
                    " go on; RESTART CONNECTOR reads it again once it exists)",
                ) from None
        return self._metas[table]

    def _db(self, table: str | None, conn=None) -> polling.Db:
        conn = conn or self._connection()
        return self.dialect(conn, self.meta(conn, table))

    def key_of(self, table: str | None) -> list[str]:
        return list(self.meta(self._connection(), table).key)

    def _src(self, table: str | None) -> polling.Source:
        data = [f for f in self.schemas[table].fields if f.name not in META_COLUMNS]
        return polling.Source(self.relation(table), StructType(data))

    def _out(self, table: str | None, batch: pa.RecordBatch):
        """What read yields of a table's rows: (table, rows) with several tables."""
        return (table, batch) if self.multi else batch

    def _due(self) -> bool:
        """Poll the database at most every poll_ms (Spark asks many times a second)."""
        now = time.monotonic()
        if not self.once and now - self._polled_at < self.cfg.poll_ms / 1000:
            return False
        self._polled_at = now
        return True

    def _offset(self, after, position, phase: str, upto=None, table=None) -> dict:
        """`after`: the last key read; `upto`: the snapshot's last key (fixed key order)."""
        offset = {"after": after, self.LOG_KEY: position, "phase": phase, "upto": upto}
        return {**offset, "table": table} if self.multi else offset

    # ---------------------------------------------------------------- offsets
    def initial_offset(self) -> dict:
        if self.cfg.mode == "bulk":
            return {"run": 0}
        if not self.cdc:
            return {"after": {t: None for t in self.tables_read} if self.multi else None}
        position = self.log_start(self._connection())
        if self.cfg.snapshot != "initial":
            return self._offset(None, position, "stream")
        return self._snapshot_from(0, position)

    def _snapshot_from(self, index: int, position) -> dict:
        """The offset before the snapshot of the first table from tables[index] with rows to
        read. Its snapshot ends at its largest key now: rows added later arrive as changes (a
        snapshot chasing inserts would never end)."""
        for table in self.tables_read[index:]:
            key = self.key_of(table)
            if not key:  # the whole table is one chunk
                return self._offset(None, position, "snapshot", None, table)
            upto = polling.last_key(self._db(table), self._src(table), key)
            if upto:
                return self._offset(None, position, "snapshot", upto, table)
        return self._offset(None, position, "stream")

    def latest_offset(self, start: dict) -> dict:
        """Where the next batch ends (`start`: none is due)."""
        if self.once and self.cdc and self.target is None:
            self.target = self.log_now(self._connection())  # where the run ends
        return self._latest(start)

    def reported_latest(self, latest: dict) -> dict | None:
        """{"lag": n, "unit": ...}: how far the source is behind `latest`, the end of the batch
        last planned (the engine shows n as the connector's lag), asked of the database at most
        every LAG_EVERY_S; None where the source cannot say."""
        now = time.monotonic()
        if now - self._lag_at >= LAG_EVERY_S:
            self._lag_at = now
            try:
                self._lag = self._lag_after(latest)
            except Exception:  # advisory: a failed count must not fail the batch
                self._lag = None
        if self._lag is None:
            return None
        following = self.cdc and latest.get("phase") == "stream"
        return {"lag": self._lag, "unit": "bytes" if following else "rows"}

    def _lag_after(self, end: dict) -> int | None:
        """cdc following the log: bytes of log not yet read; incremental: rows not yet read
        (counted up to LAG_ROWS_CAP); a snapshot or a bulk run: None (progress shows it)."""
        if self.cfg.mode == "bulk" or end.get("phase") == "snapshot":
            return None
        if self.cdc:
            return self.log_behind(self._connection(), end[self.LOG_KEY])
        after = end["after"] if self.multi else {self.tables_read[0]: end["after"]}
        ordering = self.cfg.ordering
        return sum(
            polling.rows_after(self._db(t), self._src(t), ordering, a, LAG_ROWS_CAP)
            for t, a in after.items()
        )

    def _latest(self, start: dict) -> dict:
        if self.cfg.mode == "bulk":
            return self._next_run(start)
        if not self.cdc:
            return self._next_poll(start) if self._due() else start
        if start["phase"] == "snapshot":
            return self._next_tables(start) if self.multi else self._next_chunk(start)
        if not self._due():
            return start
        if self.multi and self.finds_tables:
            return self._next_with_tables(start)
        return self._next_changes(start)

    # ------------------------------------------------- tables added while the change log flows
    # A table added to a cdc source of several tables while it follows the change log (found,
    # or by ALTER) is snapshotted in chunks between the log's batches, each chunk read after
    # the log's last batch and positioned after it: the log's later batches carry every change
    # made since, so the table converges as the initial snapshot does. The offset says which
    # tables the log covers ("tables"), the snapshot under way ("catchup": [table, last key
    # read, last key, the SNAPSHOT TABLE request it serves]), the requests served
    # ("snapshotted"), the chunk a batch reads ("chunk") and whose turn it was ("turn").

    def _next_with_tables(self, start: dict) -> dict:
        # what the batch ending at `start` read ("parts", "chunk") is no part of the next's
        done = {k: v for k, v in start.items() if k not in ("parts", "chunk")}
        start = self._signalled(done)
        start = {**start, "tables": self._covered(start)}
        pending = [t for t in self.tables_read if t not in start["tables"] and t not in self.failed]
        if not pending:
            self._look_for_tables()
            return self._carried(self._next_changes(start), start, None)
        if start.get("turn") != "chunk":
            return self._next_added_chunk(start, pending[0])
        end = self._next_changes(start)
        if end is start:  # the log has nothing new: on with the snapshot
            return self._next_added_chunk(start, pending[0])
        return self._carried(end, start, "log")

    def _covered(self, start: dict) -> list:
        """The tables whose changes the log carries from `start` on (an offset of before
        "tables": each table read but those added since), less those asked to be read again
        (ALTER ... SNAPSHOT TABLE: a request newer than the offset's "snapshotted" says)."""
        if "tables" in start:
            base = [t for t in start["tables"] if t in self.tables_read]
        else:
            base = [t for t in self.tables_read if t not in self.added]
        served = start.get("snapshotted") or {}
        return [t for t in base if self._asked(start, t) <= served.get(t, 0)]

    def _asked(self, start: dict, table: str) -> int:
        """The snapshots of `table` asked so far: by ALTER ... SNAPSHOT TABLE and by signals."""
        return self.snapshots.get(table, 0) + (start.get("signalled") or {}).get(table, 0)

    def _signalled(self, start: dict) -> dict:
        """`start` with the signal table's new snapshot requests (signal.table), read at most
        every SIGNAL_EVERY_S."""
        now = time.monotonic()
        if not self.cfg.signal_table or now - self._signals_at < signals.SIGNAL_EVERY_S:
            return start
        self._signals_at = now
        return signals.served(start, self._signal_rows(), self.tables_read)

    def _signal_rows(self) -> list[tuple[str, str, str]]:
        schema, name = self.place[1](self.cfg.signal_table, self.cfg.schema)
        where = replace(self.cfg, schema=schema, table=name, patterns=(), query=None)
        db = self.dialect(self._connection(), Table(schema, name, (), ()))
        return signals.read(db, where.relation())

    @staticmethod
    def _carried(end: dict, start: dict, turn: str | None) -> dict:
        """A log batch's end carrying the tables and the snapshot under way from `start`."""
        if end is start:
            return start
        kept = ("tables", "catchup", "snapshotted", "signals", "signalled")
        kept = {k: start[k] for k in kept if k in start}
        return {**end, **kept, **({"turn": turn} if turn else {})}

    def _next_added_chunk(self, start: dict, table: str) -> dict:
        """The end of a batch that reads the next chunk of `table` (snapshot_rows rows up to its
        largest key when its snapshot began; a table without a key whole), at the log position
        of `start`; once it is read, the log covers it."""
        catchup, asked = start.get("catchup"), self._asked(start, table)
        key = self.key_of(table)
        if catchup is None or catchup[0] != table or catchup[3:4] != [asked]:
            self.log_tables_changed(self._connection())  # before its snapshot begins
            upto = polling.last_key(self._db(table), self._src(table), key) if key else None
            catchup = [table, None, upto, asked, 0, self._estimate(table)]
        after, upto = catchup[1], catchup[2]
        read, estimate = [*catchup[4:6], 0, None][:2]  # an offset of before them has neither
        rows = 0
        if not key:
            bound = [] if after is None else None
        else:
            db, src = self._db(table), self._src(table)
            bound, rows = (
                polling.chunk_end(db, src, key, after, self.cfg.snapshot_rows, upto)
                if upto
                else (None, 0)
            )
        end = {k: v for k, v in start.items() if k != "catchup"}
        if not bound:
            served = {**(start.get("snapshotted") or {}), table: asked} if asked else {}
            done = {"snapshotted": served} if served else {}
            return {**end, "tables": [*start["tables"], table], "turn": "chunk", **done}
        return {
            **end,
            "catchup": [table, bound, upto, asked, read + rows, estimate],
            "chunk": [table, after, bound],
            "turn": "chunk",
        }

    def _look_for_tables(self) -> None:
        """Every DISCOVER_EVERY_S, SchemaEvolved when the patterns match tables not read yet
        (the worker adds them, with their streams, and starts the source again)."""
        now = time.monotonic()
        if self.once or now - self._looked_at < DISCOVER_EVERY_S:
            return
        self._looked_at = now
        try:
            found = self.find_tables()
        except Exception:  # e.g. a keyless table it cannot capture yet: looked at again later
            return
        new = [t for t in found if t not in self.schemas]
        if new:
            raise SchemaEvolved(f"tables found: {', '.join(new)}")

    def _next_run(self, start: dict) -> dict:
        if self.once:
            return {"run": 1} if start["run"] == 0 else start
        return {"run": start["run"] + 1} if self._due() else start

    def _next_poll(self, start: dict) -> dict:
        if not self.multi:
            bound = self._bound(self.tables_read[0], start["after"])
            return {"after": bound} if bound else start
        after = {
            t: self._bound(t, start["after"].get(t)) or start["after"].get(t)
            for t in self.tables_read
        }
        return {"after": after} if after != start["after"] else start

    def _bound(self, table: str | None, after):
        ordering = self.cfg.ordering
        db, src = self._db(table), self._src(table)
        return polling.chunk_end(db, src, ordering, after, self.cfg.batch_rows)[0]

    def _next_chunk(self, start: dict) -> dict:
        table = start.get("table", self.tables_read[0])
        key, after, position = self.key_of(table), start["after"], start[self.LOG_KEY]
        if not key and after is None:  # no primary key: the whole table; [] marks it read
            return self._offset([], position, "snapshot", None, table)
        upto = start.get("upto")
        db, src = self._db(table), self._src(table)
        bound = key and polling.chunk_end(db, src, key, after, self.cfg.snapshot_rows, upto)[0]
        if not bound:
            return self._snapshot_from(self.tables_read.index(table) + 1, position)
        return self._offset(bound, position, "snapshot", upto, table)

    def _next_tables(self, start: dict) -> dict:
        """Several tables: the next snapshot batch takes up to batch.rows rows from as many
        tables as that needs (the rest of one, small ones whole, the start of the next), so
        that small tables do not cost a micro-batch each; the offset lists its ranges."""
        position, budget, parts = (
            start[self.LOG_KEY],
            wide_batch_rows(self.cfg.batch_rows, max(map(len, self.schemas.values()))),
            [],
        )
        table, after, upto = start["table"], start["after"], start.get("upto")
        read = start.get("read", 0)  # rows of `table` read so far (progress)
        while True:
            key = self.key_of(table)
            if not key and after is None:  # no primary key: the whole table; [] marks it read
                rows = polling.rows_after(self._db(table), self._src(table), [], None, budget + 1)
                if parts and rows > budget:
                    break
                parts.append([table, None, None])
                budget, after, read = budget - rows, [], read + rows
            elif key:
                db, src = self._db(table), self._src(table)
                bound, rows = polling.chunk_end(db, src, key, after, budget, upto)
                if bound:
                    parts.append([table, after, bound])
                    after, read = bound, read + rows
                if rows >= budget:  # the table may have more: the next batch's
                    break
                budget -= rows
            end = self._snapshot_from(self.tables_read.index(table) + 1, position)
            if end["phase"] != "snapshot":
                return {**end, "parts": parts}
            table, after, upto, read = end["table"], end["after"], end["upto"], 0
            if budget <= 0:
                break
        progress = {"read": read, "estimate": self._estimate(table)}
        return {
            **self._offset(after, position, "snapshot", upto, table),
            "parts": parts,
            **progress,
        }

    def _next_changes(self, start: dict) -> dict:
        conn, begin = self._connection(), start[self.LOG_KEY]
        self.log_done(conn, begin)  # the batch before `start` is done
        window = self.log_scan(conn, begin, self.target)
        end = window.last_relevant
        if end is None and (window.full or self._heartbeat_due()):
            end = window.last_commit or (None if self.once else self.log_now(conn))
        if end is None or self.log_order(end) <= self.log_order(begin):
            return start
        self._beat_at = time.monotonic()
        return self._offset(None, end, "stream")

    def _heartbeat_due(self) -> bool:
        return time.monotonic() - self._beat_at >= self.cfg.heartbeat_ms / 1000

    def commit(self, end: dict) -> None:
        if self.cdc and end.get("phase") == "stream":
            self.log_done(self._connection(), end[self.LOG_KEY])

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    # ---------------------------------------------------------------- partitions and reads
    def partitions(self, start: dict, end: dict) -> list[dict]:
        return [asdict(p) for p in self._partitions(start, end)]

    def _partitions(self, start: dict, end: dict) -> list[Range | Group]:
        if self.cfg.mode == "bulk":
            return (
                [r for t in self.tables_read for r in self._whole_table(t)]
                if end["run"] > start["run"]
                else []
            )
        if not self.cdc:
            return self._polled(start["after"], end["after"])
        if "parts" in end:  # several tables' snapshot ranges
            return self._grouped(end["parts"], start[self.LOG_KEY])
        if start["phase"] == "snapshot":
            table = start.get("table", self.tables_read[0])
            if (
                start["after"] == []
                or end["phase"] != "snapshot"
                or end.get("table", table) != table
            ):
                return []  # read already, or the table's last range was empty
            upto = end["after"]
            return self._split(
                table, start["after"], upto or None, self.key_of(table), start[self.LOG_KEY]
            )
        begin, finish = start[self.LOG_KEY], end[self.LOG_KEY]
        if "chunk" in end:  # a table added while the log flows, read after the log's batch
            table, after, upto = end["chunk"]
            at = self.log_after(finish)
            return self._split(table, after, upto or None, self.key_of(table), at)
        if self.log_order(finish) <= self.log_order(begin):
            return []
        return [Range("changes", None, None, begin, finish)]

    def _grouped(self, parts: list, position) -> list[Range | Group]:
        """The ranges of `parts` ([table, after, upto]) in at most tasks.max partitions."""
        ranges = [
            r
            for table, after, upto in parts
            for r in self._split(table, after, upto, self.key_of(table), position)
        ]
        tasks = max(1, self.cfg.tasks)
        if len(ranges) <= tasks:
            return ranges
        return [Group(tuple(ranges[i::tasks])) for i in range(tasks)]

    def _polled(self, after, upto) -> list[Range]:
        ordering = self.cfg.ordering
        if not self.multi:
            return self._split(self.tables_read[0], after, upto, ordering)
        return [
            r
            for t in self.tables_read
            if upto.get(t) != after.get(t)
            for r in self._split(t, after.get(t), upto.get(t), ordering)
        ]

    def _whole_table(self, table: str | None) -> list[Range]:
        """Bulk: the table in tasks.max key ranges when it has a single integer key."""
        key = self.key_of(table) if not self.cfg.query else []
        if self.cfg.tasks <= 1 or len(key) != 1:
            return [Range("rows", None, None, table=table)]
        top = polling.last_key(self._db(table), self._src(table), key)
        if not top:
            return []
        ranges = self._split(table, None, top, key)
        return [*ranges[:-1], replace(ranges[-1], upto=None)]  # rows added since: last

    def _split(self, table, after, upto, columns, position=None) -> list[Range]:
        if self.cfg.tasks <= 1 or len(columns) != 1 or upto is None:
            return [Range("rows", after, upto, position, table=table)]
        low = None if after else polling.smallest(self._db(table), self._src(table), columns[0])
        if low is None and not after:
            return [Range("rows", after, upto, position, table=table)]
        ranges = polling.split(after, upto, self.cfg.tasks, low)
        return [Range("rows", a, b, position, table=table) for a, b in ranges]

    def read(self, partition: dict) -> Iterator[Any]:
        """A partition's rows: record batches ((table, batch) pairs with several tables) and
        DeadLetters."""
        part, conn = partition_of(partition), self.connect()
        try:
            if not isinstance(part, Group) and part.table not in self.failed:
                yield from self._read(conn, part)
            for one in part.parts if isinstance(part, Group) else ():
                if one.table not in self.failed:
                    yield from self._read(conn, one, fast=False)
        finally:
            conn.close()

    def _read(self, conn, part: Range, fast: bool = True) -> Iterator[Any]:
        """One range's rows; not `fast`: on `conn`, not through connectorx, whose session and
        threads per read cost more than a small table's rows (a group of small tables)."""
        if part.kind == "changes":
            yield from self._changes_out(self.log_read(conn, part))
            return
        table = part.table
        db = self.dialect(conn, self.meta(conn, table))
        if not fast:
            db.address = None
        incremental = self.cfg.mode == "incremental"
        columns = self.cfg.ordering if incremental else self.meta(conn, table).key
        if self.cdc and not columns:
            rows = self.log_snapshot(conn, table, part)
        else:
            rows = polling.read_range(db, self._src(table), columns, part.after, part.upto)
        try:
            for batch in rows:
                if self.cdc:
                    batch = self.with_snapshot_columns(batch, table, part.log_from)
                yield self._out(table, batch)
        except self.UNREADABLE as e:
            yield self._unreadable_range(part, e)

    def _changes_out(self, changes: Iterator) -> Iterator[Any]:
        """What read yields of log_read's (table, rows) pairs and DeadLetters."""
        for change in changes:
            yield change if isinstance(change, DeadLetter) else self._out(*change)

    def _unreadable_range(self, part: Range, e: Exception) -> DeadLetter:
        """A range of a table's rows that cannot be read (a value its Spark type cannot hold):
        a dead letter naming the table and the range when `self.tolerant` (the table's other
        ranges and the other tables go on), else a ConnectQLError naming them."""
        table = part.table
        where = "" if part.after is None else f" after key {part.after}"
        where += "" if part.upto is None else f" up to key {part.upto}"
        message = (
            f"{f'table {table}' if table else 'the query'}: the rows{where} cannot be read:"
            f" {type(e).__name__}:"
            f" {short_error(str(e))[:300]}"
        )
        if not self.tolerant:
            hint = "errors.tolerance = 'all' sends them to the dead-letter stream and goes on"
            raise self.cannot_read(table, message, hint) from None
        offset = {"table": table, "after": part.after, "upto": part.upto, "mode": self.cfg.mode}
        record = {
            "table": table, "ts_ms": time.time_ns() // 1_000_000, "offset": offset,
            "error_class": type(e).__name__, "error_message": message,
            "raw_record": {"table": table, "after": part.after, "upto": part.upto},
        }  # fmt: skip
        return dead_letter(record)
