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
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from connectql.catalog.streams import local_path, log_files
from connectql.toolkit.packed import ROWS_COLUMN, STREAM_COLUMN, ipc_bytes
from connectql.toolkit.spark import last_committed_end, last_planned_end

FORMAT = "connectql_streams"
STREAMS_OPTION = "connectql.streams"  # JSON {stream name: its folder}, in reading order
HELD_OPTION = "connectql.streams.held"  # JSON [stream name]: streams stopped alone, not read
HOLDS_OPTION = "connectql.streams.holds"  # the file of where held streams go on from
COUNT_COLUMN = "__count"  # the rows in ROWS_COLUMN (Spark counts a row group as one row)
SCHEMA = StructType(
    [
        StructField(STREAM_COLUMN, StringType(), False),
        StructField(ROWS_COLUMN, BinaryType(), False),
        StructField(COUNT_COLUMN, LongType(), False),
    ]
)
ARROW = pa.schema(
    [(STREAM_COLUMN, pa.string()), (ROWS_COLUMN, pa.binary()), (COUNT_COLUMN, pa.int64())]
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
    """Streams' new files, each stream's in commit order, each file with the row groups to
    read (() for all): [(stream, [(file, (group, ...)), ...]), ...]."""

    streams: tuple[tuple[str, tuple[tuple[str, tuple[int, ...]], ...]], ...]


class StreamsReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are {stream: last log batch read}. A held stream (stopped alone: its target
    refused its rows) is not read and its offset is {"held": n}, n where it goes on from once
    no longer held (see hold())."""

    def __init__(self, options: dict[str, str]):
        self.paths: dict[str, str] = json.loads(options[STREAMS_OPTION])
        self.held = set(json.loads(options.get(HELD_OPTION) or "[]"))
        self.holds_file = options.get(HOLDS_OPTION)
        self.holds = read_holds(self.holds_file)
        self.tasks = int(options.get("tasks") or os.cpu_count() or 1)
        self.cap: dict | None = None  # run = 'once': what was there when it began

    def initialOffset(self) -> dict:  # noqa: N802 (Spark's names)
        return {name: -1 for name in self.paths}

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self.cap = self._latest()

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:  # noqa: N802
        latest, start = dict(self.cap if self.cap is not None else self._latest()), start or {}
        for name in self.held & set(self.paths):
            latest[name] = {"held": self._begin(name, start)}
        self._end_holds(start)
        for name in set(self.holds) - self.held:  # read on past a hold: said in the offset
            latest[name] = {"read": latest.get(name, -1)}
        return latest

    def _end_holds(self, start: dict) -> None:
        """Forget the holds of streams read on past them in a committed batch (`start` is the
        end of the last one)."""
        done = [n for n in self.holds if "read" in _dict(start.get(n))]
        if done:
            self.holds = {n: h for n, h in self.holds.items() if n not in done}
            write_holds(self.holds_file, self.holds)

    def _latest(self) -> dict:
        return {name: latest_log(path) for name, path in self.paths.items()}

    def _begin(self, name: str, start: dict) -> int:
        """The last log batch of stream `name` read before a batch that starts at `start`:
        where its hold says while its offset is the held one or the end of the batch replayed
        without it, else the offset's."""
        value, held = start.get(name, -1), self.holds.get(name)
        if held is not None and (value == held["skipped"] or "held" in _dict(value)):
            return held["from"]
        return position(value)

    def partitions(self, start: dict, end: dict) -> list[Files]:
        work = []
        for name, path in self.paths.items():
            if name in self.held:
                continue
            files = new_files(path, self._begin(name, start), position(end.get(name, -1)))
            if files:
                work.append((name, tuple((f, ()) for f in files)))
        if 0 < len(work) < self.tasks:  # fewer streams than tasks: their row groups are split
            return split_groups(work, self.tasks)
        count = min(self.tasks, len(work))
        return [Files(tuple(work[i::count])) for i in range(count)]

    def read(self, part: Files) -> Iterator[pa.RecordBatch]:
        for name, files in part.streams:
            for path, groups in files:
                yield from _row_groups(name, path, groups)

    def commit(self, end: dict) -> None:
        pass


def position(offset) -> int:
    """A stream's last log batch read, from its offset: a number, {"held": number} (not read
    now) or {"read": number} (read on past a hold)."""
    if isinstance(offset, dict):
        return offset.get("held", offset.get("read", -1))
    return offset


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def holds_file(checkpoint: str) -> str:
    return os.path.join(checkpoint, "connectql-held.json")


def read_holds(path: str | None) -> dict[str, dict]:
    try:
        return json.loads(Path(path).read_text()) if path else {}
    except FileNotFoundError:
        return {}


def write_holds(path: str | None, holds: dict[str, dict]) -> None:
    if path:
        tmp = Path(path + ".tmp")
        tmp.write_text(json.dumps(holds))
        tmp.replace(path)


def hold(checkpoint: str, stream: str) -> None:
    """Record (in the checkpoint) where stream `stream` of a stopped sink of several streams
    goes on from once it is no longer held: its offset at the last committed batch. The batch
    it failed in is replayed without it yet keeps its end offset (Spark logged it), so that
    end is recorded too: an offset still equal to it means the stream has not been read on."""
    path = holds_file(checkpoint)
    holds = read_holds(path)
    if stream not in holds:
        committed = last_committed_end(checkpoint) or {}
        holds[stream] = {
            "from": position(committed.get(stream, -1)),
            "skipped": (last_planned_end(checkpoint) or {}).get(stream),
        }
        write_holds(path, holds)


def split_groups(work: list, tasks: int) -> list[Files]:
    """The streams' files cut into at most `tasks` partitions of about as many rows, each a
    run of consecutive row groups, so that the partitions in order hold each stream's rows
    in order."""
    groups = []  # (stream, file, row group, rows)
    for name, files in work:
        for path, _all in files:
            try:
                sizes = _group_rows(path)
            except FileNotFoundError:  # gone (retention): its read skips it
                sizes = [0]
            groups += [(name, path, i, n) for i, n in enumerate(sizes)]
    share = sum(g[3] for g in groups) / tasks
    runs: list[list] = [[]]
    filled = 0
    for g in groups:
        if filled and filled + g[3] / 2 > share and len(runs) < tasks:
            runs.append([])
            filled = 0
        runs[-1].append(g)
        filled += g[3]
    return [Files(_nested(run)) for run in runs if run]


def _group_rows(path: str) -> list[int]:
    """The rows of each row group of a Parquet file, from its footer."""
    meta = pq.read_metadata(path)
    return [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]


def _nested(run: list) -> tuple:
    """[(stream, file, group, rows), ...] as Files.streams."""
    out: list = []
    for name, path, group, _rows in run:
        if not out or out[-1][0] != name:
            out.append((name, []))
        files = out[-1][1]
        if not files or files[-1][0] != path:
            files.append((path, []))
        files[-1][1].append(group)
    return tuple((name, tuple((p, tuple(g)) for p, g in files)) for name, files in out)


def _row_groups(stream: str, path: str, groups: tuple[int, ...] = ()) -> Iterator[pa.RecordBatch]:
    """One row per row group of the file (`groups`, or all): (stream, the rows as Arrow IPC,
    their number)."""
    try:
        f = pq.ParquetFile(path)
    except FileNotFoundError:  # retention.policy = 'drop' removed it: those rows are lost
        log.warning("stream %s: file %s is gone (retention); its rows are skipped", stream, path)
        return
    for i in groups or range(f.num_row_groups):
        rows = f.read_row_group(i)
        yield pa.RecordBatch.from_arrays(
            [
                pa.array([stream]),
                pa.array([ipc_bytes(rows)], pa.binary()),
                pa.array([rows.num_rows]),
            ],
            schema=ARROW,
        )


class StreamsDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> StreamsReader:  # noqa: N802
        return StreamsReader(self.options)
