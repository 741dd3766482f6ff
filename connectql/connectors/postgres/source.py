"""The PostgreSQL source's Spark reader: `cdc` (snapshot in primary-key chunks, then logical
decoding from the slot's position), `incremental` (polling by incrementing/timestamp columns)
and `bulk` (the whole table each poll). Offsets are plain JSON; see the class docstrings."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from connectql.connectors import polling
from connectql.connectors.dbsink import META_COLUMNS
from connectql.connectors.options import from_spark_options, to_spark_options
from connectql.connectors.postgres import cdc
from connectql.connectors.postgres.client import connect, qualified
from connectql.connectors.postgres.db import PgDb
from connectql.connectors.postgres.tables import Table, describe_source


@dataclass(frozen=True)
class ReaderConfig:
    """A PostgreSQL source's settings as they travel through Spark's reader options."""

    connection: dict
    schema: str
    table: str | None
    query: str | None
    mode: str  # 'cdc' | 'incremental' | 'bulk'
    snapshot: str = "initial"
    slot: str = ""
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
    def from_options(cls, options: dict[str, str]) -> ReaderConfig:
        body = from_spark_options(options)
        body["connector"] = options.get("connectql.connector", "")
        if not body["slot"]:
            body["slot"] = default_slot(body["connector"])
        return cls(**body)

    def relation(self) -> str:
        if self.query:
            return f"({self.query}) q"
        return qualified(self.schema, self.table).as_string(None)

    @property
    def qualified_table(self) -> str:
        """As logical decoding names it: schema.table."""
        return f"{self.schema}.{self.table}"

    @property
    def ordering(self) -> list[str]:
        """Incremental mode's ordering columns: timestamp first, then the incrementing one."""
        return [c for c in (self.timestamp, self.incrementing) if c]


@dataclass(frozen=True)
class Range(InputPartition):
    kind: str  # 'rows' (a key or ordering range) or 'changes' (decoded WAL)
    after: list | None
    upto: list | None
    lsn_from: int = 0
    lsn_to: int = 0


def default_slot(connector: str) -> str:
    """connectql_<connector>, in the characters a slot name may hold."""
    return "connectql_" + re.sub(r"[^a-z0-9_]", "_", connector.lower())[:50]


class PostgresStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets: cdc {"after": last key read, "lsn": slot start or last commit, "phase":
    "snapshot"|"stream", "upto": the snapshot's last key} (keys as text lists or null);
    incremental {"after": ordering text list or null}; bulk {"run": n}."""

    def __init__(self, schema: StructType, options: dict[str, str]):
        self.cfg = ReaderConfig.from_options(options)
        self.schema = schema
        self.data = StructType([f for f in schema.fields if f.name not in META_COLUMNS])
        self.cdc = self.cfg.mode == "cdc"
        self.available_now = False
        self.target_lsn: int | None = None
        self._polled_at = 0.0
        self._beat_at = time.monotonic()
        self._conn = None
        self._table: Table | None = None

    # ---------------------------------------------------------------- plumbing
    def _connection(self):
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.cfg.connection, autocommit=True)
        return self._conn

    def _meta(self, conn) -> Table:
        """The table's column types and key, looked up once per process."""
        if self._table is None:
            self._table = describe_source(conn, self.cfg)
        return self._table

    def _db(self, conn=None) -> PgDb:
        conn = conn or self._connection()
        return PgDb(conn, dict((n, pg) for n, pg, _s in self._meta(conn).columns))

    @property
    def key(self) -> list[str]:
        return list(self._meta(self._connection()).key)

    def _src(self) -> polling.Source:
        return polling.Source(self.cfg.relation(), self.data)

    def _due(self) -> bool:
        """Poll the database at most every poll_ms (Spark asks many times a second)."""
        now = time.monotonic()
        if not self.available_now and now - self._polled_at < self.cfg.poll_ms / 1000:
            return False
        self._polled_at = now
        return True

    # ---------------------------------------------------------------- offsets
    def initialOffset(self) -> dict:  # noqa: N802 (Spark's names)
        if self.cfg.mode == "bulk":
            return {"run": 0}
        if not self.cdc:
            return {"after": None}
        lsn = cdc.ensure_slot(self._connection(), self.cfg.slot)
        phase = "snapshot" if self.cfg.snapshot == "initial" else "stream"
        if phase == "stream" or not self.key:
            return _cdc_offset(None, lsn, phase)
        # the snapshot ends at the largest key now: rows added later arrive as changes (a
        # snapshot chasing inserts would never end)
        upto = polling.last_key(self._db(), self._src(), self.key)
        return _cdc_offset(None, lsn, "snapshot" if upto else "stream", upto)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self.available_now = True
        if self.cdc:
            self.target_lsn = cdc.current_lsn(self._connection())

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
        key, after = self.key, start["after"]
        if not key:  # no primary key: the whole table is one chunk; [] marks it read
            return (
                _cdc_offset([], start["lsn"], "snapshot")
                if after is None
                else self._to_stream(start)
            )
        upto = start.get("upto")
        bound = polling.next_bound(self._db(), self._src(), key, after, self.cfg.batch_rows, upto)
        if not bound:
            return self._to_stream(start)
        return _cdc_offset(bound, start["lsn"], "snapshot", upto)

    def _to_stream(self, start: dict) -> dict:
        return _cdc_offset(None, start["lsn"], "stream")

    def _next_changes(self, start: dict) -> dict:
        conn = self._connection()
        cdc.advance(conn, self.cfg.slot, start["lsn"])  # the batch before `start` is done
        window = cdc.scan(
            conn, self.cfg.slot, self.cfg.batch_rows, self._captured(), self.target_lsn
        )
        end = window.last_relevant
        if end is None and (window.full or self._heartbeat_due()):
            end = window.last_commit or (None if self.available_now else cdc.current_lsn(conn))
        if end is None or end <= start["lsn"]:
            return start
        self._beat_at = time.monotonic()
        return _cdc_offset(None, end, "stream")

    def _heartbeat_due(self) -> bool:
        return time.monotonic() - self._beat_at >= self.cfg.heartbeat_ms / 1000

    def _captured(self) -> set[str]:
        return {self.cfg.qualified_table}

    def commit(self, end: dict) -> None:
        if self.cdc and end.get("phase") == "stream":
            cdc.advance(self._connection(), self.cfg.slot, end["lsn"])

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
            return self._split(start["after"], upto or None, self.key, start["lsn"])
        if end["lsn"] <= start["lsn"]:
            return []
        return [Range("changes", None, None, start["lsn"], end["lsn"])]

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

    def _split(self, after, upto, columns, lsn: int = 0) -> list[Range]:
        if self.cfg.tasks <= 1 or len(columns) != 1 or upto is None:
            return [Range("rows", after, upto, lsn)]
        low = None if after else polling.smallest(self._db(), self._src(), columns[0])
        if low is None and not after:
            return [Range("rows", after, upto, lsn)]
        ranges = polling.split(after, upto, self.cfg.tasks, low)
        return [Range("rows", a, b, lsn) for a, b in ranges]

    def read(self, part: Range) -> Iterator[pa.RecordBatch]:
        with connect(self.cfg.connection, autocommit=True) as conn:
            if part.kind == "changes":
                key = self._meta(conn).key
                yield from cdc.read_changes(conn, self.cfg, self.schema, key, part)
                return
            db = self._db(conn)
            columns = self.cfg.ordering if self.cfg.mode == "incremental" else self._meta(conn).key
            rows = polling.read_range(db, self._src(), columns, part.after, part.upto)
            if not self.cdc:
                yield from rows
                return
            for batch in rows:
                yield cdc.with_snapshot_columns(batch, self.cfg, self.schema, part.lsn_from)


def _cdc_offset(after, lsn: int, phase: str, upto=None) -> dict:
    """`after`: the last key read; `upto`: the snapshot's last key (fixed key order)."""
    return {"after": after, "lsn": lsn, "phase": phase, "upto": upto}
