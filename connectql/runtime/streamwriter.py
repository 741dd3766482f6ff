"""Writing a source's micro-batches into streams exactly once, from Spark's foreachBatch.

Each batch's files are staged, moved into the stream under names that carry the writer's id
and the batch id, then committed by one atomic entry in the stream's `_spark_metadata` log;
a replayed batch whose files are already committed is skipped. Unlike Spark's file sink, many
connectors can write one stream, and one batch can feed two streams (rows and dead letters)."""

from __future__ import annotations

import functools
import logging
import re
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark import TaskContext

from connectql.catalog.streams import append_files, append_table, committed_files
from connectql.errors import PermanentError, SchemaEvolved, cause
from connectql.errortext import short_error
from connectql.toolkit.packed import ONE_KEY, ROWS_COLUMN, by_table

log = logging.getLogger("connectql.runtime")


class BatchFailed(RuntimeError):
    """A stream write failed; carries a short message, see concise()."""


# a stream file's row groups stay small enough for a sink's read to split one big batch file
# between tasks (Spark splits files at row-group bounds; Parquet's default is 128 MB)
ROW_GROUP_BYTES = 8 * 1024 * 1024
_INTERRUPTS = ("java.lang.InterruptedException", "java.nio.channels.ClosedByInterruptException")


def concise(e: Exception) -> str:
    """A short text for a failed write. Spark matches the message of a foreachBatch failure
    with a backtracking regex (StreamExecution.PROXY_ERROR) that overflows the JVM's stack on
    a long Java trace and kills the query thread without a termination event. A stop's
    interruption keeps the one line Spark needs to see it as a stop."""
    text = str(e)
    log.error("writing a batch into a stream failed:\n%s", text)
    for marker in _INTERRUPTS:
        if f": {marker}" in text:
            return _interrupted(marker)
    return cause(text, PermanentError, SchemaEvolved) or short_error(text)


def _interrupted(marker: str = _INTERRUPTS[0]) -> str:
    return f"py4j.protocol.Py4JJavaError: An error occurred while calling write.\n: {marker}"


def writer_id(checkpoint: str | Path) -> str:
    """A stable id for one checkpoint's writes (a new checkpoint, e.g. after DROP and CREATE,
    gets a new one, so its batch ids never collide with the old ones)."""
    path = Path(checkpoint) / "connectql-writer-id"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(uuid.uuid4().hex[:12])
    return path.read_text().strip()


@dataclass(frozen=True)
class Output:
    """One stream a batch feeds: `select(batch_df)` (`select(batch_df, batch_id)` when
    `by_batch`) gives the rows it gets; with `table`, a stream of a multi-table source (or its
    dead letters), `select(arrow_table)` gives them from that table's rows (the batch is then
    collected once for all its tables' streams, not written by a Spark job per table)."""

    path: str
    select: Callable
    by_batch: bool = False
    table: str | None = None


class StreamWriter:
    """The foreachBatch function of a source connector.

    Spark's stop cannot interrupt a foreachBatch call: a batch stopped mid-call still commits
    its files, yet Spark counts it as not done (its rows_total comes only when the batch runs
    again, at the next start). So a stop first calls `finish`: the batch under way ends, and
    one that begins after refuses to (written as an interruption, which Spark takes for the
    stop it is); the stop then waits for Spark to commit that last batch."""

    def __init__(
        self,
        wid: str,
        outputs: list[Output],
        on_batch: Callable | None = None,
        after: Callable | None = None,
    ):
        """`on_batch(batch_id, {stream: rows})` and `after(writer, batch_id)` (a chained sink's
        rides, runtime/ride.py) are called once a batch's files are committed, before Spark
        commits the batch."""
        self.wid, self.outputs, self.on_batch, self.after = wid, outputs, on_batch, after
        self.written: dict[str, list[str]] = {}  # this batch's new files, by stream
        self._stopping, self._busy = threading.Event(), threading.Lock()
        self._last: int | None = None  # the id of the last batch written
        for o in outputs:  # an empty log: readers see an existing, empty stream
            (Path(o.path) / "_spark_metadata").mkdir(parents=True, exist_ok=True)
        self._done = {o.path: self._committed(o.path) for o in outputs}

    def _committed(self, stream_path: str) -> set[int]:
        pattern = re.compile(rf"^{self.wid}-b(\d+)-")
        return {
            int(m.group(1))
            for f in committed_files(stream_path)
            if (m := pattern.match(Path(f).name))
        }

    def finish(self, wait_s: float) -> int | None:
        """Let the batch under way end (waiting at most `wait_s`); refuse the ones after.
        Returns the id of the last batch written (None: none)."""
        self._stopping.set()
        if self._busy.acquire(timeout=wait_s):
            self._busy.release()
        return self._last

    def __call__(self, df, batch_id: int) -> None:
        with self._busy:
            if self._stopping.is_set():
                raise BatchFailed(_interrupted())
            self.written = {}
            self._batch(df, batch_id)
            if self.after is not None:
                self.after(self, batch_id)
            self._last = batch_id

    def _batch(self, df, batch_id: int) -> None:
        todo = [o for o in self.outputs if batch_id not in self._done[o.path]]
        tables = [o for o in todo if o.table is not None]
        cached = len(todo) - len(tables) + bool(tables) > 1
        if cached:
            df = df.persist()
        try:
            counts = {}
            if [o.table for o in tables] == [ONE_KEY]:  # one table's packed rows
                counts[tables[0].path] = self._write_chunks(tables[0], df, batch_id)
            elif tables:
                rows = by_table(df.toArrow())
                for o in tables:
                    counts[o.path] = self._append(o, rows.get(o.table), batch_id)
            for o in todo:
                if o.table is None:
                    counts[o.path] = self._write(o, _selected(o, df, batch_id), batch_id)
        except Exception as e:
            raise BatchFailed(concise(e)) from None
        finally:
            if cached:
                df.unpersist()
        if self.on_batch:
            self.on_batch(batch_id, {o.path: counts[o.path] for o in todo})

    def _append(self, out: Output, rows, batch_id: int) -> int:
        """Write and commit one table's rows (an Arrow table, or None: none this batch)."""
        self.written[out.path] = []
        if rows is not None and rows.num_rows:
            rows = out.select(rows)
            name = f"{self.wid}-b{batch_id}-0"
            if append_table(out.path, name, rows):
                self.written[out.path].append(str(Path(out.path) / f"{name}.parquet"))
        self._done[out.path].add(batch_id)
        return rows.num_rows if rows is not None else 0

    def _write(self, out: Output, df, batch_id: int) -> int:
        """Write and commit one output; returns the rows committed."""
        staging = self._staging(out, batch_id)
        df.write.mode("overwrite").option("parquet.block.size", ROW_GROUP_BYTES).parquet(
            str(staging)
        )
        files = self._commit(out, sorted(staging.glob("part-*.parquet")), batch_id)
        return sum(pq.ParquetFile(f).metadata.num_rows for f in files)

    def _staging(self, out: Output, batch_id: int) -> Path:
        return Path(out.path) / "_staging" / f"{self.wid}-b{batch_id}"

    def _commit(self, out: Output, staged: list[Path], batch_id: int) -> list[Path]:
        """Move a batch's staged files (in order) into the stream and commit them; returns
        the stream's new files."""
        stream = Path(out.path)
        files = []
        for i, part in enumerate(staged):
            target = stream / f"{self.wid}-b{batch_id}-{i}.parquet"
            part.replace(target)
            files.append(target)
        if files:
            append_files(stream, files)
        self._done[out.path].add(batch_id)
        self.written[out.path] = [str(f) for f in files]
        shutil.rmtree(self._staging(out, batch_id), ignore_errors=True)
        return files

    def _write_chunks(self, out: Output, df, batch_id: int) -> int:
        """Write and commit one table's packed rows (toolkit/packed.py): each task writes the
        chunks it reads into a file of its own, so Spark moves chunks, not rows, and no task
        holds more than a chunk."""
        staging = self._staging(out, batch_id)
        shutil.rmtree(staging, ignore_errors=True)  # a failed attempt's files
        write = functools.partial(write_chunks, str(staging))
        done = sorted((r.part, r.rows) for r in df.mapInArrow(write, WRITTEN_DDL).collect())
        self._commit(out, [staging / chunk_file(part) for part, rows in done if rows], batch_id)
        return sum(rows for _part, rows in done)


WRITTEN_DDL = "part INT, rows BIGINT"  # what write_chunks tells of each task


def chunk_file(part: int) -> str:
    return f"part-{part:05d}.parquet"


def write_chunks(staging: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """In a Spark task: the packed chunks of one table's rows written into one Parquet file of
    `staging`, a row group per chunk; yields (partition, rows written)."""
    part = TaskContext.get().partitionId()
    path = Path(staging) / chunk_file(part)
    writer, rows = None, 0
    try:
        for rb in batches:
            blobs = rb.column(ROWS_COLUMN)
            for i in range(len(blobs)):
                table = pa.ipc.open_stream(blobs[i].as_buffer()).read_all()
                if writer is None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    int96 = spark_int96(table.schema)
                    writer = pq.ParquetWriter(
                        path,
                        table.schema,
                        use_deprecated_int96_timestamps=int96,
                        **SPARK_LIKE,
                    )
                writer.write_table(table, row_group_size=max(1, table.num_rows))
                rows += table.num_rows
    finally:
        if writer is not None:
            writer.close()
    yield pa.RecordBatch.from_pydict({"part": [part], "rows": [rows]}, WRITTEN_SCHEMA)


def spark_int96(schema: pa.Schema) -> bool:
    """Whether a file of these columns is written with INT96 timestamps, as Spark writes its
    TIMESTAMP columns (readers such as DuckDB then read the same values from either writer's
    files). A schema with both kinds of timestamps is not packed (see worker._packed)."""
    return any(_has_tz(t) for t in schema.types)


def _has_tz(t: pa.DataType) -> bool:
    if pa.types.is_timestamp(t):
        return t.tz is not None
    return any(_has_tz(t.field(i).type) for i in range(t.num_fields))


# written as Spark writes a stream's files, which its readers then read fastest: decimals as
# integers; no dictionary, which a table's many distinct values only fill and then abandon
SPARK_LIKE = {"use_dictionary": False, "store_decimal_as_integer": True}
WRITTEN_SCHEMA = pa.schema([("part", pa.int32()), ("rows", pa.int64())])


def _selected(out: Output, df, batch_id: int):
    return out.select(df, batch_id) if out.by_batch else out.select(df)
