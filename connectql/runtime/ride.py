"""Chaining, issue 18's one-query plan: an exactly-once toolkit sink (the database sinks among
them) whose stream one running source feeds writes inside that source's micro-batches. Once the
source's stream writer has committed a batch's files, a Spark job reads them and writes them
with the sink's stage_batches in its tasks (riders.py), and the driver commits them in the
target under the source's batch id and a writer id of the pair's own (ridelog.rider_id),
atomically with the rows: exactly once across a kill -9, as the sink's own query is. No second
query polls the stream, plans a batch and re-reads logs: a change reaches the target about a
second sooner (bench.onequery).

A Ride stands in for the sink's streaming query (Engine.queries), so the worker and the
supervisor see it as they see a query; a ride that fails fails the sink, which restarts as
usual. When another writer feeds the stream, the sink's own query takes over: it skips the
files rides delivered (own_query_filter), as rides skip the files its committed batches read,
so each stream file reaches the target once."""

from __future__ import annotations

import functools
import json
import logging
import os
import pickle
import threading
import time
import traceback
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from connectql.catalog.streams import committed_files
from connectql.runtime import deadletters, ridelog
from connectql.runtime.retention import files_read, last_commit
from connectql.runtime.ridelog import MERGED_PREFIX
from connectql.runtime.riders import make_rider

log = logging.getLogger("connectql.runtime")
STOP_JOIN_S = 10.0  # a stop waits this long at most for the ride's thread to end


def pending(checkpoint: str) -> bool:
    """Whether the sink's own query planned a batch it has not committed (it must run it
    again before anything else writes for the sink)."""
    offsets = [int(p.name) for p in Path(checkpoint, "offsets").glob("[0-9]*") if p.name.isdigit()]
    return bool(offsets) and max(offsets) != (last_commit(checkpoint) or -1)


def write_task(spec: str, options: dict, schema_json: str, batch_id: int, batches):
    """In a Spark task: its rows written by the sink's rider; yields the commit message."""
    from pyspark import TaskContext

    rider = make_rider(spec, options, StructType.fromJson(json.loads(schema_json)))
    message = rider.write(batch_id, TaskContext.get().partitionId(), batches)
    yield pa.RecordBatch.from_pydict({"msg": [pickle.dumps(message)]})


class Ride:
    """The sink `plan` written by the source whose stream writer id is `source`. `engine`
    gives the Spark session, the sink's frame (Engine.sink_frame) and takes its progress."""

    def __init__(self, engine, plan, source: str, spec: str, options: dict[str, str]):
        self.engine, self.plan, self.source, self.spec = engine, plan, source, spec
        self.name = plan.connector
        self.runId = uuid.uuid4()  # noqa: N815 (StreamingQuery's name)
        self.stream = plan.reader.path
        self.options = options  # the sink writer's, with the rider's writer id
        self.schema = engine.writer_schema(plan)  # what the target is given
        self.rider = make_rider(spec, options, self.schema)
        self.rider.open(f"sink connector '{self.name}'")
        self.done = self.rider.committed()
        self.rides = ridelog.load(plan.checkpoint) or ridelog.Rides()
        self.rides.done[source] = self.done
        ridelog.save(plan.checkpoint, self.rides)
        self.own_read = files_read(plan.checkpoint)
        self.own_started = last_commit(plan.checkpoint) is not None
        self._lock = threading.Lock()  # held by a ride under way
        self._ended, self._stopped = threading.Event(), threading.Event()
        self._busy: int | None = None  # the source batch a ride is writing
        self._error: str | None = None
        self._announced = threading.Condition()
        self._wanted, self._hints = self.done, {}  # announced batches and their files
        self._thread = threading.Thread(target=self._run, name=f"connectql-ride-{self.name}")
        self._thread.daemon = True

    @property
    def _read_schema(self) -> StructType:
        return StructType.fromDDL(self.plan.reader.schema)

    # ------------------------------------------------------------ a StreamingQuery's face
    @property
    def isActive(self) -> bool:  # noqa: N802
        return not self._stopped.is_set()

    @property
    def status(self) -> dict:
        busy = self._busy is not None
        message = f"Writing batch {self._busy} of its source" if busy else "Waiting for data"
        return {"isTriggerActive": busy, "message": message, "batchId": self._busy}

    @property
    def recentProgress(self) -> list:  # noqa: N802 (progress goes straight to the engine)
        return []

    @property
    def lastProgress(self):  # noqa: N802
        return None

    def exception(self) -> str | None:
        return self._error

    def awaitTermination(self, timeout: float | None = None):  # noqa: N802
        ended = self._stopped.wait(timeout)
        return ended if timeout is not None else None

    def stop(self) -> None:
        """No ride starts after this; the one under way ends first, and so does the ride's
        thread (unless this is it)."""
        self._ended.set()
        with self._announced:
            self._announced.notify()
        with self._lock:
            self._stopped.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(STOP_JOIN_S)

    # ------------------------------------------------------------ the rides
    def start(self) -> None:
        """Rides run on a thread of the ride's own, in batch order: the source's batch only
        announces its files and goes on, so a slow or hung target never holds the source up.
        The first ride delivers at once what the source committed since the last one (a sink
        restarted after a failure would otherwise wait for the source's next batch)."""
        self._thread.start()

    def __call__(self, writer, batch_id: int) -> None:
        """The source's batch `batch_id` committed its files (called under its writer's lock)."""
        if writer.wid != self.source:
            self._ended.set()
            self.engine.hand_over(self)
            return
        with self._announced:
            if self.stream in writer.written:
                self._hints[batch_id] = writer.written[self.stream]
            self._wanted = max(self._wanted, batch_id)
            self._announced.notify()

    def _run(self) -> None:
        sweep = True  # the first ride takes whatever is committed
        while not self._ended.is_set():
            with self._announced:
                while self._wanted <= self.done and not sweep and not self._ended.is_set():
                    self._announced.wait()
                wanted, hints = self._wanted, dict(self._hints)
                self._hints.clear()
            with self._lock:
                if self._ended.is_set() or not self._next(wanted, hints, sweep):
                    return
            sweep = False

    def _next(self, wanted: int, hints: dict[int, list[str]], sweep: bool) -> bool:
        """One ride: the source's batches (done, wanted], or all it committed (`sweep`).
        False when rides end (a failure, or another writer's files)."""
        try:
            if not sweep and all(b in hints for b in range(self.done + 1, wanted + 1)):
                files = [f for b in range(self.done + 1, wanted + 1) for f in hints[b]]
            else:  # a backlog, or a replayed batch whose files were written before
                pending, foreign = self._pending()
                if foreign and sweep:  # another writer's files: the sink's own query reads them
                    log.info("sink %s: the stream has other writers' files (%s): its own query"
                             " reads it", self.name, foreign[0])  # fmt: skip
                    self._ended.set()
                    self.engine.hand_over(self)
                    return False
                if sweep and pending:
                    wanted = max(wanted, pending[-1][0])
                files = [f for b, f in pending if b <= wanted]
            if wanted > self.done:
                self._ride(wanted, files)
        except Exception as e:
            self._fail(e)
            return False
        return not self._ended.is_set()

    def _pending(self) -> tuple[list[tuple[int, str]], list[str]]:
        """The source's committed files rides have not delivered, by batch, in order; and the
        other writers' files no one has delivered."""
        mine, foreign = [], []
        for f in committed_files(self.stream):
            if f in self.own_read:
                continue
            name = os.path.basename(f)
            m = ridelog.WRITTEN.match(name)
            if m and m.group(1) == self.source:
                if int(m.group(2)) > self.done:
                    mine.append((int(m.group(2)), int(m.group(3)), f))
            elif self.rides.passed(f) or (self.own_started and name.startswith(MERGED_PREFIX)):
                continue
            else:
                foreign.append(f)
        return [(b, f) for b, _i, f in sorted(mine)], foreign

    def _ride(self, batch_id: int, files: list[str]) -> None:
        self._busy, t0 = batch_id, time.time()
        try:
            inputs = sum(_rows(f) for f in files)
            messages = self._write(files, batch_id) if inputs else []
            self.rider.commit(messages, batch_id)
        finally:
            self._busy = None
        self.done = self.rides.done[self.source] = batch_id
        ridelog.save(self.plan.checkpoint, self.rides)
        written = sum(getattr(m, "rows", 0) or 0 for m in messages if m is not None)
        self.engine.ride_progress(self, self._progress(batch_id, t0, inputs, written))

    def _write(self, files: list[str], batch_id: int) -> list:
        r = self.plan.reader
        spark = self.engine.spark
        df = spark.read.format(r.format).options(**r.options).schema(self._read_schema).load(files)
        df = self.engine.sink_frame(df, self.plan)
        task = functools.partial(write_task, self.spec, self.options, self.schema.json(), batch_id)
        return [pickle.loads(row.msg) for row in df.mapInArrow(task, "msg BINARY").collect()]

    def _progress(self, batch_id: int, t0: float, inputs: int, written: int) -> dict:
        seconds = max(time.time() - t0, 1e-6)
        wid = self.options["connectql.writer"]
        dead = deadletters.rejected_rows(self.plan.deadletter_path, wid, batch_id)
        offset = json.dumps({"source": self.source, "batch": batch_id})
        return {
            "batch_id": batch_id,
            "started_at": datetime.fromtimestamp(t0, timezone.utc).replace(tzinfo=None),
            "duration_ms": int(seconds * 1000),
            "input_rows": inputs,
            "input_rows_per_sec": 0.0,
            "processed_rows_per_sec": inputs / seconds,
            "written_rows": written,
            "filtered_rows": max(0, inputs - written - dead),
            "dead_lettered_rows": dead,
            "end_offset": offset,
            "latest_offset": offset,
            "lag": None,
            "rows_behind": None,
            "lag_bytes": None,
        }

    def _fail(self, e: Exception) -> None:
        self._error = "".join(traceback.format_exception(e))
        log.error("sink %s: writing a batch of its source failed:\n%s", self.name, self._error)
        self._ended.set()
        self._stopped.set()
        self.engine.ride_failed(self)


def own_query_filter(plan, spec: str, ids: dict[str, str], schema: StructType):
    """The condition of the rows the sink's own query reads after it rode (None: it never
    did): not from a file a ride delivered (as the target records them, the cache may lag)
    or a merged file made since it first rode (which holds only files it delivered)."""
    rides = ridelog.load(plan.checkpoint)
    if rides is None:
        return None
    sink = ids["connectql.writer"]
    for source in rides.done:
        rider = {**plan.writer.options, **ids, "connectql.writer": ridelog.rider_id(sink, source)}
        rides.done[source] = make_rider(spec, rider, schema).committed()
    ridelog.save(plan.checkpoint, rides)
    name = F.col("_metadata.file_name")
    pattern = ridelog.WRITTEN.pattern
    writer, batch = F.regexp_extract(name, pattern, 1), F.regexp_extract(name, pattern, 2)
    ridden = F.lit(False)
    for source, done in rides.done.items():
        ridden = ridden | ((writer == source) & (batch.cast("bigint") <= done))
    merged = [
        os.path.basename(f) for f in committed_files(plan.reader.path) if rides.merged_since(f)
    ]
    skipped = ridden | name.isin(merged) if merged else ridden
    return ~skipped


def _rows(path: str) -> int:
    try:
        return pq.read_metadata(path).num_rows
    except FileNotFoundError:  # retention.policy = 'drop' removed it: its rows are lost
        log.warning("stream file %s is gone (retention); its rows are skipped", path)
        return 0
