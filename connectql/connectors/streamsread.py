"""Several streams read by one Spark query (a sink of several streams): the offset is each
stream's last `_spark_metadata` log batch read, and a row carries one row group of one stream's
file as Arrow IPC, so streams of any schemas travel through one query, each in its order."""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from connectql.catalog.streams import local_path, log_files
from connectql.connectors.multitable import ROWS_COLUMN, ipc_bytes

FORMAT = "connectql_streams"
STREAMS_OPTION = "connectql.streams"  # JSON {stream name: its folder}, in reading order
STREAM_COLUMN = "__stream"
SCHEMA = StructType(
    [StructField(STREAM_COLUMN, StringType(), False), StructField(ROWS_COLUMN, BinaryType(), False)]
)
log = logging.getLogger("connectql.connectors")


# a stream's log folder -> (its mtime, its newest log batch then), for latest_log
_LATEST: dict[str, tuple[int, int]] = {}
# a folder's mtime is trusted to have changed with its entries only once it is this old: the
# kernel stamps it from a coarse clock, so two changes within a tick can leave the same mtime
SETTLED_NS = 1_000_000_000


def latest_log(stream_path: str) -> int:
    """The id of the stream's newest log batch (-1: none yet). A sink of many streams asks
    this of each many times a second: a log folder not changed since it was last listed (by
    its mtime, once settled) is not listed again."""
    meta = os.path.join(stream_path, "_spark_metadata")
    try:
        mtime = os.stat(meta).st_mtime_ns
    except FileNotFoundError:
        return -1
    seen = _LATEST.get(meta)
    if seen is not None and seen[0] == mtime:
        return seen[1]
    ids = [int(f.name.removesuffix(".compact")) for f in log_files(Path(meta))]
    latest = max(ids, default=-1)
    if time.time_ns() - mtime > SETTLED_NS:
        _LATEST[meta] = (mtime, latest)
    return latest


def files_upto(stream_path: str, upto: int) -> list[str] | None:
    """The files committed to the stream as of log batch `upto`, in commit order; None when
    the log files that tell it are gone (pruned)."""
    if upto < 0:
        return []
    meta = Path(stream_path) / "_spark_metadata"
    logs = {}
    for f in meta.iterdir() if meta.is_dir() else []:
        stem = f.name.removesuffix(".compact")
        if stem.isdigit() and not f.name.startswith("."):
            logs[int(stem)] = f
    base = max(
        (n for n, f in logs.items() if n <= upto and f.name.endswith(".compact")), default=-1
    )
    wanted = range(max(base, 0), upto + 1)
    if any(n not in logs for n in wanted):
        return None
    files: dict[str, None] = {}
    for n in wanted:
        for line in logs[n].read_text().splitlines()[1:]:
            if line.strip():
                entry = json.loads(line)
                if entry.get("action", "add") == "add":
                    files[entry["path"]] = None
                else:
                    files.pop(entry["path"], None)
    return [local_path(p) for p in files]


def new_files(stream_path: str, start: int, end: int) -> list[str]:
    """The files committed in log batches (start, end]."""
    if end <= start:
        return []
    now = files_upto(stream_path, end) or []
    before = files_upto(stream_path, start)
    if before is None:  # pruned logs: a reader this far behind cannot be exact
        raise RuntimeError(
            f"stream {stream_path}: the log batches after {start} that this sink has not read"
            " were pruned; drop and create the sink again"
        )
    seen = set(before)
    return [f for f in now if f not in seen]


@dataclass(frozen=True)
class Files(InputPartition):
    """Streams' new files, each stream's in commit order: [(stream, [file, ...]), ...]."""

    streams: tuple[tuple[str, tuple[str, ...]], ...]


class StreamsReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are {stream: last log batch read}."""

    def __init__(self, options: dict[str, str]):
        self.paths: dict[str, str] = json.loads(options[STREAMS_OPTION])
        self.tasks = int(options.get("tasks") or os.cpu_count() or 1)
        self.cap: dict | None = None  # run = 'once': what was there when it began

    def initialOffset(self) -> dict:  # noqa: N802 (Spark's names)
        return {name: -1 for name in self.paths}

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self.cap = self._latest()

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:  # noqa: N802
        return self.cap if self.cap is not None else self._latest()

    def _latest(self) -> dict:
        return {name: latest_log(path) for name, path in self.paths.items()}

    def partitions(self, start: dict, end: dict) -> list[Files]:
        work = []
        for name, path in self.paths.items():
            files = new_files(path, start.get(name, -1), end.get(name, -1))
            if files:
                work.append((name, tuple(files)))
        count = min(self.tasks, len(work))
        return [Files(tuple(work[i::count])) for i in range(count)]

    def read(self, part: Files) -> Iterator[pa.RecordBatch]:
        for name, files in part.streams:
            for path in files:
                yield from _row_groups(name, path)

    def commit(self, end: dict) -> None:
        pass


def _row_groups(stream: str, path: str) -> Iterator[pa.RecordBatch]:
    """One row per row group of the file: (stream, the rows as Arrow IPC)."""
    try:
        f = pq.ParquetFile(path)
    except FileNotFoundError:  # retention.policy = 'drop' removed it: those rows are lost
        log.warning("stream %s: file %s is gone (retention); its rows are skipped", stream, path)
        return
    for i in range(f.num_row_groups):
        yield pa.RecordBatch.from_arrays(
            [pa.array([stream]), pa.array([ipc_bytes(f.read_row_group(i))], pa.binary())],
            names=[STREAM_COLUMN, ROWS_COLUMN],
        )


class StreamsDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> StreamsReader:  # noqa: N802
        return StreamsReader(self.options)
