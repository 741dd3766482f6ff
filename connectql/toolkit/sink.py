"""Sink: the contract of a connector that writes a stream into an external system.

The toolkit gives every sink the exactly-once pattern of the database sinks: each micro-batch
is written together with its batch id (in one transaction, one file rename, ...), and a batch
Spark replays after a crash is recognised by `last_batch` and skipped. It needs no pyspark: the
toolkit builds the Spark stream writer around it (connectql/toolkit/spark.py).

What is called when, and where:

* On the driver, at CREATE: ``Sink(options)``, then ``check(schema)``.
* On the driver, each time the query starts (after CREATE, RESUME, ALTER, a restart after a
  failure or a schema's evolution), before its first batch: ``open(writer, schema)``, perhaps
  more than once (Spark makes the writer for its commits and again for its tasks): make it
  idempotent.
* Per micro-batch, on the executors, one call per task: ``stage(writer, batch_id, task, data)``
  with that task's rows as a pyarrow Table; what it returns travels to the driver (pickled).
* Then on the driver, once: ``last_batch(writer)``; when the batch is not yet there,
  ``commit(writer, batch_id, staged)`` with every task's ``stage`` result; when Spark gives up
  the batch, ``abort(writer, batch_id, staged)``.

The defaults make a simple sink: ``stage`` returns its rows, ``commit`` concatenates them and
calls ``write(writer, batch_id, table)``, the one method a simple sink implements (with
``last_batch``). A sink that must scale out writes its rows in ``stage`` (e.g. into a staging
table or temporary files) and only publishes them in ``commit``.

``stage_batches(writer, batch_id, task, rows)`` is what the toolkit calls per task, with the
rows as a ``pyarrow.RecordBatchReader`` that yields them as Spark sends them (batches of
``spark.sql.execution.arrow.maxRecordsPerBatch`` rows); its default gathers them into one Table
for ``stage``. A sink whose tasks get more rows than it should hold at once (a bulk copy, a
multipart upload) overrides ``stage_batches`` and writes each batch as it comes.

`writer` is a stable id of the connector's checkpoint (a new id after DROP and CREATE): record
``(writer, batch_id)`` with the data, and answer ``last_batch(writer)`` from the target.

Records the target refuses (a value too long, a constraint): a sink with ``rejects = True``
raises ``Rejected({row: why})`` from ``write`` having written nothing. With errors.tolerance =
'all' the toolkit puts those rows in the dead-letter stream (once per batch, before the batch
is recorded, so a replay neither loses nor repeats them) and calls ``write`` again with the
other rows; otherwise the batch fails naming the first. The rows a sink rejects must be the
same when a batch is replayed.

A staged sink meets refused rows in ``commit`` (the staged rows are merged into the target
there), where the toolkit does not hold the rows: ``commit`` raises ``Rejected({key: why},
records={key: row})``, having published nothing, with keys of its own that name the rows
(e.g. ``(task, index)`` or a staged row's sequence number; JSON-able and hashable) and each
row's values (a dict). The toolkit puts those rows in the dead-letter stream as above, sets
``rejected`` to every key named so far in this batch and calls ``commit`` again, which leaves
those rows out; ``rejected`` is empty again for the next batch. A record's values may also be
given as its JSON text (a str), which the dead-letter stream keeps as it is (e.g. a row as the
target's database printed it, decimals exact).

A sink with ``several = True`` may write several streams in one query (option ``streams =
'a, shop_*'`` instead of FROM stream, Kafka Connect's ``topics.regex``): the toolkit makes one
Sink per stream from the options with ``${stream}`` (the stream's name) and ``${table}`` (the
source table it carries) filled in (e.g. ``table = 'out_${table}'``), each told its own stream's
key and given a writer id of its own, so that each stream is written exactly once as by a sink
of its own. ``together(sinks)`` wraps each round of calls to them in one process.
``target_options`` says which options name each stream's target, so that CREATE can refuse
streams that would all go to one.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import pyarrow as pa

from connectql.config import Option
from connectql.errors import ValidationError

DELIVERIES = ("exactly-once", "idempotent", "at-least-once")


def row_ids(writer: str, batch_id: int, count: int) -> list[str]:
    """Stable ids of a batch's rows, in the order `write` gets them (`commit`'s default joins
    the tasks' rows in task order): a replayed batch reads the same stream files into the same
    tasks, so its rows come in the same order and get the same ids. For an idempotent sink:
    '<writer>-<batch>-<row>'."""
    return [f"{writer}-{batch_id}-{i}" for i in range(count)]


def own_trigger(options: dict[str, Any], name: str, who: str, what: str) -> int | None:
    """A sink's flush_interval_ms from its option `name` (milliseconds; None when absent),
    refused under 1 or beside trigger.interval, which also sets how often `what`."""
    every = options.get(name)
    if every is None:
        return None
    if every < 1:
        raise ValidationError(f"{who}: {name} must be at least 1")
    if options.get("trigger.interval"):
        raise ValidationError(
            f"{who}: {name} and trigger.interval both set how often {what}; give one"
        )
    return every


class Rejected(Exception):
    """Raised by `write`, having written nothing: `rows` maps rows of its `data` (index) that
    the target refuses to why (a message, the exception, or (error class, message)). Raised by
    `commit`, having published nothing: `rows` maps the sink's own keys of the refused rows to
    why, and `records` the same keys to the rows' values (a dict, or the row's JSON text)."""

    def __init__(
        self,
        rows: dict[Any, str | BaseException | tuple[str, str]],
        records: dict[Any, dict[str, Any]] | None = None,
    ):
        super().__init__(f"{len(rows)} rows rejected")
        self.rows = dict(rows)
        self.records = dict(records or {})


class Sink:
    """Base class of a sink. Subclass it, declare `options` and `delivery`, implement `write`
    and `last_batch` (or `stage`, `commit`, `abort` and `last_batch`)."""

    #: the connector's own options (the common ones come for free)
    options: ClassVar[Sequence[Option]] = ()
    #: what the sink promises: 'exactly-once' (last_batch answers from the target),
    #: 'idempotent' (the target drops a row it already has by the row's id, row_ids(), within
    #: a window of its own, e.g. JetStream's Nats-Msg-Id) or 'at-least-once' (last_batch
    #: returns None: a replayed batch is written again)
    delivery: ClassVar[str] = "exactly-once"
    #: whether `write` (or `commit`) may raise Rejected (errors.tolerance = 'all' is accepted)
    rejects: ClassVar[bool] = False
    #: whether it may write several streams in one query (option streams; see above)
    several: ClassVar[bool] = False
    #: with `several`: the options that name where a stream's records go (a table, a topic, a
    #: path, an object name template), each with the sink's own mark for the stream's name in
    #: it, filled in by the sink itself ('' when it has none: ${stream} and ${table} are filled
    #: in every option), e.g. {'table': ''} or {'file.name.template': '{stream}'}. CREATE
    #: refuses a sink of several streams whose streams' options, marks filled in, come out the
    #: same (they would be written alike, into one target), naming these options.
    target_options: ClassVar[Mapping[str, str]] = {}
    #: the lease epoch of the worker that runs the sink (set by the toolkit on the driver; None
    #: without a lease): a standby that takes over has a higher one, and an exactly-once sink
    #: records it with the batch and refuses to write when the target holds a higher one for
    #: its writer (the older worker was paused and came back)
    epoch: int | None = None
    #: the keys (as a staged sink's `commit` named them in Rejected) of this batch's rows
    #: already in the dead-letter stream: `commit` leaves them out (set by the toolkit)
    rejected: frozenset = frozenset()
    #: the connector's name (set by the toolkit before open; "" at CREATE), e.g. to record
    #: with the batch ids which connector wrote them
    connector: str = ""
    #: the columns that identify a row of the stream it reads (its source's key, e.g. a
    #: table's primary key; () when the stream has none), set by the toolkit before check and
    #: open: what an upsert or merge sink keys its target by unless told otherwise
    stream_key: tuple[str, ...] = ()

    def __init__(self, options: dict[str, Any]):
        """`options`: validated and resolved (defaults filled in, secrets in clear), by name."""
        self.options = dict(options)

    @classmethod
    def together(cls, sinks: Sequence[Sink]) -> contextlib.AbstractContextManager:
        """Driver or executor, with several streams (`several`): around each round of calls to
        their sinks in one process (their opens, one task's stage_batches, one batch's
        commits), e.g. to lend them a few shared connections for the round instead of one
        each. Default: nothing."""
        return contextlib.nullcontext()

    def flush_interval_ms(self) -> int | None:
        """How often micro-batches start when `trigger.interval` is not set (None: as fast as
        data arrives): a sink that writes per batch (e.g. one object) rolls at this pace."""
        return None

    def check(self, schema: pa.Schema) -> None:
        """Driver, at CREATE, with the schema of the rows it will get: prepare the target
        (e.g. create its table) or raise ValidationError naming what is wrong. A field whose
        column has a DDL COMMENT carries it as metadata {b"comment": ...}: a database source
        puts there the type it read the column as ('{"postgres": "uuid"}'), which a sink may
        create the column as."""

    def unread_columns(self) -> Sequence[str]:
        """Driver, at CREATE and each start: columns of the stream this sink never reads (e.g.
        the change metadata an upsert does not write): Spark then does not read them from the
        stream at all, and the sink's rows lack them. Default: none."""
        return ()

    def open(self, writer: str, schema: pa.Schema) -> None:
        """Driver, each time the query starts, before its first batch, with the schema of the
        rows (as check's; it may have gained columns since CREATE): ready the target for
        `writer` (e.g. add the columns it lacks, create the row that records its batch ids and
        claim it for this `epoch`, so that an older worker's batches are refused from now on).
        Default: nothing."""

    def last_batch(self, writer: str) -> int | None:
        """Driver: the highest batch id `commit` recorded for `writer` in the target, or None."""
        raise NotImplementedError

    def write(self, writer: str, batch_id: int, data: pa.Table) -> None:
        """Driver: write the batch's rows AND record (writer, batch_id), atomically."""
        raise NotImplementedError

    def stage_batches(
        self, writer: str, batch_id: int, task: int, rows: pa.RecordBatchReader
    ) -> Any:
        """Executor: one task's rows as they arrive (read them once). Returns what `commit`
        needs (pickled). Default: `stage` of the rows gathered into one Table."""
        return self.stage(writer, batch_id, task, rows.read_all())

    def stage(self, writer: str, batch_id: int, task: int, data: pa.Table) -> Any:
        """Executor: one task's rows. Returns what `commit` needs (pickled). Default: the rows."""
        return data

    def commit(self, writer: str, batch_id: int, staged: list[Any]) -> None:
        """Driver: publish every task's staged rows and record (writer, batch_id), atomically,
        leaving out the rows whose keys are in `rejected`; raise Rejected (with `records`)
        for rows the target refuses. Default: `write` of the staged rows, concatenated."""
        tables = [t for t in staged if t is not None and t.num_rows]
        if tables:
            self.write(writer, batch_id, pa.concat_tables(tables, promote_options="permissive"))

    def abort(self, writer: str, batch_id: int, staged: list[Any]) -> None:
        """Driver: the batch failed; undo what `stage` left. Default: nothing (it wrote nothing)."""

    def endpoint(self) -> str | None:
        """Driver, at CREATE and each start: where writes wait (e.g. 'host:port'), named when a
        batch hangs. Default: None."""
        return None

    def on_drop(self, connector: str) -> str | None:
        """Driver, at DROP CONNECTOR `connector`: remove what the sink keeps in the target for
        it (e.g. its progress rows); returns what it did, or None. Default: nothing."""
        return None

    def close(self) -> None:
        """Driver: the query stops."""
