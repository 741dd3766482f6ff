"""The Spark reader every database table source shares (PostgreSQL, MySQL): offsets, snapshot
chunks, incremental polling, bulk copies and splitting into tasks, for one table or several
(multitable: packed chunks; snapshots table after table, then one change log for all). A
database subclass supplies its connection, its table description, its SQL dialect (polling.Db)
and, for `cdc`, its change log (slot LSNs, binlog coordinates) through the `log_*` hooks."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from connectql.connectors.options import from_spark_options, to_spark_options
from connectql.connectors.relational import polling
from connectql.connectors.relational.changerows import (
    UNREADABLE,
    arrow_schema,
    cannot_read,
    dead_letters,
)
from connectql.connectors.relational.sink import META_COLUMNS
from connectql.connectors.relational.source import BATCH_ROWS, SNAPSHOT_ROWS
from connectql.errors import ConnectQLError, TableFailed
from connectql.errortext import short_error
from connectql.toolkit import packed
from connectql.toolkit.envelope import DEAD_LETTER_COLUMN
from connectql.toolkit.packed import DEAD_LETTERS, FAILED_OPTION

LAG_EVERY_S = 1.0  # how often reportLatestOffset asks the database how far behind it is
LAG_ROWS_CAP = 1_000_000  # an incremental source's lag is counted up to this many rows

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
    """A table source's settings as they travel through Spark's reader options; databases add
    their own fields in a subclass."""

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

    def for_table(self, table: str | None):
        """These settings for one of the source's tables."""
        return self if table == self.table else replace(self, table=table, patterns=())

    def to_options(self) -> dict[str, str]:
        return to_spark_options(dict(self.__dict__))

    @classmethod
    def from_options(cls, options: dict[str, str]):
        body = from_spark_options(options)
        body["connector"] = options.get("connectql.connector", "")
        return cls(**body)

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
class Range(InputPartition):
    kind: str  # 'rows' (a key or ordering range) or 'changes' (from the change log)
    after: list | None
    upto: list | None
    log_from: Any = None  # change-log positions: snapshot rows' position, or changes' range
    log_to: Any = None
    table: str | None = None  # whose rows ('rows'); None: the source's one table


@dataclass(frozen=True)
class Group(InputPartition):
    """Several ranges read by one task, one after the other (small tables' snapshots)."""

    parts: tuple[Range, ...]


# rows x columns of one multi-table snapshot batch at most: the batch is collected whole in the
# driver (when its rows travelled in one union schema of every table's columns, 1,000 tables'
# 6,000 columns x 100,000 rows lost the 2 GB JVM)
BATCH_CELLS = 20_000_000


def wide_batch_rows(batch_rows: int, columns: int) -> int:
    """batch.rows, fewer when the widest table's row is wide (BATCH_CELLS)."""
    return max(1, min(batch_rows, BATCH_CELLS // max(1, columns)))


class TableStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets: cdc {"after": last key read, LOG_KEY: change-log position, "phase":
    "snapshot"|"stream", "upto": the snapshot's last key} (keys as text lists or null), plus
    "table" (the table being snapshotted) and "parts" (the [table, after, upto] ranges the
    batch ending here reads, across tables) with several tables; incremental {"after": ordering
    text list or null}, with several tables {"after": {table: ordering text list or null}};
    bulk {"run": n}."""

    config_class: type[TableConfig] = TableConfig
    LOG_KEY = "log"
    # what reading a value may raise when the value does not fit its Spark type (a database
    # adds its driver's data errors)
    UNREADABLE: tuple[type[Exception], ...] = UNREADABLE

    def __init__(self, schema: StructType, options: dict[str, str]):
        self.cfg = self.config_class.from_options(options)
        # one table with errors.tolerance = 'all': its rows carry the toolkit's dead-letter
        # column (null but in a dead letter), which no table has, so it is not read
        self.out = arrow_schema(schema) if DEAD_LETTER_COLUMN in schema.fieldNames() else None
        schema = StructType([f for f in schema.fields if f.name != DEAD_LETTER_COLUMN])
        self.schema = schema  # several tables: packed.PACKED_DDL
        parts = packed.option_schemas(options)
        self.packed = parts is not None  # rows sent as packed.pack chunks
        self.multi = self.packed and options.get(packed.ONE_OPTION) != "true"
        if self.packed and not self.multi:  # one table, packed: keyed as an unpacked one is
            parts = {self.cfg.table: parts[packed.ONE_KEY]}
        self.schemas: dict[str | None, StructType] = parts or {self.cfg.table: schema}
        self.tables: list[str | None] = list(self.schemas)
        # several tables: those stopped by a value they cannot read (errors.tolerance = 'none',
        # the catalog's tables_failed): not read any more
        self.failed = frozenset(json.loads(options.get(FAILED_OPTION) or "[]"))
        self._arrows: dict[str | None, pa.Schema] = {}  # several tables: each one's stream's
        self.cdc = self.cfg.mode == "cdc"
        self.available_now = False
        self.target = None  # available-now: the log position where the run ends
        self._polled_at = 0.0
        self._beat_at = time.monotonic()
        self._conn = None
        self._metas: dict[str | None, Table] = {}
        self._planned: dict | None = None  # the end of the batch last planned
        self._lag: int | None = None
        self._lag_at = 0.0

    # ---------------------------------------------------------------- what a database supplies
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

    def log_read(self, conn, part: Range) -> Iterator[tuple[str | None, pa.RecordBatch]]:
        """(table, its change rows) of the captured tables' changes in the range; changes it
        cannot read as (DEAD_LETTERS, changerows.dead_letters(...)) when `self.tolerant`,
        else a ConnectQLError naming the table and the change's position."""
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
        return self.cfg.tolerance == "all" and (self.multi or self.out is not None)

    def log_snapshot(self, conn, table: str | None, part: Range) -> Iterator[pa.RecordBatch]:
        """cdc: a table without a key, read whole; a database that can should read it as it
        was at the change-log position `part.log_from`, so that no row is both in it and in
        the changes after that position. By default: as it is now."""
        db = self.dialect(conn, self.meta(conn, table))
        return polling.read_range(db, self._src(table), [], None, None)

    def log_order(self, position):
        """A sortable form of a position."""
        return position

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
        """A table's column types and key, looked up once per process."""
        if table not in self._metas:
            self._metas[table] = self.describe(conn, table)
        return self._metas[table]

    def _db(self, table: str | None, conn=None) -> polling.Db:
        conn = conn or self._connection()
        return self.dialect(conn, self.meta(conn, table))

    def key_of(self, table: str | None) -> list[str]:
        return list(self.meta(self._connection(), table).key)

    def _src(self, table: str | None) -> polling.Source:
        data = [f for f in self.schemas[table].fields if f.name not in META_COLUMNS]
        return polling.Source(self.relation(table), StructType(data))

    def _shape(self, table: str | None, batch: pa.RecordBatch) -> pa.RecordBatch:
        if self.packed:
            key = table if self.multi else packed.ONE_KEY
            return packed.pack(key, batch, self._arrow(table))
        if self.out is None:
            return batch
        if table == DEAD_LETTERS:  # changerows.dead_letters: the records are in __source
            return self._letters([json.loads(r) for r in batch.column("__source").to_pylist()])
        letter = pa.nulls(batch.num_rows, pa.string())
        return pa.RecordBatch.from_arrays([*batch.columns, letter], schema=self.out)

    def _arrow(self, table: str) -> pa.Schema:
        """A table's stream's Arrow schema (the dead letters': their __source alone)."""
        if table == DEAD_LETTERS:  # changerows.dead_letters: the records are in __source
            return pa.schema([("__source", pa.string())])
        if table not in self._arrows:
            self._arrows[table] = arrow_schema(self.schemas[table])
        return self._arrows[table]

    def _letters(self, records: list[dict]) -> pa.RecordBatch:
        """One table's dead letters: rows with only the toolkit's dead-letter column, as the
        several-table ones become dead-letter rows (runtime/deadletters.py)."""
        n = len(records)
        texts = [
            json.dumps(
                {
                    "source_offset": json.dumps(r.get("offset"), sort_keys=True, default=str),
                    "error_class": r.get("error_class"),
                    "error_message": r.get("error_message"),
                    "raw_record": _text(r.get("raw_record")),
                }
            )
            for r in records
        ]
        arrays = [
            pa.array(texts, pa.string()) if f.name == DEAD_LETTER_COLUMN else pa.nulls(n, f.type)
            for f in self.out
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=self.out)

    def _due(self) -> bool:
        """Poll the database at most every poll_ms (Spark asks many times a second)."""
        now = time.monotonic()
        if not self.available_now and now - self._polled_at < self.cfg.poll_ms / 1000:
            return False
        self._polled_at = now
        return True

    def _offset(self, after, position, phase: str, upto=None, table=None) -> dict:
        """`after`: the last key read; `upto`: the snapshot's last key (fixed key order)."""
        offset = {"after": after, self.LOG_KEY: position, "phase": phase, "upto": upto}
        return {**offset, "table": table} if self.multi else offset

    # ---------------------------------------------------------------- offsets
    def initialOffset(self) -> dict:  # noqa: N802 (Spark's names)
        if self.cfg.mode == "bulk":
            return {"run": 0}
        if not self.cdc:
            return {"after": {t: None for t in self.tables} if self.multi else None}
        position = self.log_start(self._connection())
        if self.cfg.snapshot != "initial":
            return self._offset(None, position, "stream")
        return self._snapshot_from(0, position)

    def _snapshot_from(self, index: int, position) -> dict:
        """The offset before the snapshot of the first table from tables[index] with rows to
        read. Its snapshot ends at its largest key now: rows added later arrive as changes (a
        snapshot chasing inserts would never end)."""
        for table in self.tables[index:]:
            key = self.key_of(table)
            if not key:  # the whole table is one chunk
                return self._offset(None, position, "snapshot", None, table)
            upto = polling.last_key(self._db(table), self._src(table), key)
            if upto:
                return self._offset(None, position, "snapshot", upto, table)
        return self._offset(None, position, "stream")

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self.available_now = True
        if self.cdc:
            self.target = self.log_now(self._connection())

    def latestOffset(self, start: dict, limit=None) -> dict:  # noqa: N802
        self._planned = self._latest(start)
        return self._planned

    def reportLatestOffset(self) -> dict | None:  # noqa: N802
        """{"lag": n, "unit": ...}: how far the source is behind the end of the batch last planned (the
        engine shows n as the connector's lag), asked of the database at most every LAG_EVERY_S;
        None where the source cannot say."""
        now = time.monotonic()
        if self._planned is not None and now - self._lag_at >= LAG_EVERY_S:
            self._lag_at = now
            try:
                self._lag = self._lag_after(self._planned)
            except Exception:  # advisory: a failed count must not fail the batch
                self._lag = None
        if self._lag is None:
            return None
        following = self.cdc and self._planned.get("phase") == "stream"
        return {"lag": self._lag, "unit": "bytes" if following else "rows"}

    def _lag_after(self, end: dict) -> int | None:
        """cdc following the log: bytes of log not yet read; incremental: rows not yet read
        (counted up to LAG_ROWS_CAP); a snapshot or a bulk run: None (progress shows it)."""
        if self.cfg.mode == "bulk" or end.get("phase") == "snapshot":
            return None
        if self.cdc:
            return self.log_behind(self._connection(), end[self.LOG_KEY])
        after = end["after"] if self.multi else {self.tables[0]: end["after"]}
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
        return self._next_changes(start)

    def _next_run(self, start: dict) -> dict:
        if self.available_now:
            return {"run": 1} if start["run"] == 0 else start
        return {"run": start["run"] + 1} if self._due() else start

    def _next_poll(self, start: dict) -> dict:
        if not self.multi:
            bound = self._bound(self.tables[0], start["after"])
            return {"after": bound} if bound else start
        after = {
            t: self._bound(t, start["after"].get(t)) or start["after"].get(t) for t in self.tables
        }
        return {"after": after} if after != start["after"] else start

    def _bound(self, table: str | None, after):
        ordering = self.cfg.ordering
        db, src = self._db(table), self._src(table)
        return polling.chunk_end(db, src, ordering, after, self.cfg.batch_rows)[0]

    def _next_chunk(self, start: dict) -> dict:
        table = start.get("table", self.tables[0])
        key, after, position = self.key_of(table), start["after"], start[self.LOG_KEY]
        if not key and after is None:  # no primary key: the whole table; [] marks it read
            return self._offset([], position, "snapshot", None, table)
        upto = start.get("upto")
        db, src = self._db(table), self._src(table)
        bound = key and polling.chunk_end(db, src, key, after, self.cfg.snapshot_rows, upto)[0]
        if not bound:
            return self._snapshot_from(self.tables.index(table) + 1, position)
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
        while True:
            key = self.key_of(table)
            if not key and after is None:  # no primary key: the whole table; [] marks it read
                rows = polling.rows_after(self._db(table), self._src(table), [], None, budget + 1)
                if parts and rows > budget:
                    break
                parts.append([table, None, None])
                budget, after = budget - rows, []
            elif key:
                db, src = self._db(table), self._src(table)
                bound, rows = polling.chunk_end(db, src, key, after, budget, upto)
                if bound:
                    parts.append([table, after, bound])
                    after = bound
                if rows >= budget:  # the table may have more: the next batch's
                    break
                budget -= rows
            end = self._snapshot_from(self.tables.index(table) + 1, position)
            if end["phase"] != "snapshot":
                return {**end, "parts": parts}
            table, after, upto = end["table"], end["after"], end["upto"]
            if budget <= 0:
                break
        return {**self._offset(after, position, "snapshot", upto, table), "parts": parts}

    def _next_changes(self, start: dict) -> dict:
        conn, begin = self._connection(), start[self.LOG_KEY]
        self.log_done(conn, begin)  # the batch before `start` is done
        window = self.log_scan(conn, begin, self.target)
        end = window.last_relevant
        if end is None and (window.full or self._heartbeat_due()):
            end = window.last_commit or (None if self.available_now else self.log_now(conn))
        if end is None or self.log_order(end) <= self.log_order(begin):
            return start
        self._beat_at = time.monotonic()
        return self._offset(None, end, "stream")

    def _heartbeat_due(self) -> bool:
        return time.monotonic() - self._beat_at >= self.cfg.heartbeat_ms / 1000

    def commit(self, end: dict) -> None:
        if self.cdc and end.get("phase") == "stream":
            self.log_done(self._connection(), end[self.LOG_KEY])

    def stop(self) -> None:
        if self._conn is not None:
            self._conn.close()

    # ---------------------------------------------------------------- partitions and reads
    def partitions(self, start: dict, end: dict) -> list[Range]:
        if self.cfg.mode == "bulk":
            return (
                [r for t in self.tables for r in self._whole_table(t)]
                if end["run"] > start["run"]
                else []
            )
        if not self.cdc:
            return self._polled(start["after"], end["after"])
        if "parts" in end:  # several tables' snapshot ranges
            return self._grouped(end["parts"], start[self.LOG_KEY])
        if start["phase"] == "snapshot":
            table = start.get("table", self.tables[0])
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
        if self.log_order(finish) <= self.log_order(begin):
            return []
        return [Range("changes", None, None, begin, finish)]

    def _grouped(self, parts: list, position) -> list[InputPartition]:
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
            return self._split(self.tables[0], after, upto, ordering)
        return [
            r
            for t in self.tables
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

    def read(self, part: Range | Group) -> Iterator[pa.RecordBatch]:
        conn = self.connect()
        try:
            if not isinstance(part, Group) and part.table not in self.failed:
                yield from self._read(conn, part)
            for one in part.parts if isinstance(part, Group) else ():
                if one.table not in self.failed:
                    yield from self._read(conn, one, fast=False)
        finally:
            conn.close()

    def _read(self, conn, part: Range, fast: bool = True) -> Iterator[pa.RecordBatch]:
        """One range's rows; not `fast`: on `conn`, not through connectorx, whose session and
        threads per read cost more than a small table's rows (a group of small tables)."""
        if part.kind == "changes":
            for table, batch in self.log_read(conn, part):
                yield self._shape(table, batch)
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
                yield self._shape(table, batch)
        except self.UNREADABLE as e:
            yield self._unreadable_range(part, e)

    def _unreadable_range(self, part: Range, e: Exception) -> pa.RecordBatch:
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
        if not self.multi:  # its schema may have no __source (incremental, bulk)
            return self._letters([record])
        return self._shape(DEAD_LETTERS, dead_letters([record], self.schemas[table]))


def _text(value) -> str | None:
    """A dead letter's raw record as text: JSON unless it is text already."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)
