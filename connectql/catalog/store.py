"""The Catalog: typed reads and writes of the catalog tables, serialised by one lock."""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
import weakref
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import duckdb

from connectql.catalog import schema, states
from connectql.catalog.redact import redact
from connectql.errors import CatalogError
from connectql.grammar.ast import SecretRef


def now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def encode_options(options: dict[str, Any]) -> str:
    return json.dumps(
        {k: {"$secret": v.name} if isinstance(v, SecretRef) else v for k, v in options.items()}
    )


def decode_options(text: str) -> dict[str, Any]:
    raw = json.loads(text)
    return {
        k: SecretRef(v["$secret"]) if isinstance(v, dict) and "$secret" in v else v
        for k, v in raw.items()
    }


def table_stream(base: str, table: str) -> str:
    """The stream a multi-table source writes `table`'s rows to: <base>_<table>."""
    return f"{base}_{re.sub(r'[^A-Za-z0-9_]', '_', table)}"


@dataclass
class ConnectorEntry:
    """One connector as the catalog holds it: the options exactly as given."""

    name: str
    kind: str  # 'source' | 'sink'
    type: str
    stream: str | None
    options: dict[str, Any]
    select_sql: str | None = None
    state: str = states.CREATED
    desired_state: str = "running"
    tasks: int = 1
    last_error: str | None = None
    created_at: datetime = field(default_factory=now)
    # a multi-table source's tables, each into its own stream; a sink's streams (several)
    tables: tuple[str, ...] = ()
    # a several-table source's tables stopped by a value they cannot read: {table: error}
    tables_failed: dict[str, str] = field(default_factory=dict)
    # a several-table source's tables added after its CREATE (found while running, ALTER)
    tables_added: tuple[str, ...] = ()
    # a source's tables to read again, whole (ALTER ... SNAPSHOT TABLE): {table: request number}
    snapshots: dict[str, int] = field(default_factory=dict)

    @property
    def streams(self) -> list[str]:
        """The streams the connector reads or writes (less dead letters)."""
        if self.kind == "sink" and self.tables:
            return list(self.tables)
        if self.tables and self.stream:
            return [table_stream(self.stream, t) for t in self.tables]
        return [self.stream] if self.stream else []


@dataclass
class StreamEntry:
    name: str
    path: str
    schema: str | None = None  # Spark DDL
    schema_json: str | None = None  # Spark StructType JSON
    retention: str | None = None
    created_by: str | None = None
    key: str | None = None  # comma list of key columns; None: the stream has no key
    retention_bytes: str | None = None
    retention_policy: str | None = None  # None: the worker's default ('wait')
    options: dict[str, str] | None = None  # the other stream options given (merge.*)

    @property
    def retention_options(self) -> dict[str, str | None]:
        """The stream's own options, as given (retention ones None where not set, others
        only where set)."""
        own = {
            "retention": self.retention,
            "retention.bytes": self.retention_bytes,
            "retention.policy": self.retention_policy,
        }
        return {**(self.options or {}), **own}

    @property
    def key_columns(self) -> tuple[str, ...]:
        return tuple(k for k in (self.key or "").split(",") if k)


class _Interruptible:
    """DuckDB's connection, except that Ctrl-C during a statement comes out as KeyboardInterrupt:
    DuckDB turns it into RuntimeError('Query interrupted'), which `connectql run` took for a
    failure (a traceback and exit 1) instead of the graceful stop Ctrl-C asks for. It counts the
    statements that may change the catalog, before and after they run, so that reads can be
    memoised (Catalog.read): `changes`, or `figure_changes` while `figures_only` (a batch's
    progress, a stream's measured size: what changes many times a second)."""

    def __init__(self, con):
        self._con = con
        self.changes = self.figure_changes = 0
        self.figures_only = self.in_transaction = False

    def execute(self, sql: str, *args):
        word = sql.lstrip()[:8].upper()
        changes = not word.startswith("SELECT")
        if changes:  # counted before (a read that starts now is not kept) and after it
            self._count()
            if word.startswith("BEGIN"):
                self.in_transaction = True
            elif word.startswith(("COMMIT", "ROLLBACK")):
                self.in_transaction = False
        try:
            return self._con.execute(sql, *args)
        except RuntimeError as e:
            if str(e) == "Query interrupted":
                raise KeyboardInterrupt from None
            raise
        finally:
            if changes:
                self._count()

    def _count(self) -> None:
        if self.figures_only:
            self.figure_changes += 1
        else:
            self.changes += 1

    def __getattr__(self, name: str):
        return getattr(self._con, name)


CLOSE_WAIT_S = 5.0  # a read on another thread that Catalog.close interrupts ends within this


def _close_cursor(cur) -> None:
    """Close a read() cursor; one that another thread is reading through at that moment (an API
    request while the worker closes: DuckDB refuses to close it) is interrupted first."""
    deadline = time.monotonic() + CLOSE_WAIT_S
    while True:
        try:
            cur.close()
            return
        except duckdb.ResourceInUseException:
            if time.monotonic() > deadline:
                raise
            with contextlib.suppress(duckdb.Error):
                cur.interrupt()
            time.sleep(0.01)


def _result(cur) -> tuple[list[str], list[tuple]]:
    """A statement's column names and rows."""
    return [d[0] for d in cur.description] if cur.description else [], cur.fetchall()


RATE_WINDOW_S = 10.0  # rows_per_sec: the records of the batches that ended this long before
MEMO_ENTRIES = 4096  # Catalog.read's memo is emptied when it holds this many reads

ENTRY_SQL = (
    "SELECT c.name, kind, type, stream, k.options, k.select_sql, state, desired_state,"
    " tasks, last_error, created_at, tables, tables_failed, tables_added,"
    " tables_snapshot FROM connectors c"
    " JOIN connector_config k ON c.name = k.name"
)


def entry_of(r: tuple) -> ConnectorEntry:
    """A row of ENTRY_SQL as the connector's entry."""
    tables = tuple(json.loads(r[11])) if r[11] else ()
    failed = json.loads(r[12]) if r[12] else {}
    added = tuple(json.loads(r[13])) if r[13] else ()
    snapshots = json.loads(r[14]) if r[14] else {}
    return ConnectorEntry(*r[:4], decode_options(r[4]), *r[5:11], tables, failed, added, snapshots)


STREAM_SQL = (
    "SELECT name, path, schema, schema_json, retention, created_by, key,"
    " retention_bytes, retention_policy, options FROM streams"
)


def stream_of(r: tuple) -> StreamEntry:
    """A row of STREAM_SQL as the stream's entry."""
    *row, options = r
    return StreamEntry(*row, options=json.loads(options) if options else None)


class _Fenced:
    in_transaction = figures_only = False

    def __init__(self, why: str):
        self.why = why

    def execute(self, *args):
        raise CatalogError(f"the catalog is closed to this worker: {self.why}")

    cursor = execute

    def close(self) -> None:
        pass


class Catalog:
    """One DuckDB file; one writer process. Every method takes the lock, so the listener thread
    and the statement thread can share it."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self.con = _Interruptible(duckdb.connect(self.path))
        except duckdb.IOException as e:
            raise CatalogError(f"cannot open the catalog {self.path}: {e}") from None
        os.chmod(self.path, 0o600)  # connector_config holds inline secrets as given
        self.lock = threading.RLock()
        self._memo: dict[tuple, tuple] = {}  # read(): key -> (mark, columns, rows)
        # read()'s cursor per thread, dropped with its thread (a restart's timer, ...)
        self._local, self._cursors = threading.local(), weakref.WeakSet()
        with self.lock:
            schema.migrate(self.con)

    def close(self) -> None:
        """Close DuckDB's connection; a call on any thread after this is refused in Python,
        before it reaches DuckDB (a thread inside DuckDB as the process exits aborts it)."""
        with self.lock:
            for cur in list(self._cursors):
                _close_cursor(cur)
            self.con.close()
            self.con = _Fenced("the worker has closed it")
            self._local = threading.local()

    def fence(self, why: str) -> None:
        """Refuse every statement from now on (a worker that lost its lease)."""
        self.con = _Fenced(why)

    def query(self, sql: str, params=None) -> tuple[list[str], list[tuple]]:
        with self.lock:
            return _result(self.con.execute(sql, params or []))

    def read(
        self, sql: str, params=(), figures: bool = False, memo: bool = True
    ) -> tuple[list[str], list[tuple]]:
        """query(), memoised until a statement that may change the catalog; with `figures`,
        a read of the measured figures too (rows, lag), which every batch changes. The API
        reads the same few things many times a second: the memo answers them, and what it
        cannot is read through this thread's own cursor, which sees what is committed and
        does not wait for the lock that statements and progress hold."""
        key, mark = (sql, tuple(params), figures), self._mark(figures)
        if mark is None or (self.lock._is_owned() and self.con.in_transaction):
            return self.query(sql, list(params))  # fenced: refused; else sees its own writes
        hit = self._memo.get(key) if memo else None
        if hit is not None and hit[0] == mark:
            return hit[1], list(hit[2])
        if self.lock._is_owned():  # inside a statement of ours: what it changed is committed
            cols, rows = self.query(sql, list(params))
        else:
            cols, rows = self._cursor_read(sql, list(params))
        if not memo:
            return cols, rows
        if len(self._memo) >= MEMO_ENTRIES:
            self._memo.clear()
        self._memo[key] = (mark, cols, rows)
        return cols, list(rows)  # a copy: the memo's rows stay as read

    def _cursor_read(self, sql: str, params: list) -> tuple[list[str], list[tuple]]:
        cur = getattr(self._local, "cursor", None)
        if cur is None:  # DuckDB's way to read from another thread: a cursor of its own
            cur = self._local.cursor = _Interruptible(self.con.cursor())
            self._cursors.add(cur)
        return _result(cur.execute(sql, params))

    def _mark(self, figures: bool):
        con = self.con
        if isinstance(con, _Fenced):
            return None
        return (con.changes, con.figure_changes) if figures else con.changes

    @contextlib.contextmanager
    def _figures(self):
        """Statements that change only measured figures (see _Interruptible)."""
        with self.lock:
            self.con.figures_only = True
            try:
                yield
            finally:
                self.con.figures_only = False

    def execute(self, sql: str, params=None) -> None:
        with self.lock:
            self.con.execute(sql, params or [])

    # connectors ---------------------------------------------------------------------------
    def add_connector(self, e: ConnectorEntry) -> None:
        ts = now()
        with self.lock:
            self.con.execute("BEGIN TRANSACTION")
            try:
                self.con.execute(
                    "INSERT INTO connectors (name, kind, type, stream, state, desired_state, tasks,"
                    " options, transform, created_at, updated_at, tables)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    [
                        e.name,
                        e.kind,
                        e.type,
                        e.stream,
                        e.state,
                        e.desired_state,
                        e.tasks,
                        encode_options(redact(e.options)),
                        e.select_sql,
                        ts,
                        ts,
                        json.dumps(list(e.tables)) if e.tables else None,
                    ],
                )
                self.con.execute(
                    "INSERT INTO connector_config VALUES (?,?,?)",
                    [e.name, encode_options(e.options), e.select_sql],
                )
                self.con.execute(
                    "INSERT INTO connector_events VALUES (?,?,?,?,?,?)",
                    [ts, e.name, None, e.state, "created", None],
                )
                self.con.execute("COMMIT")
            except Exception:
                self.con.execute("ROLLBACK")
                raise

    def state_of(self, name: str) -> str | None:
        """The connector's state, or None when there is no such connector (one cheap query)."""
        rows = self.read("SELECT state FROM connectors WHERE name = ?", [name])[1]
        return rows[0][0] if rows else None

    def has_connector(self, name: str) -> bool:
        return bool(self.read("SELECT 1 FROM connectors WHERE name = ?", [name])[1])

    def get_connector(self, name: str) -> ConnectorEntry:
        rows = self.read(ENTRY_SQL + " WHERE c.name = ?", [name])[1]
        if not rows:
            raise CatalogError(f"no connector named '{name}'{self._known('connectors')}")
        return entry_of(rows[0])

    def connectors(self) -> list[ConnectorEntry]:
        """Every connector, by name, in one query (the API lists them on every request)."""
        return [entry_of(r) for r in self.read(ENTRY_SQL + " ORDER BY c.name")[1]]

    def remove_connector(self, name: str, reason: str = "dropped") -> None:
        with self.lock:
            state = self.get_connector(name).state
            self.con.execute("DELETE FROM connectors WHERE name = ?", [name])
            self.con.execute("DELETE FROM connector_config WHERE name = ?", [name])
            self.con.execute("DELETE FROM connector_offsets WHERE connector = ?", [name])
            self.con.execute(
                "INSERT INTO connector_events VALUES (?,?,?,?,?,?)",
                [now(), name, state, "DROPPED", reason, None],
            )

    def set_state(
        self, name: str, new: str, reason: str, error: str | None = None, desired: str | None = None
    ) -> str:
        """Move a connector to `new` (checked against states.TRANSITIONS) and log the event.
        Returns the state it was in."""
        with self.lock:
            rows = self.query("SELECT state FROM connectors WHERE name = ?", [name])[1]
            if not rows:
                return new  # dropped meanwhile
            current = rows[0][0]
            states.check(name, current, new)
            sets, params = ["state = ?", "updated_at = ?"], [new, now()]
            if new not in states.MOVING:  # a rate is of a query that runs, not a stale one
                sets.append("rows_per_sec = 0")
            if error is not None:
                sets.append("last_error = ?")
                params.append(error)
            if desired is not None:
                sets.append("desired_state = ?")
                params.append(desired)
            self.con.execute(
                f"UPDATE connectors SET {', '.join(sets)} WHERE name = ?", [*params, name]
            )
            if current != new:
                self.con.execute(
                    "INSERT INTO connector_events VALUES (?,?,?,?,?,?)",
                    [now(), name, current, new, reason, error],
                )
            return current

    def clear_error(self, name: str) -> None:
        """A running connector's batch succeeded: its last_error is history (connector_events
        keeps it), unless a table it stopped still stands for it (tables_failed). Read first,
        so that a batch changes nothing when there is none."""
        with self.lock:
            found = self.query(
                "SELECT last_error, tables_failed FROM connectors WHERE name = ?", [name]
            )[1]
            if found and found[0][0] is not None and not json.loads(found[0][1] or "{}"):
                self.con.execute("UPDATE connectors SET last_error = NULL WHERE name = ?", [name])

    def fail_table(self, name: str, table: str, error: str) -> bool:
        """Record that `table` of source `name` stopped on `error`; False if it had already.
        (`last_error` is set with the state change that follows.)"""
        with self.lock:
            rows = self.query("SELECT tables_failed FROM connectors WHERE name = ?", [name])[1]
            failed = json.loads(rows[0][0]) if rows and rows[0][0] else {}
            if not rows or table in failed:
                return False
            failed[table] = error
            self.con.execute(
                "UPDATE connectors SET tables_failed = ?, updated_at = ? WHERE name = ?",
                [json.dumps(failed), now(), name],
            )
            return True

    def set_tables(self, name: str, tables: tuple[str, ...], added: tuple[str, ...] = ()) -> None:
        """The tables connector `name` reads (a source's) or its streams (a sink's); `added`:
        those of a source's that were added after its CREATE."""
        self.execute(
            "UPDATE connectors SET tables = ?, tables_added = ?, updated_at = ? WHERE name = ?",
            [json.dumps(list(tables)), json.dumps(list(added)) if added else None, now(), name],
        )

    def set_snapshots(self, name: str, snapshots: dict[str, int]) -> None:
        """The tables of source `name` to read again, whole: {table: request number}."""
        self.execute(
            "UPDATE connectors SET tables_snapshot = ?, updated_at = ? WHERE name = ?",
            [json.dumps(snapshots), now(), name],
        )

    def clear_failed_tables(self, name: str) -> None:
        """Every table of source `name` is to be read again (its offsets were reset), or every
        stream of sink `name` (RESTART CONNECTOR)."""
        self.execute("UPDATE connectors SET tables_failed = NULL WHERE name = ?", [name])

    def log_event(self, name: str, state: str, reason: str) -> None:
        """An event that changes no state (e.g. offsets reset)."""
        self.execute(
            "INSERT INTO connector_events VALUES (?,?,?,?,?,?)",
            [now(), name, state, state, reason, None],
        )

    def set_desired(self, name: str, desired: str) -> None:
        self.execute(
            "UPDATE connectors SET desired_state = ?, updated_at = ? WHERE name = ?",
            [desired, now(), name],
        )

    def update_options(self, name: str, options: dict[str, Any], tasks: int) -> None:
        """New options for a connector (ALTER), with an event that records the change."""
        with self.lock:
            state = self.get_connector(name).state
            self.con.execute(
                "UPDATE connector_config SET options = ? WHERE name = ?",
                [encode_options(options), name],
            )
            self.con.execute(
                "UPDATE connectors SET options = ?, tasks = ?, updated_at = ? WHERE name = ?",
                [encode_options(redact(options)), tasks, now(), name],
            )
            self.con.execute(
                "INSERT INTO connector_events VALUES (?,?,?,?,?,?)",
                [now(), name, state, state, "options altered", None],
            )

    # progress -----------------------------------------------------------------------------
    def _flow(self, name: str, p: dict) -> float:
        """Records per second flowing through the connector: the rows of its batches that
        ended within RATE_WINDOW_S of this one's end, over the time from the first of them
        began (a lone long batch: its rows over its duration). A batch's own rows over its
        duration measured speed, not flow: a source trickling 200 records/s showed 0.4-0.8
        between its empty batches (issue 49)."""
        if p["started_at"] is None:
            return p["processed_rows_per_sec"]
        end = p["started_at"] + timedelta(milliseconds=p["duration_ms"] or 0)
        rows, first = self.con.execute(
            "SELECT sum(input_rows), min(started_at) FROM connector_metrics"
            " WHERE connector = ? AND started_at + to_milliseconds(duration_ms) >= ?",
            [name, end - timedelta(seconds=RATE_WINDOW_S)],
        ).fetchone()
        span = (end - first).total_seconds() if first is not None else 0.0
        return float(rows or 0) / max(span, 0.001)

    def record_progress(self, name: str, p: dict[str, Any]) -> None:
        """One micro-batch's progress: a metrics row, running totals and the offsets."""
        counts = [p["input_rows"], p["written_rows"], p["filtered_rows"], p["dead_lettered_rows"]]
        with self._figures():
            # one row a batch: a batch that runs again (after a restart; or after the empty
            # progress Spark reports for a trigger without data, under the next batch's id)
            # replaces its earlier row
            self.con.execute(
                "DELETE FROM connector_metrics WHERE connector = ? AND batch_id = ?",
                [name, p["batch_id"]],
            )
            self.con.execute(
                "INSERT INTO connector_metrics (connector, batch_id, started_at, duration_ms,"
                " input_rows, input_rows_per_sec, processed_rows_per_sec, written_rows,"
                " filtered_rows, dead_lettered_rows) VALUES (?,?,?,?,?,?,?,?,?,?)",
                [
                    name,
                    p["batch_id"],
                    p["started_at"],
                    p["duration_ms"],
                    p["input_rows"],
                    p["input_rows_per_sec"],
                    p["processed_rows_per_sec"],
                    *counts[1:],
                ],
            )
            self.con.execute(
                "UPDATE connectors SET rows_total = rows_total + ?, rows_written = rows_written + ?,"
                " rows_filtered = rows_filtered + ?, rows_dead_lettered = rows_dead_lettered + ?,"
                " rows_per_sec = CASE WHEN state IN ? THEN ? ELSE 0 END, last_batch_at = ?,"
                " last_batch_ms = ?, lag = CASE WHEN kind = 'sink' OR type = 'file' THEN lag"
                " ELSE ? END, lag_bytes = ? WHERE name = ?",
                [*counts, list(states.MOVING), self._flow(name, p), p["started_at"]]
                + [p["duration_ms"], p.get("lag"), p.get("lag_bytes"), name],
            )
            if p.get("end_offset") is not None:
                self.con.execute(
                    "INSERT OR REPLACE INTO connector_offsets VALUES (?,?,?,?)",
                    [name, p["end_offset"], p.get("latest_offset"), now()],
                )
            if p["batch_id"] % 100 == 0:
                self.con.execute(
                    "DELETE FROM connector_metrics WHERE connector = ? AND batch_id < ?",
                    [name, p["batch_id"] - schema.METRICS_RETENTION_BATCHES],
                )

    # streams ------------------------------------------------------------------------------
    def add_stream(self, s: StreamEntry) -> None:
        self.execute(
            "INSERT INTO streams (name, schema, schema_json, retention, path, created_at,"
            " created_by, key, retention_bytes, retention_policy, options)"
            " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            [
                s.name,
                s.schema,
                s.schema_json,
                s.retention,
                s.path,
                now(),
                s.created_by,
                s.key,
                s.retention_bytes,
                s.retention_policy,
                json.dumps(s.options) if s.options else None,
            ],
        )

    def set_stream_options(self, name: str, options: dict[str, str]) -> None:
        """ALTER STREAM: the options given (the others stay)."""
        columns = {"retention": "retention", "retention.bytes": "retention_bytes"}
        columns["retention.policy"] = "retention_policy"
        others = dict(self.get_stream(name).options or {})
        for key, value in options.items():
            if key in columns:
                self.execute(f"UPDATE streams SET {columns[key]} = ? WHERE name = ?", [value, name])
            else:
                others[key] = value
        if others:
            self.execute(
                "UPDATE streams SET options = ? WHERE name = ?", [json.dumps(others), name]
            )

    def set_streams_stats(self, stats: dict[str, dict[str, Any]]) -> None:
        """Streams' measured sizes and their readers' progress (see worker/retainer.py), by
        name, in one statement (an UPDATE per stream held the lock for seconds with 1,000)."""
        if not stats:
            return
        import pyarrow as pa

        names = list(stats)

        def column(key: str, kind: pa.DataType) -> pa.Array:
            return pa.array([stats[n][key] for n in names], kind)

        values = pa.table(
            {
                "name": pa.array(names, pa.string()),
                "records": column("records", pa.int64()),
                "files": column("files", pa.int64()),
                "bytes": column("bytes", pa.int64()),
                "oldest_record": column("oldest_record", pa.timestamp("us")),
                "newest_record": column("newest_record", pa.timestamp("us")),
                "readers": pa.array([json.dumps(stats[n]["readers"]) for n in names]),
            }
        )
        with self._figures():
            self.con.register("measured", values)
            try:
                self.con.execute(
                    "UPDATE streams SET records = m.records, files = m.files, bytes = m.bytes,"
                    " oldest_record = m.oldest_record, newest_record = m.newest_record,"
                    " readers = m.readers::JSON, measured_at = ? FROM measured m"
                    " WHERE streams.name = m.name",
                    [now()],
                )
            finally:
                self.con.unregister("measured")

    def set_measured_lag(self, name: str, lag: int) -> None:
        """The lag of a sink (records of its streams not read) or a file source (files not
        read), measured by the worker's retention pass rather than reported by its query."""
        with self._figures():
            self.con.execute("UPDATE connectors SET lag = ? WHERE name = ?", [lag, name])

    def add_rows_lost(self, name: str, rows: int) -> None:
        with self._figures():
            self.con.execute(
                "UPDATE connectors SET rows_lost = coalesce(rows_lost, 0) + ? WHERE name = ?",
                [rows, name],
            )

    def set_stream_schema(
        self, name: str, ddl: str, schema_json: str, key: tuple[str, ...] = ()
    ) -> None:
        self.execute(
            "UPDATE streams SET schema = ?, schema_json = ?, key = ? WHERE name = ?",
            [ddl, schema_json, ",".join(key) or None, name],
        )

    def find_stream(self, name: str) -> StreamEntry | None:
        rows = self.read(STREAM_SQL + " WHERE name = ?", [name])[1]
        return stream_of(rows[0]) if rows else None

    def get_stream(self, name: str) -> StreamEntry:
        s = self.find_stream(name)
        if s is None:
            raise CatalogError(f"no stream named '{name}'{self._known('streams')}")
        return s

    def streams(self) -> list[StreamEntry]:
        return [stream_of(r) for r in self.read(STREAM_SQL + " ORDER BY name")[1]]

    def remove_stream(self, name: str) -> None:
        self.execute("DELETE FROM streams WHERE name = ?", [name])

    # settings -----------------------------------------------------------------------------
    def set_setting(self, key: str, value: str) -> None:
        self.execute("INSERT OR REPLACE INTO settings VALUES (?, ?)", [key, value])

    def settings(self) -> dict[str, str]:
        return dict(self.read("SELECT key, value FROM settings")[1])

    def _known(self, table: str) -> str:
        names = [r[0] for r in self.query(f"SELECT name FROM {table} ORDER BY 1")[1]]
        return f" (known: {', '.join(names)})" if names else f" (there are no {table})"
