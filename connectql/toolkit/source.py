"""Source: the contract of a connector that reads an external system into a stream.

A source lists its work as partitions between two offsets and reads one partition as Arrow
record batches (or plain dicts). It needs no pyspark: the toolkit builds the Spark data source
around it (connectql/toolkit/spark.py) and gives it available-now (`run = 'once'`), read limits,
pacing (records per second), lag, retries of retryable errors and dead letters.

What is called when, and where:

* On the driver (the worker process), at CREATE and at every start: ``Source(options)``, then
  ``check()`` and ``endpoint()``, and with ``run = 'once'`` ``available_now()``.
* On the driver, at CREATE (and ALTER, EXPLAIN, and after a SchemaEvolved): ``tables()``, and
  ``schema()`` and ``key()`` when ``tables()`` is None. A start does not ask them (the streams'
  schemas are in the catalog), so a start needs no call to the external system.
* On the driver, the first time a progress bar is drawn: ``total_records()``.
* On the driver, once per micro-batch: ``latest_offset(start)``, ``end_offset(start, latest,
  max_records)`` and ``partitions(start, end)``; after the batch is committed, ``commit(end)``.
  ``max_records`` is the smallest of the read limit (``batch.max.records``, else
  ``default_max_records()``) and, when ``records_per_second()`` paces the source, the records
  the pace allows now. Spark shows ``reported_latest(latest)`` as the latest offset (the lag).
  The toolkit sets ``connector`` (the connector's name) and ``checkpoint`` before these calls.
* On an executor (a Python worker, possibly another process or machine): ``read(partition)``.
  The source object is pickled to get there: keep connections out of ``__init__`` and open
  them in ``read`` (or lazily).

Offsets are JSON-able dicts of the connector's own shape (Kafka Connect's source partition and
offset), e.g. ``{"file": "b.csv", "line": 120}``. Spark stores them in the checkpoint, the one
place they live. ``read`` of the same partition must give the same records every time: a
micro-batch replayed after a crash is then identical (exactly-once into the stream).

A source of several tables (a database's tables, a topic per table) returns them from
``tables()``: each table's rows go to a stream of their own, ``<stream>_<table>``, and ``read``
yields ``(table, records)`` pairs, ``records`` being any of what a one-table source yields (a
RecordBatch, a Table, a dict) in that table's schema; DeadLetters as they are. The tables are
fixed at CREATE (DROP and CREATE the connector to read others) unless ``adds_tables()``
says it takes tables while it runs (``added``; a SchemaEvolved for a table it meets). A
table that meets a record it cannot read (and errors.tolerance = 'none') can stop alone: ``read`` raises
``TableFailed(table, message)``; the connector starts again at once from the same offsets with
that table in ``failed`` (and in the catalog's tables_failed), the other tables going on.

When the external system's records gain columns their stream lacks (``stream_schemas`` says
what each stream has), ``read`` raises ``SchemaEvolved("why")``: the worker calls ``tables()``
or ``schema()`` again, gives each stream the new columns it finds there (older rows read them as
NULL), and restarts the source from the same offsets, and the running sinks of those streams.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from connectql.config import Option


class Retryable(Exception):
    """Raise it (or a subclass) for an error that may pass (a timeout, a server restarting):
    the toolkit retries the call with backoff before it fails the batch."""


@dataclass(frozen=True)
class DeadLetter:
    """Yield one from `read` for a record that does not parse: with errors.tolerance = 'all' it
    goes to the dead-letter stream with `error` and `raw`; with 'none' it fails the connector
    naming `offset` (where the record is, e.g. {"line": 7}) and `error`. `raw` may be bytes: the
    dead letter's raw_record is then their text when they are UTF-8, else `base64:` and their
    base64 (raw_text), so that no byte is lost."""

    raw: str | bytes
    error: str
    offset: dict[str, Any] | None = None
    error_class: str = "MALFORMED_RECORD"


def raw_text(raw: str | bytes) -> str:
    """A dead letter's raw record as text: bytes that are UTF-8 as they are, others as
    `base64:` and their base64."""
    if isinstance(raw, str):
        return raw
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return RAW_BASE64 + base64.b64encode(raw).decode("ascii")


RAW_BASE64 = "base64:"


@dataclass(frozen=True)
class Table:
    """One table of a several-table source: its name (its stream is `<stream>_<name>`), its
    rows' schema (Spark DDL or a pyarrow Schema) and the columns that identify a row."""

    name: str
    schema: Any
    key: tuple[str, ...] = ()


class Source:
    """Base class of a source. Subclass it, declare `options`, implement the methods that raise
    NotImplementedError; the others have defaults."""

    #: the connector's own options (the common ones, run, tasks.max, errors.*, come for free)
    options: ClassVar[Sequence[Option]] = ()
    #: a numeric key of the offset dict counting records: lag = latest[lag_field] -
    #: end[lag_field]; pacing (records_per_second) counts records by it too (set it in
    #: __init__ when the offsets' shape depends on the options)
    lag_field: str | None = None
    #: a numeric key of the offset dict counting bytes: lag_bytes = latest[lag_bytes_field] -
    #: end[lag_bytes_field], shown as connectors.lag_bytes (None: the column stays NULL)
    lag_bytes_field: ClassVar[str | None] = None
    #: how often a call that raised Retryable is tried again, and the first wait (it doubles)
    retries: ClassVar[int] = 3
    retry_backoff_ms: ClassVar[int] = 200
    #: rows per Arrow batch when `read` yields dicts
    rows_per_batch: ClassVar[int] = 10_000
    #: the source cuts its micro-batches itself: `latest_offset(start)` returns where the next
    #: one ends (a database's next snapshot chunk or log window), not the newest offset, and
    #: `start` when none is due; with run = 'once' the source ends the run the same way (told
    #: by `available_now()`). batch.max.records and `records_per_second` do not apply, and
    #: `reported_latest` is given that end: return the newest offset there, for the lag.
    plans_batches: ClassVar[bool] = False
    #: after its query stops, the last durable batch's end is committed on the driver by a
    #: fresh instance (made from the options, `connector` and `checkpoint` set), unless
    #: False (a source whose commit needs what its running reader holds)
    commits_at_stop: ClassVar[bool] = True
    #: the tables of a several-table source stopped earlier by TableFailed (the toolkit sets it
    #: before any call): `read` need not read them, and what it yields of them is dropped
    failed: frozenset[str] = frozenset()
    #: the tables of a several-table source added after it began (found while running, or by
    #: ALTER), set like `failed`: a table added that its offset does not say it has read yet
    #: is to be read whole (e.g. snapshotted while the change log flows)
    added: frozenset[str] = frozenset()
    #: tables to read again whole (ALTER ... SNAPSHOT TABLE), set like `failed`: {table: the
    #: number of the latest request}; a source records in its offsets which it has served
    snapshots: dict[str, int] = {}
    #: the pyarrow schema of each stream the rows go to, as it stands (by table; None for a
    #: one-table source), set by the toolkit before any call: a column a stream lacks is not
    #: kept; raise SchemaEvolved to widen the stream first
    stream_schemas: dict[str | None, Any] = {}
    #: the connector's name (set by the toolkit before any call of a running query; "" at
    #: CREATE), e.g. to name what the source keeps in the external system
    connector: str = ""
    #: the query's checkpoint directory (set like `connector`): a source may keep files of its
    #: own in a folder under it (a spool); they go with the offsets (RESET OFFSETS, DROP)
    checkpoint: str = ""

    def __init__(self, options: dict[str, Any]):
        """`options`: validated and resolved (defaults filled in, secrets in clear), by name."""
        self.options = dict(options)

    def adds_tables(self) -> bool:
        """Driver: whether tables may be added to this source of several tables while it runs
        (ALTER CONNECTOR ... SET table = '...'): it reads those in `added` its offsets do not
        say it has read (e.g. snapshotted while the change log flows)."""
        return False

    def check(self) -> None:
        """Driver, at CREATE and each start: raise ValidationError (connectql.toolkit) naming
        what is wrong with the options or the external system. Default: nothing to check."""

    def tables(self) -> list[Table] | None:
        """Driver, at CREATE: the tables of a source that reads several, each
        to a stream of its own, in the streams' order. Default: None (one table, `schema()`)."""
        return None

    def schema(self) -> Any:
        """Driver: the rows' schema, as Spark DDL ('id BIGINT, name STRING') or a pyarrow
        Schema; fixed, from the options, or discovered from the external system."""
        raise NotImplementedError

    def key(self) -> tuple[str, ...]:
        """Driver, at CREATE: the columns that identify a row of a one-table source (its
        stream's key, which an upsert sink of the stream takes by default). Default: ()."""
        return ()

    def initial_offset(self) -> dict:
        """Driver: where a new connector starts (before any record). It may be asked more than
        once before the first batch (and after calls of latest_offset): answer the same."""
        raise NotImplementedError

    def latest_offset(self, start: dict) -> dict:
        """Driver: the newest offset available now (`start` when there is nothing new)."""
        raise NotImplementedError

    def end_offset(self, start: dict, latest: dict, max_records: int) -> dict:
        """Driver: an offset between `start` and `latest` at most `max_records` records after
        `start` (the read limit, batch.max.records, or the pace). Return `start` itself
        when no record is left before `latest`. Default: `latest` (no limit)."""
        return latest

    def default_max_records(self) -> int | None:
        """Driver: the read limit when batch.max.records is not given (e.g. from an option of
        the source's own); None: everything available per micro-batch. Default: None."""
        return None

    def records_per_second(self) -> float | None:
        """Driver: pace the source at this many records per second, counted by `lag_field`
        from the first micro-batch of the query (a batch is cut to what the pace allows; with
        run = 'once' the query waits for the pace instead of ending). Default: None (no pace)."""
        return None

    def available_now(self) -> None:
        """Driver, at CREATE with run = 'once' and when such a query starts (it reads up to the
        offset latest at its start, then stops): raise ValidationError when this source cannot
        finish (e.g. unbounded work). Default: nothing to check."""

    def total_records(self) -> int | None:
        """Driver, when a progress bar is first drawn: how many records bounded work holds
        (e.g. a snapshot's rows); None: not known. Default: None."""
        return None

    def reported_latest(self, latest: dict) -> dict | None:
        """Driver: the latest offset to report, from which lag is computed; None: there is no
        meaningful latest (an unbounded generator); or {"lag": n, "unit": "rows" or "bytes"}
        when the source counts how far behind it is itself (a database's change log). Default:
        `latest`."""
        return latest

    def partitions(self, start: dict, end: dict) -> list[Any]:
        """Driver: the work of records after `start` up to `end`, as JSON-able values that
        `read` takes; each is read by one task. Default: one partition {"start", "end"}."""
        return [{"start": start, "end": end}]

    def read(self, partition: Any) -> Iterator[Any]:
        """Executor: the partition's records, in order, as pyarrow RecordBatches, or dicts
        (column name -> value; the toolkit makes Arrow of them), or DeadLetters; a source of
        several tables yields (table name, records) pairs and DeadLetters."""
        raise NotImplementedError

    def commit(self, end: dict) -> None:
        """Driver: every record up to `end` is durable in the stream (e.g. acknowledge, delete).
        Called once per end, in order, as soon as the toolkit knows it: at the next trigger
        (an idle source's last batch too), and after a stop for the last batch in the
        checkpoint's commit log (then on a fresh instance, see commits_at_stop). A later end covers the earlier ones, which may be skipped.
        Raising Retryable retries it with backoff; if it still raises Retryable, that is
        logged and the acknowledgement tried again at the next end, never failing the data
        path. Any other exception fails the query, as a failing read does."""

    def endpoint(self) -> str | None:
        """Driver, at CREATE and each start: where reads wait (e.g. 'host:port'), named when a
        batch hangs ("waiting 75 s on host:port (source read)"). Default: None."""
        return None

    def on_drop(self, connector: str) -> str | None:
        """Driver, at DROP CONNECTOR `connector`: remove what the source keeps in the external
        system for it (a consumer group, a replication slot); returns what it did, shown to the
        user, or None. If it raises, the connector is dropped anyway and the error shown."""
        return None

    def close(self) -> None:
        """Driver: the query stops."""
