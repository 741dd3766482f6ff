"""The Spark reader every database table source shares (PostgreSQL, MySQL): offsets, snapshot
chunks, incremental polling, bulk copies and splitting into tasks. A database subclass supplies
its connection, its table description, its SQL dialect (polling.Db) and, for `cdc`, its change
log (slot LSNs, binlog coordinates) through the `log_*` hooks."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from connectql.connectors import polling
from connectql.connectors.dbsink import META_COLUMNS
from connectql.connectors.options import from_spark_options, to_spark_options

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

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    def ddl(self, cdc: bool) -> str:
        cols = [(n, s) for n, _db, s in self.columns] + (list(CDC_COLUMNS) if cdc else [])
        return ", ".join(f"`{n}` {t}" for n, t in cols)


@dataclass(frozen=True)
class TableConfig:
    """A table source's settings as they travel through Spark's reader options; databases add
    their own fields in a subclass."""

    connection: dict
    schema: str  # PostgreSQL schema, MySQL database
    table: str | None
    query: str | None
    mode: str  # 'cdc' | 'incremental' | 'bulk'
    snapshot: str = "initial"
    heartbeat_ms: int = 30_000
    incrementing: str | None = None
    timestamp: str | None = None
    batch_rows: int = 100_000
    poll_ms: int = 1000
    tasks: int = 1
    schema_change: str = "fail"
    connector: str = ""

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


class TableStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets: cdc {"after": last key read, LOG_KEY: change-log position, "phase":
    "snapshot"|"stream", "upto": the snapshot's last key} (keys as text lists or null);
    incremental {"after": ordering text list or null}; bulk {"run": n}."""

    config_class: type[TableConfig] = TableConfig
    LOG_KEY = "log"

    def __init__(self, schema: StructType, options: dict[str, str]):
        self.cfg = self.config_class.from_options(options)
        self.schema = schema
        self.data = StructType([f for f in schema.fields if f.name not in META_COLUMNS])
        self.cdc = self.cfg.mode == "cdc"
        self.available_now = False
        self.target = None  # available-now: the log position where the run ends
        self._polled_at = 0.0
        self._beat_at = time.monotonic()
        self._conn = None
        self._table: Table | None = None

    # ---------------------------------------------------------------- what a database supplies
    def connect(self):
        raise NotImplementedError

    def is_closed(self, conn) -> bool:
        raise NotImplementedError

    def describe(self, conn) -> Table:
        raise NotImplementedError

    def dialect(self, conn, table: Table) -> polling.Db:
        raise NotImplementedError

    def relation(self) -> str:
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

    def log_read(self, conn, part: Range) -> Iterator[pa.RecordBatch]:
        raise NotImplementedError

    def log_order(self, position):
        """A sortable form of a position."""
        return position

    def with_snapshot_columns(self, batch: pa.RecordBatch, position) -> pa.RecordBatch:
        raise NotImplementedError

    # ---------------------------------------------------------------- plumbing
    def _connection(self):
        if self._conn is None or self.is_closed(self._conn):
            self._conn = self.connect()
        return self._conn

    def _meta(self, conn) -> Table:
        """The table's column types and key, looked up once per process."""
        if self._table is None:
            self._table = self.describe(conn)
        return self._table

    def _db(self, conn=None) -> polling.Db:
        conn = conn or self._connection()
        return self.dialect(conn, self._meta(conn))

    @property
    def key(self) -> list[str]:
        return list(self._meta(self._connection()).key)

    def _src(self) -> polling.Source:
        return polling.Source(self.relation(), self.data)

    def _due(self) -> bool:
        """Poll the database at most every poll_ms (Spark asks many times a second)."""
        now = time.monotonic()
        if not self.available_now and now - self._polled_at < self.cfg.poll_ms / 1000:
            return False
        self._polled_at = now
        return True

    def _offset(self, after, position, phase: str, upto=None) -> dict:
        """`after`: the last key read; `upto`: the snapshot's last key (fixed key order)."""
        return {"after": after, self.LOG_KEY: position, "phase": phase, "upto": upto}

    # ---------------------------------------------------------------- offsets
    def initialOffset(self) -> dict:  # noqa: N802 (Spark's names)
        if self.cfg.mode == "bulk":
            return {"run": 0}
        if not self.cdc:
            return {"after": None}
        position = self.log_start(self._connection())
        phase = "snapshot" if self.cfg.snapshot == "initial" else "stream"
        if phase == "stream" or not self.key:
            return self._offset(None, position, phase)
        # the snapshot ends at the largest key now: rows added later arrive as changes (a
        # snapshot chasing inserts would never end)
        upto = polling.last_key(self._db(), self._src(), self.key)
        return self._offset(None, position, "snapshot" if upto else "stream", upto)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self.available_now = True
        if self.cdc:
            self.target = self.log_now(self._connection())

    def latestOffset(self, start: dict, limit=None) -> dict:  # noqa: N802
        if self.cfg.mode == "bulk":
            return self._next_run(start)
        if not self.cdc:
            if not self._due():
                return start
            bound = polling.next_bound(
                self._db(), self._src(), self.cfg.ordering, start["after"], self.cfg.batch_rows
            )
            return {"after": bound} if bound else start
        if start["phase"] == "snapshot":
            return self._next_chunk(start)
        if not self._due():
            return start
        return self._next_changes(start)

    def _next_run(self, start: dict) -> dict:
        if self.available_now:
            return {"run": 1} if start["run"] == 0 else start
        return {"run": start["run"] + 1} if self._due() else start

    def _next_chunk(self, start: dict) -> dict:
        key, after, position = self.key, start["after"], start[self.LOG_KEY]
        if not key:  # no primary key: the whole table is one chunk; [] marks it read
            if after is None:
                return self._offset([], position, "snapshot")
            return self._offset(None, position, "stream")
        upto = start.get("upto")
        bound = polling.next_bound(self._db(), self._src(), key, after, self.cfg.batch_rows, upto)
        if not bound:
            return self._offset(None, position, "stream")
        return self._offset(bound, position, "snapshot", upto)

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
            return self._whole_table() if end["run"] > start["run"] else []
        if not self.cdc:
            return self._split(start["after"], end["after"], self.cfg.ordering)
        if start["phase"] == "snapshot":
            upto = end["after"] if end["phase"] == "snapshot" else start.get("upto")
            if start["after"] == []:  # a key-less table already read
                return []
            return self._split(start["after"], upto or None, self.key, start[self.LOG_KEY])
        begin, finish = start[self.LOG_KEY], end[self.LOG_KEY]
        if self.log_order(finish) <= self.log_order(begin):
            return []
        return [Range("changes", None, None, begin, finish)]

    def _whole_table(self) -> list[Range]:
        """Bulk: the table in tasks.max key ranges when it has a single integer key."""
        key = self.key if not self.cfg.query else []
        if self.cfg.tasks <= 1 or len(key) != 1:
            return [Range("rows", None, None)]
        top = polling.last_key(self._db(), self._src(), key)
        if not top:
            return []
        ranges = self._split(None, top, key)
        return [*ranges[:-1], Range("rows", ranges[-1].after, None)]  # rows added since: last

    def _split(self, after, upto, columns, position=None) -> list[Range]:
        if self.cfg.tasks <= 1 or len(columns) != 1 or upto is None:
            return [Range("rows", after, upto, position)]
        low = None if after else polling.smallest(self._db(), self._src(), columns[0])
        if low is None and not after:
            return [Range("rows", after, upto, position)]
        ranges = polling.split(after, upto, self.cfg.tasks, low)
        return [Range("rows", a, b, position) for a, b in ranges]

    def read(self, part: Range) -> Iterator[pa.RecordBatch]:
        conn = self.connect()
        try:
            if part.kind == "changes":
                self._meta(conn)
                yield from self.log_read(conn, part)
                return
            db = self._db(conn)
            columns = self.cfg.ordering if self.cfg.mode == "incremental" else self._meta(conn).key
            rows = polling.read_range(db, self._src(), columns, part.after, part.upto)
            if not self.cdc:
                yield from rows
                return
            for batch in rows:
                yield self.with_snapshot_columns(batch, part.log_from)
        finally:
            conn.close()
