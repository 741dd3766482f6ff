"""Starts plans as named Spark streaming queries, stops them, and reports their progress and
termination through a StreamingQueryListener."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
import time
import weakref
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pyspark.errors import PySparkException, StreamingQueryException
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import (
    QueryProgressEvent,
    QueryTerminatedEvent,
    StreamingQueryProgress,
)
from pyspark.sql.types import StructType

from connectql.connectors import streamsread
from connectql.connectors.base import ReaderSpec
from connectql.errors import PlanError
from connectql.errortext import short_error
from connectql.planner.plan import STREAM_FORMAT, STREAM_WRITER, Plan
from connectql.runtime import deadletters, ride
from connectql.runtime.riders import TOOLKIT, rider_spec
from connectql.runtime.session import get_session
from connectql.runtime.streamwriter import StreamWriter, writer_id
from connectql.toolkit.packed import SCHEMAS_OPTION
from connectql.toolkit.spark import FORMAT as TOOLKIT_FORMAT
from connectql.toolkit.spark import commit_after_stop

log = logging.getLogger("connectql.runtime")

OBSERVED = "connectql"  # the observed metrics of every query: rows that reach its writer
OBSERVED_ROWS = "rows"  # ... and the rows of a packed sink's chunks (Spark counts chunks)
STOP_WAIT_S = 5.0  # a stop (PAUSE, DROP, shutdown) waits no longer for a query to end
# ...after first letting a source's batch under way finish for this long (StreamWriter)
STOP_GRACE_S = 2.0
# a stop waits this long at most for the report of a query's end that another thread is making
# (a query that failed as it was stopped): the caller then sees the state that report set
REPORT_WAIT_S = 10.0
CLOSE_JOIN_S = 10.0  # at close, the most it waits for each thread of its own still in a call


def lag(end: str | None, latest: str | None, field: str | None) -> int | None:
    """A source's own count when it reports {"lag": n} as its latest offset, else
    latest[field] - end[field]."""
    try:
        reported = json.loads(latest) if latest else None
        if isinstance(reported, dict) and "lag" in reported:
            return max(0, int(reported["lag"]))
    except (ValueError, TypeError):
        return None
    return field_lag(end, latest, field)


def field_lag(end: str | None, latest: str | None, field: str | None) -> int | None:
    """latest[field] - end[field], whatever else the source reports; None without a field."""
    try:
        if not (end and latest and field):
            return None
        return max(0, int(json.loads(latest)[field]) - int(json.loads(end)[field]))
    except (ValueError, KeyError, TypeError):
        return None


def rows_behind(end: str | None, latest: str | None, field: str | None) -> int | None:
    """The lag when it counts records the source can deliver now (not bytes of a change log,
    much of which may be other tables' changes): what a stall is judged by."""
    try:
        reported = json.loads(latest) if latest else None
    except ValueError:
        return None
    if isinstance(reported, dict) and reported.get("unit", "rows") != "rows":
        return None
    return lag(end, latest, field)


def bytes_behind(end: str | None, latest: str | None) -> int | None:
    """The lag a source reports in bytes (a change log's), else None."""
    try:
        reported = json.loads(latest) if latest else None
    except ValueError:
        return None
    if isinstance(reported, dict) and reported.get("unit") == "bytes":
        return lag(end, latest, None)
    return None


def _offset_json(text: str | None) -> str | None:
    """Spark reports a missing offset as None, 'None' or 'null'."""
    return text if text and text.lstrip().startswith(("{", "[")) else None


def progress_row(
    p,
    lag_field: str | None,
    dead_lettered: int = 0,
    lag_bytes_field: str | None = None,
    packed: int | None = None,
) -> dict[str, Any]:
    """One batch's progress (`p`, Spark's) as a connector_metrics row. `packed`: the rows a
    packed source wrote (Spark counts its chunks), less the dead letters."""
    src = p.sources[0] if p.sources else None
    end, latest = (
        (_offset_json(src.endOffset), _offset_json(src.latestOffset)) if src else (None, None)
    )
    observed = (p.observedMetrics or {}).get(OBSERVED)
    observed = observed.asDict() if observed is not None else {}
    if OBSERVED_ROWS in observed:
        packed = int(observed[OBSERVED_ROWS] or 0)
    behind = rows_behind(end, latest, lag_field)
    inputs = int(p.numInputRows) if packed is None else packed + dead_lettered
    seen = int(observed.get("written", inputs))
    written = seen - dead_lettered
    return {
        "batch_id": p.batchId,
        "started_at": datetime.fromisoformat(p.timestamp.replace("Z", "+00:00"))
        .astimezone(timezone.utc)
        .replace(tzinfo=None),
        "duration_ms": int(p.durationMs.get("triggerExecution", p.batchDuration or 0)),
        "input_rows": inputs,
        "input_rows_per_sec": float(p.inputRowsPerSecond or 0.0),
        "processed_rows_per_sec": float(p.processedRowsPerSecond or 0.0),
        "written_rows": written,
        "filtered_rows": max(0, inputs - seen),
        "dead_lettered_rows": dead_lettered,
        "end_offset": end,
        "latest_offset": latest,
        # one unit per column: `lag` records, `lag_bytes` bytes (a change log's)
        "lag": behind,
        "rows_behind": behind,
        "lag_bytes": field_lag(end, latest, lag_bytes_field)
        if lag_bytes_field
        else bytes_behind(end, latest),
    }


class Engine:
    """Owns the SparkSession's queries. `on_progress(name, row)` and
    `on_terminated(name, error_or_None, stopped_by_us)` are called from Spark's listener thread."""

    def __init__(
        self,
        settings: dict[str, str],
        on_progress: Callable,
        on_terminated: Callable,
        on_session: Callable | None = None,
    ):
        self.settings = settings
        self.on_progress, self.on_terminated = on_progress, on_terminated
        self.on_session = on_session  # called with the session once it exists
        self.queries: dict[str, Any] = {}
        self.plans: dict[str, Plan] = {}
        self.finished: dict[str, threading.Event] = {}
        self._by_id: dict[str, str] = {}  # run id -> connector (a restart keeps the query id)
        self._stopping: set[str] = set()
        self._reporting: dict[str, threading.Event] = {}  # name -> set when its end is reported
        self._dead: dict[tuple[str, int], int] = {}  # (connector, batch) -> rows dead-lettered
        # a packed source's rows (a Spark row is a chunk of them): (connector, batch) -> rows
        self._packed: dict[tuple[str, int], int] = {}
        self._reported: dict[str, int] = {}  # query run id -> last batch id reported
        self.lingering: dict[str, Stopper] = {}  # stopped queries still stuck in a call
        self.writers: dict[str, StreamWriter] = {}  # a source's foreachBatch, by connector
        self.rides: dict[str, ride.Ride] = {}  # chained sinks (runtime/ride.py), by connector
        self._spark = None
        self._threads: weakref.WeakSet[threading.Thread] = weakref.WeakSet()  # joined at close
        self._lock = threading.RLock()
        self.epoch: int | None = None  # the worker's lease epoch, given to its writers
        self.on_event: Callable | None = None  # (name, text): how a connector runs changed

    @property
    def spark(self):
        if self._spark is None:
            spark = get_session(self.settings)
            if self.on_session is not None:  # its checks pass before the session is used
                self.on_session(spark)
            self._spark = spark
            self._listener = _Listener(self)
            self._spark.streams.addListener(self._listener)
        return self._spark

    def close(self) -> None:
        """Stop every query and stop listening (the session may outlive this engine); return
        once no thread of the engine's is left in a call (a listener's report, a sink's own
        query starting, a ride), so that none is inside DuckDB or Arrow when the process
        exits (issue 56: such a thread aborts the interpreter's exit)."""
        self.stop_all()
        if self._spark is not None:
            self._spark.streams.removeListener(self._listener)
            self._listener.quiesce(CLOSE_JOIN_S)
        for thread in list(self._threads):  # rides are queries: stop_all joined theirs
            thread.join(CLOSE_JOIN_S)

    @property
    def started(self) -> bool:
        return self._spark is not None

    def resolve_schema(self, reader: ReaderSpec):
        """The StructType the reader produces: its DDL, or inferred from the files there."""
        try:
            if reader.schema:
                self.spark  # noqa: B018 (parsing DDL needs the JVM)
                return StructType.fromDDL(reader.schema)
            found = self.spark.read.format(reader.format).options(**reader.options)
            fields = found.load(reader.path).schema.fields
            return StructType([f for f in fields if f.name != reader.corrupt_column])
        except PySparkException as e:
            raise PlanError(
                f"cannot determine the schema of {reader.format} data"
                f"{' at ' + reader.path if reader.path else ''}: {short_error(str(e))}"
                + ("; give it with schema = '...'" if not reader.schema else "")
            ) from None

    def sink_schema(self, plan: Plan) -> StructType:
        """The StructType of the rows a sink's writer gets (the stream's, transformed)."""
        return _transformed(self._no_rows(plan), plan).schema

    def writer_schema(self, plan: Plan) -> StructType:
        """sink_schema less the columns the writer never reads (sink_frame's)."""
        return self.sink_frame(self._no_rows(plan), plan).schema

    def _no_rows(self, plan: Plan):
        return self.spark.createDataFrame([], StructType.fromDDL(plan.reader.schema))

    def start(self, plan: Plan, feeder: str | None = None) -> None:
        """Start the plan's query; a sink whose stream only the source of writer id `feeder`
        writes rides that source's batches instead, when it can (runtime/ride.py)."""
        stuck = self.lingering.get(plan.connector)
        if stuck is not None:  # a stop that took long may just be finishing: wait a little
            stuck.join(STOP_WAIT_S)
        if stuck is not None and stuck.is_alive():
            raise RuntimeError(
                f"the previous run of {plan.connector} is still stuck in a call to its server"
                " (it ends when the call gives up: read.timeout.ms)"
            )
        self.lingering.pop(plan.connector, None)
        spark = self.spark
        # Python data source writers are looked up in the JVM thread's active session; a start
        # from a restart timer's thread has none
        spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
        if feeder is not None and self._ride(plan, feeder):
            return
        df = self.sink_frame(self._read(spark, plan), plan)
        if plan.transform is not None:  # rows its WHERE drops are not written (filtered_rows)
            df = df.observe(OBSERVED, F.count(F.lit(1)).alias("written"))
        elif plan.reader.format == streamsread.FORMAT:  # a row is a row group: count its rows
            df = df.observe(OBSERVED, F.sum(streamsread.COUNT_COLUMN).alias(OBSERVED_ROWS))
        writer = (
            self._to_writer(df, plan)
            .option("checkpointLocation", plan.checkpoint)
            .queryName(plan.connector)
            .outputMode("append")
        )
        if plan.run == "once":
            writer = writer.trigger(availableNow=True)
        elif plan.interval_ms:
            writer = writer.trigger(processingTime=f"{plan.interval_ms} milliseconds")
        clear_partial_writes(plan.checkpoint)
        with self._lock:
            self.finished[plan.connector] = threading.Event()
            self.plans[plan.connector] = plan
            query = writer.start()
            self.queries[plan.connector] = query
            self._by_id[str(query.runId)] = plan.connector

    def sink_frame(self, df, plan: Plan):
        """A connector's rows as its writer gets them: transformed, less the columns it never
        reads, and a sink's in at most tasks.max partitions."""
        df = _transformed(df, plan)
        if plan.writer.unused:
            df = df.drop(*plan.writer.unused)
        if plan.kind == "sink" and plan.options.get("tasks.max"):
            # at most tasks.max writers (when given), without a shuffle: Spark splits the stream
            # files (row groups of streamwriter.ROW_GROUP_BYTES) about one task per core; a
            # round-robin repartition cost a pass over the rows and scattered their order
            df = df.coalesce(plan.tasks)
        return df

    # ------------------------------------------------------------------ chained sinks
    def _ride(self, plan: Plan, feeder: str) -> bool:
        """Start the sink as a ride on the source of writer id `feeder`; False when it cannot
        ride: not an exactly-once sink of one stream, or its own query has a batch to finish."""
        spec = rider_spec(plan.writer)
        if spec is None or plan.reader.format != STREAM_FORMAT or not plan.reader.path:
            return False
        if spec == TOOLKIT and plan.interval_ms:  # a paced sink (its object size) keeps its pace
            return False
        if plan.run == "once" or ride.pending(plan.checkpoint):
            return False
        sink = writer_id(plan.checkpoint)
        ids = self._writer_ids(plan, ride.ridelog.rider_id(sink, feeder))
        r = ride.Ride(self, plan, feeder, spec, {**plan.writer.options, **ids})
        with self._lock:
            self.finished[plan.connector] = threading.Event()
            self.plans[plan.connector] = plan
            self.queries[plan.connector] = r
            self._by_id[str(r.runId)] = plan.connector
            self.rides[plan.connector] = r
        r.start()
        self._event(plan.connector, "chained: writes the batches of its stream's source")
        return True

    def _after_batch(self, writer: StreamWriter, batch_id: int) -> None:
        """A source's batch committed its files: the sinks riding its streams write them."""
        paths = {o.path for o in writer.outputs}
        for r in list(self.rides.values()):
            if r.stream in paths:
                r(writer, batch_id)

    def ride_progress(self, r: ride.Ride, row: dict) -> None:
        if self.rides.get(r.name) is r:
            self.on_progress(r.name, row)

    def ride_failed(self, r: ride.Ride) -> None:
        """A ride failed: the sink's error, handled as its query's failure."""
        self._terminated(str(r.runId), r.exception())

    def hand_over(self, r: ride.Ride) -> None:
        """Another writer feeds the ridden stream: the sink's own query takes over (started
        on a thread of its own: this may be a source's batch)."""
        with self._lock:
            if self.rides.get(r.name) is not r:
                return
            del self.rides[r.name]
            self._by_id.pop(str(r.runId), None)  # its end is no termination to report
        thread = threading.Thread(target=self._own_query, args=(r,), daemon=True)
        self._threads.add(thread)
        thread.start()

    def _own_query(self, r: ride.Ride) -> None:
        r.stop()
        self._event(r.name, "another writer feeds its stream: its own Spark query takes over")
        try:
            self.start(r.plan)
        except Exception as e:
            log.exception("starting the own query of sink %s failed", r.name)
            with self._lock:
                self._by_id[str(r.runId)] = r.name
            self._terminated(str(r.runId), short_error(str(e)))

    def _event(self, name: str, text: str) -> None:
        log.info("connector %s: %s", name, text)
        if self.on_event is not None:
            self.on_event(name, text)

    def _writer_ids(self, plan: Plan, wid: str) -> dict[str, str]:
        """The options that tell a Python data source writer who writes: its id keys
        exactly-once progress in the target."""
        ids = {"connectql.writer": wid, "connectql.connector": plan.connector}
        if plan.deadletter_path:
            ids["connectql.deadletter"] = plan.deadletter_path
        if self.epoch is not None:  # database sinks refuse a batch from an older epoch
            ids["connectql.epoch"] = str(self.epoch)
        return ids

    def _to_writer(self, df, plan: Plan):
        w = plan.writer
        if w.format == STREAM_WRITER:
            on_batch = functools.partial(self._stream_batch, plan)
            outputs = deadletters.outputs(plan)
            sink = StreamWriter(writer_id(plan.checkpoint), outputs, on_batch, self._after_batch)
            self.writers[plan.connector] = sink
            return df.writeStream.foreachBatch(sink)
        writer = df.writeStream.format(w.format).options(**w.options)
        if w.path:
            return writer.option("path", w.path)
        return writer.options(**self._writer_ids(plan, writer_id(plan.checkpoint)))

    def _stream_batch(self, plan: Plan, batch_id: int, rows: dict[str, int]) -> None:
        # an unread file's dead letter stands for no input row: it is not counted as one
        if plan.deadletter_path and plan.reader.corrupt_column:
            self._dead[(plan.connector, batch_id)] = rows.get(plan.deadletter_path, 0)
        if SCHEMAS_OPTION in plan.reader.options:
            dead = rows.get(plan.deadletter_path, 0) if plan.deadletter_path else 0
            self._dead[(plan.connector, batch_id)] = dead
            self._packed[(plan.connector, batch_id)] = sum(rows.values()) - dead

    def _read(self, spark, plan: Plan):
        r = plan.reader
        reader = spark.readStream.format(r.format).options(**r.options)
        if r.schema:
            extra = f", `{r.corrupt_column}` STRING" if r.corrupt_column else ""
            reader = reader.schema(r.schema + extra)
        if not r.path:  # a Python data source: its connector's name (e.g. for a slot name)
            reader = reader.option("connectql.connector", plan.connector)
            reader = reader.option("connectql.checkpoint", plan.checkpoint)  # files beside it
        df = reader.load(r.path) if r.path else reader.load()
        if plan.kind == "sink" and r.format == STREAM_FORMAT and r.path:
            df = self._skip_ridden(df, plan)
        return deadletters.with_file_column(df) if r.corrupt_column or r.skips_unreadable else df

    def _skip_ridden(self, df, plan: Plan):
        """A sink that rode reads no stream file a ride delivered (runtime/ride.py)."""
        spec = rider_spec(plan.writer)
        if spec is None or ride.ridelog.load(plan.checkpoint) is None:
            return df
        ids = self._writer_ids(plan, writer_id(plan.checkpoint))
        return df.where(ride.own_query_filter(plan, spec, ids, self.writer_schema(plan)))

    def stop(self, name: str, wait_s: float = STOP_WAIT_S) -> bool:
        """Stop a query gracefully: a source's batch under way may end (for STOP_GRACE_S),
        offsets stay in the checkpoint. Waits at most `wait_s` more: a query stuck in a call
        that does not return (a database that hangs; Spark cannot interrupt a Python call)
        ends when the call gives up (the connector's read.timeout.ms), and is reported
        stopped now. True when it has ended;
        else `lingering[name]` is a thread that ends with it."""
        with self._lock:
            query = self.queries.get(name)
            if query is not None:
                self._stopping.add(name)
        if query is None:  # it ended on its own, and its end may be being reported now
            self._await_report(name)
            return True
        stopper = Stopper(query, self.writers.get(name))
        stopper.start()
        stopper.join(wait_s + STOP_GRACE_S)
        if stopper.is_alive():
            log.warning("query of %s is stuck in a call; it ends when the call returns", name)
            self.lingering[name] = stopper
        else:
            self._acknowledge_last(name)
        # report the end here: the listener's report can be minutes behind with many queries
        self._flush_progress(query)
        self._terminated(str(query.runId), None)
        self._await_report(name)  # the listener may have been first, and be reporting it
        return not stopper.is_alive()

    def _acknowledge_last(self, name: str) -> None:
        """A toolkit source's reader gets no call at a stop: commit its last durable batch."""
        plan = self.plans.get(name)
        if plan is None or plan.kind != "source" or plan.reader.format != TOOLKIT_FORMAT:
            return
        try:
            commit_after_stop(plan.reader.options, plan.checkpoint, name)
        except Exception:  # an acknowledgement is tried again at the next start
            log.warning("connector %s: acknowledging its last batch failed", name, exc_info=True)

    def _await_report(self, name: str) -> None:
        """Wait (at most REPORT_WAIT_S) for a report of the query's end under way on another
        thread, so that the caller sees the state it sets."""
        with self._lock:
            reporting = self._reporting.get(name)
        if reporting is not None:
            reporting.wait(REPORT_WAIT_S)

    def stop_all(self) -> None:
        for name in list(self.queries):
            self.stop(name)

    def is_active(self, name: str) -> bool:
        q = self.queries.get(name)
        return bool(q and q.isActive)

    def wait(self, name: str, timeout: float | None = None) -> bool:
        """Wait for the connector's query to end; True when it has. Handles the termination
        here rather than waiting for Spark's listener thread to report it (saves ~0.3 s per
        query; the listener's later report is then ignored)."""
        query, event = self.queries.get(name), self.finished.get(name)
        if query is None:
            return event.wait(timeout) if event else True
        try:
            ended = query.awaitTermination(timeout) if timeout else query.awaitTermination()
        except StreamingQueryException:
            ended = True
        if ended is False:
            return False
        self._flush_progress(query)
        if name not in self._stopping:  # a stop() in progress reports its own termination
            error = query.exception()
            self._terminated(str(query.runId), str(error) if error else None)
        return event.wait(timeout)

    def _terminated(self, run_id: str, exception: str | None) -> None:
        with self._lock:
            name = self._by_id.pop(run_id, None)
            if name is None:
                return
            self.queries.pop(name, None)
            self.writers.pop(name, None)
            self.rides.pop(name, None)
            stopped = name in self._stopping
            self._stopping.discard(name)
            done = self._reporting[name] = threading.Event()
        if exception and not stopped:
            log.error("connector %s failed:\n%s", name, exception)
        try:
            self.on_terminated(name, exception, stopped)
        finally:
            self.finished[name].set()
            with self._lock:
                if self._reporting.get(name) is done:
                    del self._reporting[name]
            done.set()

    def _progress(self, p) -> None:
        """Report one batch's progress, once: the listener and wait() may both see it."""
        name = p.name
        plan = self.plans.get(name)
        if plan is None:
            return
        with self._lock:
            run = str(p.runId)
            if p.batchId <= self._reported.get(run, -1):
                return
            self._reported[run] = p.batchId
        dead = self._dead.pop((name, p.batchId), 0)  # a source's, from its stream writer
        rows = self._packed.pop((name, p.batchId), None)
        if plan.kind == "sink" and plan.deadletter_path:  # a database sink's, from its stream
            dead = deadletters.rejected_rows(
                plan.deadletter_path, writer_id(plan.checkpoint), p.batchId
            )
        r = plan.reader
        self.on_progress(name, progress_row(p, r.lag_field, dead, r.lag_bytes_field, rows))

    def _flush_progress(self, query) -> None:
        for p in query.recentProgress:
            self._progress(p)


class Stopper(threading.Thread):
    """Stops a query and waits until Spark has deregistered it (its name is free again), then
    runs what was left to do after it (e.g. remove a dropped connector's checkpoint, which a
    query stuck in a call may still write to when the call returns)."""

    def __init__(self, query, writer: StreamWriter | None = None):
        super().__init__(name=f"connectql-stop-{query.name}", daemon=True)
        self.query, self.writer, self._then, self._done = query, writer, [], False
        self._lock = threading.Lock()

    def run(self) -> None:
        if self.writer is not None:
            self._finish_batch()
        try:
            self.query.stop()  # gives up after spark.sql.streaming.stopTimeout; the query goes on
        except Exception as e:
            log.info("stopping query %s: %s", self.query.name, short_error(str(e)))
        try:
            self.query.awaitTermination()
        except Exception:  # a StreamingQueryException: it ended
            pass
        with self._lock:
            self._done, then = True, list(self._then)
        for action in then:
            action()

    def _finish_batch(self) -> None:
        """Let the source's batch under way end and Spark commit it (see StreamWriter)."""
        deadline = time.monotonic() + STOP_GRACE_S
        last = self.writer.finish(STOP_GRACE_S)
        q = self.query
        try:
            while last is not None and q.isActive and time.monotonic() < deadline:
                done = q.lastProgress
                if done and done["batchId"] >= last:
                    return
                time.sleep(0.02)
        except Exception:  # the query ended meanwhile
            pass

    def then(self, action: Callable[[], Any]) -> None:
        """Run `action` once the query has ended (now, if it has)."""
        with self._lock:
            if not self._done:
                self._then.append(action)
                return
        action()


def clear_partial_writes(checkpoint: str) -> None:
    """Remove what an interrupted write of the offset or commit log left: Spark writes a log
    entry to a hidden temporary file and renames it, and a stop or kill between the two leaves
    the file behind, after which a query that never committed a batch refuses to start
    (STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY: its offset log must be empty on batch 0)."""
    for log_dir in ("offsets", "commits"):
        for left in Path(checkpoint, log_dir).glob(".*.tmp*"):
            left.unlink(missing_ok=True)


def _transformed(df, plan: Plan):
    if plan.transform:
        df = df.selectExpr(*plan.transform.projections)
        if plan.transform.where:
            df = df.where(plan.transform.where)
    return df


class _Listener(StreamingQueryListener):
    """Spark's reports, on py4j's threads; after `quiesce` none is handled, and it returns once
    those under way have ended."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self._calls = 0
        self._closed = False
        self._idle = threading.Condition()

    @contextlib.contextmanager
    def _call(self):
        with self._idle:
            if self._closed:
                yield False
                return
            self._calls += 1
        try:
            yield True
        finally:
            with self._idle:
                self._calls -= 1
                self._idle.notify_all()

    def quiesce(self, timeout: float) -> None:
        with self._idle:
            self._closed = True
            self._idle.wait_for(lambda: self._calls == 0, timeout)

    @property
    def _jlistener(self):
        from pyspark import SparkContext

        if not hasattr(self, "_jlistenerobj"):
            wrapper = SparkContext._jvm.PythonStreamingQueryListenerWrapper
            self._jlistenerobj = wrapper(_JsonEvents(self))
        return self._jlistenerobj

    def onQueryStarted(self, event):  # noqa: N802 (Spark's names)
        pass

    def onQueryProgress(self, event):  # noqa: N802
        with self._call() as open_:
            try:
                if open_:
                    self.engine._progress(event.progress)
            except Exception:  # a listener must never kill Spark's listener bus
                log.exception("recording progress failed")

    def onQueryIdle(self, event):  # noqa: N802
        pass

    def onQueryTerminated(self, event):  # noqa: N802
        with self._call() as open_:
            try:
                if open_:
                    self.engine._terminated(str(event.runId), event.exception)
            except Exception:
                log.exception("handling query termination failed")


class _JsonEvents:
    """The Java side of _Listener: a progress event crosses py4j as one JSON text. pyspark's
    own bridge asks the JVM for each field of each event (dozens of py4j calls): with a few
    queries running, Spark's listener thread spent about a fifth of a core on it."""

    def __init__(self, listener: _Listener):
        self.listener = listener

    def onQueryStarted(self, jevent):  # noqa: N802
        pass

    def onQueryProgress(self, jevent):  # noqa: N802
        progress = StreamingQueryProgress.fromJson(json.loads(jevent.progress().json()))
        self.listener.onQueryProgress(QueryProgressEvent(progress))

    def onQueryIdle(self, jevent):  # noqa: N802
        pass

    def onQueryTerminated(self, jevent):  # noqa: N802
        self.listener.onQueryTerminated(QueryTerminatedEvent.fromJObject(jevent))

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]
