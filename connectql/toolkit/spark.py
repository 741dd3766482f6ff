"""The Spark data source built around a toolkit Source or Sink (`format("connectql_toolkit")`).

The connector's class travels as "module:Qualname" and its options as JSON (secret values apart,
under keys Spark redacts); each Spark process (the driver's data source runner, the executors'
Python workers) rebuilds the connector from them."""

from __future__ import annotations

import importlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from connectql.config import is_secret_key
from connectql.errors import PermanentError, TableFailed
from connectql.toolkit.envelope import DEAD_LETTER_COLUMN, deadletter_name, sink_dead_letters
from connectql.toolkit.packed import (
    ADDED_OPTION,
    FAILED_OPTION,
    ONE_KEY,
    ONE_OPTION,
    SNAPSHOT_OPTION,
    option_schemas,
    pack,
    pack_letters,
)
from connectql.toolkit.readsize import Learned, Tally
from connectql.toolkit.sink import Rejected, Sink
from connectql.toolkit.source import DeadLetter, Retryable, Source, raw_text

FORMAT = "connectql_toolkit"
CLASS_KEY = "connectql.toolkit.class"
CONFIG_KEY = "connectql.toolkit.config"
SECRET_PREFIX = "connectql.toolkit.secret."  # Spark redacts keys holding 'secret'
MAX_RECORDS_KEY = "connectql.toolkit.max.records"
MAX_BYTES_KEY = "connectql.toolkit.max.bytes"
STREAM_KEY_KEY = "connectql.toolkit.stream.key"  # a sink's stream's key columns, JSON

log = logging.getLogger("connectql.toolkit")


def spark_options(cls: type, options: dict[str, Any], secret: set[str]) -> dict[str, str]:
    """What the data source needs to rebuild `cls(options)` in any Spark process."""
    hidden = {k for k in options if k in secret or is_secret_key(k)}
    plain = {k: v for k, v in options.items() if k not in hidden}
    out = {
        CLASS_KEY: f"{cls.__module__}:{cls.__qualname__}",
        CONFIG_KEY: json.dumps(plain, sort_keys=True, default=str),
    }
    out.update({SECRET_PREFIX + k: str(options[k]) for k in hidden if options[k] is not None})
    return out


def connector_of(options) -> Any:
    """The Source or Sink instance that spark_options described."""
    module, _, name = options[CLASS_KEY].partition(":")
    cls: Any = importlib.import_module(module)
    for part in name.split("."):
        cls = getattr(cls, part)
    given = json.loads(options[CONFIG_KEY])
    for key in options:
        if key.lower().startswith(SECRET_PREFIX):
            given[key[len(SECRET_PREFIX) :]] = options[key]
    return cls(given)


def ddl(schema: Any) -> str:
    """Spark DDL of a schema given as DDL text or as a pyarrow Schema."""
    if isinstance(schema, str):
        return schema
    if isinstance(schema, pa.Schema):
        struct = from_arrow_schema(schema, prefer_timestamp_ntz=False)
        return ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in struct.fields)
    raise TypeError(f"a schema is Spark DDL text or a pyarrow Schema, not {type(schema).__name__}")


def arrow_schema(schema: StructType) -> pa.Schema:
    return to_arrow_schema(schema, timezone="UTC")


def described_schema(schema: StructType) -> pa.Schema:
    """arrow_schema, each field that has a DDL COMMENT (e.g. the type its source declared)
    carrying it as metadata {b"comment": ...}: what a sink is shown in check and open."""
    out = arrow_schema(schema)
    notes = [(s.metadata or {}).get("comment") for s in schema.fields]
    return pa.schema(
        [f.with_metadata({"comment": n}) if n else f for f, n in zip(out, notes, strict=True)]
    )


def retried(source, call: Callable, *args):
    """call(*args), tried again with doubling waits while it raises Retryable."""
    wait = source.retry_backoff_ms / 1000
    for attempt in range(source.retries + 1):
        try:
            return call(*args)
        except Retryable:
            if attempt == source.retries:
                raise
            time.sleep(wait)
            wait = min(wait * 2, 30.0)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A Source as Spark's stream reader: read limits, pacing, available-now, retries, dead
    letters; a source of several tables sends its rows packed (toolkit/packed.py)."""

    def __init__(self, source: Source, schema: StructType, options):
        self.source = source
        self.arrow_schema = arrow_schema(schema)
        parts = option_schemas(options)
        self.tables = {t: arrow_schema(s) for t, s in parts.items()} if parts else None
        self.one = options.get(ONE_OPTION) == "true"  # one table's records, packed
        given = int(options.get(MAX_RECORDS_KEY) or 0)
        self.max_records = given or source.default_max_records() or 0
        self.max_bytes = int(options.get(MAX_BYTES_KEY) or 0)
        self.connector = options.get("connectql.connector") or type(source).__name__
        source.connector = options.get("connectql.connector") or ""
        source.checkpoint = options.get("connectql.checkpoint") or ""
        source.failed = frozenset(json.loads(options.get(FAILED_OPTION) or "[]"))
        source.added = frozenset(json.loads(options.get(ADDED_OPTION) or "[]"))
        source.snapshots = json.loads(options.get(SNAPSHOT_OPTION) or "{}")
        data = [f for f in self.arrow_schema if f.name != DEAD_LETTER_COLUMN]
        streams = self.tables or {None: pa.schema(data)}
        source.stream_schemas = {None if t == ONE_KEY else t: s for t, s in streams.items()}
        if self.tables is not None and set(self.tables) <= source.failed:
            raise PermanentError(f"{self.connector}: every table stopped (see tables_failed)")
        self.available_now = False
        self._target: dict | None = None  # available-now: the latest offset when it started
        self._latest: dict | None = None
        self._initial: dict | None = None  # where a new query started (nothing to commit)
        self._committed: dict | None = None  # the last end source.commit took
        self.pacer = Pacer.of(source)
        self.sizes = Learned(source.checkpoint, self.max_bytes) if self.max_bytes else None

    def initialOffset(self) -> dict:
        self._initial = retried(self.source, self.source.initial_offset)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records) if self.max_records else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.source.available_now()
        self.available_now = True

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        # Spark asks from `start` once the batch that ended there is in its commit log: durable
        # in the stream, so the source may acknowledge it now (an idle source gets no other
        # commit for its last batch, Spark committing a batch only when the next is planned)
        self._durable(start)
        if self.source.plans_batches:  # where the next batch ends, the run's end too
            self._latest = retried(self.source, self.source.latest_offset, start)
            return self._latest
        latest = self._target
        if latest is None:
            latest = retried(self.source, self.source.latest_offset, start)
            if self.available_now:
                self._target = latest
        self._latest = latest
        if latest == start:
            return start
        most = int(limit.max_rows) if isinstance(limit, ReadMaxRows) else None
        if self.pacer is not None:
            allowed = self.pacer.allowed(start)
            while allowed < 1 and self.available_now and self._left(start, latest):
                self.pacer.wait_for_one(start)  # ending now would end the run before its end
                allowed = self.pacer.allowed(start)
            if allowed < 1:
                return start
            most = allowed if most is None else min(most, allowed)
        if self.sizes is not None:
            by_bytes = self.sizes.most_records()
            most = by_bytes if most is None else min(most, by_bytes)
        if most is None:
            return latest
        end = self.source.end_offset(start, latest, most)
        return start if end == start else end

    def _left(self, start: dict, latest: dict) -> bool:
        return self.source.end_offset(start, latest, 1) != start

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else self.source.reported_latest(self._latest)

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        parts = retried(self.source, self.source.partitions, start, end)
        return [InputPartition(json.dumps(p)) for p in parts]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        tally = Tally()
        yield from self._read(partition, tally)
        if self.max_bytes:
            tally.write(self.source.checkpoint, partition.value)

    def _read(self, partition: InputPartition, tally: Tally) -> Iterator[pa.RecordBatch]:
        records = _first_retried(self.source, json.loads(partition.value))
        try:
            if self.tables is not None:
                yield from self._packed(records, tally)
                return
            size = self.source.rows_per_batch
            yield from tally.add(to_batches(records, self.arrow_schema, size, self._bad))
        except TableFailed as e:
            if self.tables is None or e.table not in self.tables or e.table in self.source.failed:
                live = ", ".join(t for t in self.tables or () if t not in self.source.failed)
                raise PermanentError(
                    f"{self.connector}: read raised TableFailed for {e.table!r}, not a table it"
                    f" still reads ({live or 'it reads one table'})"
                ) from None
            raise

    def _bad(self, letter: DeadLetter) -> dict:
        """The row that carries a dead letter (errors.tolerance = 'all'), or the failure."""
        if DEAD_LETTER_COLUMN not in self.arrow_schema.names:
            self._refuse(letter)
        text = _letter(letter)
        text["source_offset"] = text.pop("offset")
        return {DEAD_LETTER_COLUMN: json.dumps(text)}

    def _refuse(self, letter: DeadLetter) -> None:
        where = f" at {json.dumps(letter.offset)}" if letter.offset else ""
        raise PermanentError(
            f"{self.connector}: a record{where} does not parse: {letter.error}"
            " (errors.tolerance = 'all' sends such records to a dead-letter stream)"
        )

    def _packed(self, records: Iterator[Any], tally: Tally) -> Iterator[pa.RecordBatch]:
        """A several-table source's (table, records) pairs (a one-table source's records) as
        packed chunks, each table's dict records gathered into batches; its dead letters
        packed last."""
        size, rows, letters = self.source.rows_per_batch, {}, []
        for record in records:
            if isinstance(record, DeadLetter):
                if self.source.options.get("errors.tolerance") != "all":
                    self._refuse(record)
                letters.append(_letter(record))
                continue
            table, value = (ONE_KEY, record) if self.one else self._table_of(record)
            if table in self.source.failed:
                continue
            pending = rows.setdefault(table, [])
            pending.append(value)
            if isinstance(value, dict) and len(pending) < size:
                continue
            yield from self._pack(table, rows.pop(table), tally)
        for table, left in rows.items():
            yield from self._pack(table, left, tally)
        if letters:
            yield pack_letters(letters)

    def _table_of(self, record) -> tuple[str, Any]:
        if not (isinstance(record, tuple) and len(record) == 2 and record[0] in self.tables):
            raise PermanentError(
                f"{self.connector}: a source of several tables yields (table, records) pairs"
                f" of its tables ({', '.join(self.tables)}), not {_shown(record)}"
            )
        return record

    def _pack(self, table: str, records: list, tally: Tally) -> Iterator[pa.RecordBatch]:
        schema = self.tables[table]
        batches = to_batches(records, schema, self.source.rows_per_batch, self._refuse)
        for batch in tally.add(batches):
            yield pack(table, batch, schema)

    def commit(self, end: dict) -> None:
        self._durable(end)

    def _durable(self, end: dict) -> None:
        """source.commit(end) once the batch ending there is durable (acknowledge)."""
        if end is None or end == self._committed or end == self._initial:
            return
        if acknowledge(self.source, end, self.connector):
            self._committed = end

    def stop(self) -> None:
        self.source.close()


ACKED_FILE = "connectql_acknowledged.json"  # in the checkpoint: the last end source.commit took


def acknowledge(source: Source, end: dict, name: str) -> bool:
    """source.commit(end) unless the checkpoint says that end is acknowledged already (by the
    reader's process, or the driver after a stop); retried while it raises Retryable. When it
    still raises Retryable, that is logged and False returned: it is tried again at the next
    end, the data path going on. Any other error is raised (the source is broken: its query
    fails and is restarted, as when a read fails)."""
    marker = Path(source.checkpoint) / ACKED_FILE if source.checkpoint else None
    text = json.dumps(end, sort_keys=True)
    if marker is not None and marker.is_file() and marker.read_text() == text:
        return True
    try:
        retried(source, source.commit, end)
    except Retryable as e:  # an acknowledgement is tried again at the next end
        log.warning("%s: commit(%s) failed: %s", name, text, e)
        return False
    if marker is not None:
        tmp = marker.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(marker)
    return True


def commit_after_stop(options, checkpoint: str, name: str) -> None:
    """After a toolkit source's query stopped: commit the last batch in its commit log (the
    reader's process gets no call at a stop), on a fresh instance of the source."""
    end = last_committed_end(checkpoint)
    if end is None:
        return
    source = connector_of(options)
    if not isinstance(source, Source) or not source.commits_at_stop:
        return
    source.connector, source.checkpoint = name, checkpoint
    try:
        acknowledge(source, end, name)
    finally:
        source.close()


def last_committed_end(checkpoint: str) -> dict | None:
    """The source's end offset of the newest batch in the query's commit log (None: none)."""
    return _last_end(checkpoint, "commits")


def last_planned_end(checkpoint: str) -> dict | None:
    """The source's end offset of the newest batch in the query's offset log (None: none)."""
    return _last_end(checkpoint, "offsets")


def _last_end(checkpoint: str, log: str) -> dict | None:
    if not checkpoint:
        return None
    ids, offsets = Path(checkpoint) / log, Path(checkpoint) / "offsets"
    done = [int(p.name) for p in ids.iterdir() if p.name.isdigit()] if ids.is_dir() else []
    if not done or not (offsets / str(max(done))).is_file():
        return None
    lines = (offsets / str(max(done))).read_text().splitlines()
    return json.loads(lines[2]) if len(lines) > 2 and lines[2].strip() else None


def _letter(letter: DeadLetter) -> dict:
    """A dead letter as runtime/deadletters.py reads a packed one."""
    return {
        "offset": json.dumps(letter.offset, sort_keys=True, default=str) if letter.offset else None,
        "error_class": letter.error_class,
        "error_message": letter.error,
        "raw_record": raw_text(letter.raw),
    }


def _why(error: str | BaseException | tuple[str, str]) -> tuple[str, str]:
    """(error class, one-line message) of a rejected row's reason."""
    if isinstance(error, tuple):
        return str(error[0]), " ".join(str(error[1]).split())
    kind = type(error).__name__ if isinstance(error, BaseException) else "REJECTED"
    return kind, " ".join(str(error).split())


def _json(row) -> str:
    """A rejected row's values as JSON text: a str is that text already (Rejected's records)."""
    return row if isinstance(row, str) else json.dumps(row, default=str)


def _shown(record) -> str:
    text = repr(record)
    return text if len(text) <= 80 else text[:77] + "..."


class Pacer:
    """Records per second counted by the source's lag_field, from the first offset it saw."""

    def __init__(self, rate: float, field: str):
        self.rate, self.field = rate, field
        self.clock = time.monotonic
        self._anchor: tuple[float, int] | None = None  # (clock, position) at the first call

    @classmethod
    def of(cls, source: Source) -> Pacer | None:
        rate = source.records_per_second()
        if rate is None:
            return None
        if not source.lag_field:
            raise PermanentError(
                f"{type(source).__name__}: records_per_second() needs lag_field (the offset key"
                " that counts records)"
            )
        return cls(float(rate), source.lag_field)

    def allowed(self, start: dict) -> int:
        """How many records after `start` the pace allows now (may be 0 or less)."""
        now, position = self.clock(), int(start[self.field])
        if self._anchor is None:
            self._anchor = (now, position)
        since, first = self._anchor
        return first + math.floor((now - since) * self.rate) - position

    def wait_for_one(self, start: dict) -> None:
        since, first = self._anchor
        due = since + (int(start[self.field]) + 1 - first) / self.rate
        time.sleep(max(0.0, due - self.clock()) + 0.001)


def _first_retried(source: Source, partition) -> Iterator[Any]:
    """source.read(partition), started again while it raises Retryable before its first record
    (after one, a retry would repeat records: the error fails the batch, which Spark replays)."""
    attempt, wait = 0, source.retry_backoff_ms / 1000
    while True:
        records = iter(source.read(partition))
        try:
            first = next(records, None)
            break
        except Retryable:
            attempt += 1
            if attempt > source.retries:
                raise
            time.sleep(wait)
            wait = min(wait * 2, 30.0)
    if first is not None:
        yield first
        yield from records


def to_batches(
    records: Iterator[Any], schema: pa.Schema, size: int, bad: Callable[[DeadLetter], dict]
) -> Iterator[pa.RecordBatch]:
    """Record batches of `schema` from RecordBatches, Tables, dicts and DeadLetters."""
    rows: list[dict] = []
    for record in records:
        if isinstance(record, (dict, DeadLetter)):
            rows.append(bad(record) if isinstance(record, DeadLetter) else record)
            if len(rows) >= size:
                yield _from_rows(rows, schema)
                rows = []
            continue
        if rows:
            yield _from_rows(rows, schema)
            rows = []
        parts = record.to_batches() if isinstance(record, pa.Table) else [record]
        yield from (conform(b, schema) for b in parts)
    if rows:
        yield _from_rows(rows, schema)


def _from_rows(rows: list[dict], schema: pa.Schema) -> pa.RecordBatch:
    try:
        return pa.RecordBatch.from_pylist(rows, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise PermanentError(
            f"a record does not fit the schema ({schema_text(schema)}): {e}"
        ) from None


def conform(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """`batch` with the columns of `schema`, in its order and types (a column absent: nulls)."""
    if batch.schema.equals(schema):
        return batch
    arrays = []
    for f in schema:
        if f.name in batch.schema.names:
            arrays.append(batch.column(f.name).cast(f.type))
        else:
            arrays.append(pa.nulls(batch.num_rows, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def schema_text(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name} {f.type}" for f in schema)


class Staged(WriterCommitMessage):
    """What one task's `stage` returned (and, when counted, how many rows it was given)."""

    def __init__(self, value: Any, rows: int | None = None):
        self.value = value
        self.rows = rows


def told(sink: Sink, options) -> Sink:
    """`sink` told what the toolkit tells a sink before it opens it: its worker's lease epoch,
    its connector's name and its stream's key."""
    epoch = options.get("connectql.epoch")
    sink.epoch = int(epoch) if epoch else None
    sink.connector = options.get("connectql.connector") or ""
    sink.stream_key = tuple(json.loads(options.get(STREAM_KEY_KEY) or "[]"))
    return sink


class StreamWriter(DataSourceStreamArrowWriter):
    """A Sink as Spark's stream writer: tasks stage, the driver commits once per batch id."""

    def __init__(self, sink, schema: StructType, options):
        self.sink = sink
        self.arrow_schema = arrow_schema(schema)
        self.writer = options.get("connectql.writer") or "default"
        self.connector = options.get("connectql.connector") or type(sink).__name__
        self.deadletter = options.get("connectql.deadletter")
        told(sink, options).open(self.writer, described_schema(schema))

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Staged:
        ctx = TaskContext.get()
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId"))
        return self.stage(batch_id, ctx.partitionId(), iterator)

    def stage(self, batch_id: int, task: int, batches: Iterator[pa.RecordBatch]) -> Staged:
        """One task's rows of the batch through the sink's stage_batches."""
        rows = pa.RecordBatchReader.from_batches(self.arrow_schema, batches)
        return Staged(self.sink.stage_batches(self.writer, batch_id, task, rows))

    def commit(self, messages: list[Staged], batchId: int) -> None:  # noqa: N803 (Spark's name)
        done = self.sink.last_batch(self.writer)
        staged = [m.value for m in messages if m is not None]
        if done is not None and done >= batchId:  # a replay of a batch already written
            self.sink.abort(self.writer, batchId, staged)
            return
        if type(self.sink).commit is Sink.commit:  # write(): rejected rows are dead letters
            self._write(batchId, [t for t in staged if t is not None and t.num_rows])
        else:
            self._commit(batchId, staged)

    def _commit(self, batch_id: int, staged: list[Any]) -> None:
        """A staged sink's commit; while it raises Rejected naming rows by its own keys (with
        a dead-letter stream), those rows go there and it is called again with every key
        named so far in `rejected`, to leave them out (dead letters first, as in _write)."""
        rounds = 0
        try:
            while True:
                try:
                    self.sink.commit(self.writer, batch_id, staged)
                    return
                except Rejected as r:
                    rejected = self._rejected_at_commit(r)
                    self._dead_letters(batch_id, rejected, rounds)
                    self.sink.rejected |= frozenset(r.rows)
                    rounds += 1
        finally:
            self.sink.rejected = frozenset()

    def _rejected_at_commit(self, r: Rejected) -> list[tuple[dict, Any, str, str]]:
        """(row, key, error class, message) of what a staged sink's commit rejected."""
        bad = [k for k in r.rows if k not in r.records]
        again = [k for k in r.rows if k in self.sink.rejected]
        if bad or again or not r.rows:  # a sink's mistake: it would be asked forever
            keys = bad or again
            what = "without its row in records" if bad else "again, though left out"
            shown = ", ".join(map(repr, keys[:5])) if keys else "no row"
            raise PermanentError(f"{self.connector}: commit's Rejected names {shown} {what}")
        keys = list(r.rows)
        why = self._judged(r, keys, _shown(r.records[keys[0]]))
        return [(r.records[k], k, c, m) for k, (c, m) in zip(keys, why, strict=True)]

    def _judged(self, r: Rejected, keys: list, first: str) -> list[tuple[str, str]]:
        """(error class, message) of each rejected row; without a dead-letter stream the batch
        fails naming the `first` of them."""
        why = [_why(r.rows[k]) for k in keys]
        if not self.deadletter:
            raise PermanentError(
                f"{self.connector}: the target rejects row {first}: {why[0][1]}"
                " (errors.tolerance = 'all' sends such rows to a dead-letter stream)"
            )
        return why

    def _write(self, batch_id: int, tables: list[pa.Table]) -> None:
        """The batch's rows through `write`; while it raises Rejected (with a dead-letter
        stream), the rejected rows set apart and the others written again. Each round's dead
        letters are committed before the next write, so the one that records the batch comes
        after all of them (a replay finds them committed, by name, and adds none)."""
        if not tables:
            return
        data = pa.concat_tables(tables, promote_options="permissive")
        rows, rejected = list(range(data.num_rows)), []  # rows: their places in data
        filed = rounds = 0  # rejected rows already committed as dead letters, in how many files
        while True:
            if len(rejected) > filed:
                picked = data.take([n for n, _c, _m in rejected[filed:]]).to_pylist()
                letters = [(row, *r) for row, r in zip(picked, rejected[filed:], strict=True)]
                self._dead_letters(batch_id, letters, rounds)
                filed, rounds = len(rejected), rounds + 1
            if not rows:
                return
            try:
                self.sink.write(self.writer, batch_id, data.take(rows) if rejected else data)
                return
            except Rejected as r:
                rejected += self._rejected(r, rows)
                rows = [n for i, n in enumerate(rows) if i not in r.rows]

    def _rejected(self, r: Rejected, rows: list[int]) -> list[tuple[int, str, str]]:
        outside = [i for i in r.rows if not (isinstance(i, int) and 0 <= i < len(rows))]
        if outside or not r.rows:  # a sink's mistake: a batch half-judged is not guessed at
            shown = "row " + ", ".join(map(repr, outside[:5])) if outside else "no row"
            raise PermanentError(
                f"{self.connector}: Rejected names {shown}, not a row of the data it was given"
                f" (rows 0 to {len(rows) - 1})"
            )
        bad = sorted(r.rows)
        why = self._judged(r, bad, f"{rows[bad[0]]} of the batch")
        return [(rows[i], c, m) for i, (c, m) in zip(bad, why, strict=True)]

    def _dead_letters(self, batch_id: int, rejected, round_: int) -> None:
        """Commit one round's dead letters, (row values, where, error class, message) each,
        under a name of the batch and round (a replay finds it committed and adds none)."""
        from connectql.catalog.streams import append_table

        rows = [(_json(row), n, c, m) for row, n, c, m in rejected]
        name = deadletter_name(self.writer, batch_id) + (f"-{round_}" if round_ else "")
        append_table(self.deadletter, name, sink_dead_letters(self.connector, batch_id, rows))

    def abort(self, messages: list[Staged], batchId: int) -> None:  # noqa: N803
        self.sink.abort(self.writer, batchId, [m.value for m in messages if m is not None])
