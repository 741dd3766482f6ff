"""The Worker: one process that owns the catalog and the SparkSession and executes statements
of the connector language, keeping each connector's state the truth about its query."""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from dataclasses import replace
from pathlib import Path

from pyspark.sql.types import (
    ArrayType,
    DataType,
    MapType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from connectql.catalog import states
from connectql.catalog.query import run_select
from connectql.catalog.redact import redact_value, scrub
from connectql.catalog.secrets import SecretStore
from connectql.catalog.store import Catalog, ConnectorEntry, StreamEntry, table_stream
from connectql.connectors import registry
from connectql.connectors.base import ReaderSpec
from connectql.connectors.multitable import packed_one, with_tables_schemas
from connectql.connectors.options import is_secret_key, validate
from connectql.errors import CatalogError, ConnectQLError, PlanError
from connectql.errortext import short_error
from connectql.grammar import ast
from connectql.planner.plan import Plan, PlanContext, build_plan, checkpoint_path
from connectql.planner.resolve import resolve, resolve_value
from connectql.runtime import session
from connectql.runtime.cluster import check_cluster, check_home_given, is_cluster
from connectql.runtime.deadletters import DEADLETTER_DDL
from connectql.runtime.engine import Engine
from connectql.runtime.logs import log_to, redact_spark_log, stop_logging
from connectql.runtime.retention import check_options
from connectql.runtime.session import logging_settings, send_jvm_output_to, stop_session
from connectql.runtime.streamwriter import writer_id
from connectql.toolkit.packed import ADDED_OPTION, FAILED_OPTION, SNAPSHOT_OPTION
from connectql.worker import describe, following, lifecycle, settings
from connectql.worker.home import HomeLock, default_home_text, home_of
from connectql.worker.lease import (
    Lease,
    catalog_file,
    claim_catalog,
    current_epoch,
    refuse_if_active,
    take_epoch,
)
from connectql.worker.results import Result
from connectql.worker.retainer import Retainer, effective_options
from connectql.worker.schemas import schema_ddl, schema_diff
from connectql.worker.supervisor import Supervisor

log = logging.getLogger("connectql.worker")

_BUSY = (states.STARTING, states.RUNNING, states.RESTARTING, states.STALLED)


class Worker:
    def __init__(
        self,
        home: str | Path | None = None,
        deferred: bool = False,
        leased: bool = False,
        epoch: int | None = None,
    ):
        """`deferred`: a worker that holds the home only for one command (connectql sql, status,
        pause, ...): it records that continuous connectors should run, and leaves starting them
        to a worker that stays (a query started here would end with the command).
        `leased`: the active worker of `connectql server`, holding the home's lease with the
        next epoch; `epoch`: the one a standby took over with (the home's lock may then still
        be held by a paused worker that lost the lease)."""
        self.home = home_of(home)
        self.home_given = str(home or default_home_text())  # as the user gave it
        self.deferred = deferred
        # private, like the secrets in its catalog (inline passwords) and logs
        self.home.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.home_lock = HomeLock(self.home, required=epoch is None)
        self._log_secrets: list[str] = []
        # per thread: the connectors the script running on it started (SELECT waits for those)
        self._script = threading.local()
        self._log_handler = log_to(self.home / "worker.log", lambda: self._log_secrets)
        if not os.environ.get("CONNECTQL_VERBOSE"):  # the JVM's warnings stay in the home
            send_jvm_output_to(self.home / "jvm.log", lambda: self._log_secrets)
        self.lease: Lease | None = None
        try:
            if leased or epoch is not None:
                self.lease = self._take_lease(epoch)
            self.catalog = Catalog(
                self.home / (self.lease.catalog if self.lease else catalog_file(self.home))
            )
        except Exception:
            if self.lease is not None:
                self.lease.release()
            stop_logging(self._log_handler)
            self.home_lock.release()
            raise
        self.secrets = SecretStore(self.home / "secrets.json")
        saved = {k: v for k, v in self.catalog.settings().items() if k.startswith("spark.")}
        spark_settings = {**logging_settings(self.home), **saved}
        self._recover_states()
        self.supervisor = Supervisor(self)
        self.engine = Engine(
            spark_settings,
            self.supervisor.progress,
            self.supervisor.terminated,
            on_session=self._on_session,
        )
        # a worker without a lease (connectql run) holds the lock: it is the newest epoch's
        self.engine.epoch = self.lease.epoch if self.lease else current_epoch(self.home)
        self.engine.on_event = self._engine_event
        self._refresh_redaction()
        self.retainer = Retainer(self)

    # ------------------------------------------------------------------ the lease
    def _take_lease(self, epoch: int | None) -> Lease:
        if epoch is None:
            refuse_if_active(self.home)
            epoch = take_epoch(self.home)
        return Lease(self.home, epoch, claim_catalog(self.home, epoch), self._lost)

    def _lost(self, newer: int) -> None:
        """Another worker took the lease (this one was paused, or its storage went away): it
        runs the connectors now. Touch nothing: the catalog is fenced, Spark's jobs are
        cancelled and the process ends at once (its queries with it, no state written)."""
        self.catalog.fence(f"this worker lost its lease to epoch {newer}")
        log.error("lost the lease of %s to epoch %d: stopping at once", self.home, newer)
        try:
            if self.engine.started:
                self.engine.spark.sparkContext.cancelAllJobs()
        finally:
            os._exit(3)

    # ------------------------------------------------------------------ lifecycle of the worker
    def _recover_states(self) -> None:
        """This worker holds the catalog's lock, so no other worker is alive: a connector shown
        as active was left so by a worker that died (kill -9, power loss). Say so."""
        for e in self.catalog.connectors():
            if e.state in (states.STARTING, states.RUNNING, states.RESTARTING, states.STALLED):
                self.catalog.set_state(
                    e.name, states.STOPPED, "the previous worker stopped without shutting down"
                )

    def _on_session(self, spark) -> None:
        redact_spark_log(spark, self._log_secrets)
        check_home_given(self.home_given, spark.sparkContext.master)
        check_cluster(spark, self.home)

    def master(self) -> str:
        """The spark.master this worker's session runs (or will run) on."""
        return session.master_of(self.engine.settings)

    def check_cluster(self) -> None:
        """On a cluster, start the session now and run its checks (check_cluster): a home the
        executors cannot see is an error when the worker starts."""
        check_home_given(self.home_given, self.master())
        if is_cluster(self.master()):
            self.engine.spark  # noqa: B018 (the property starts and checks the session)

    def start_session_early(self) -> None:
        """Start the SparkSession in the background now (connectql run, server) instead of at
        the first statement that needs it, so that the script's parsing, checks and catalog
        work overlap its start (goal 3 of the throughput issue)."""
        session.start_early(self.engine.settings)

    def start_session_early_for(self, script: str) -> None:
        """start_session_early, unless `script` sets a Spark setting read only at the session's
        start (spark.master, spark.driver.memory, ...), or does not parse (its error comes
        first)."""
        from connectql.grammar.parser import parse_script

        try:
            statements = parse_script(script)
        except ConnectQLError:
            return
        static = [
            s
            for s in statements
            if isinstance(s, ast.Set)
            and s.key.startswith("spark.")
            and not s.key.startswith("spark.sql.")
        ]
        if not static:
            self.start_session_early()

    def resume_all(self) -> list[str]:
        """Start every connector whose desired state is running, from its checkpoint; returns
        the names of those whose query is running now."""
        for e in self.catalog.connectors():
            if e.desired_state == "running" and e.state not in (states.FINISHED, states.PAUSED):
                self._start(e, "worker started")
        return [n for n in self.engine.queries if self.engine.is_active(n)]

    def close(self, stop_spark: bool = True) -> None:
        """Stop every query gracefully (offsets stay in the checkpoints) and close the catalog."""
        self.retainer.close()
        self.supervisor.close()
        for name in list(self.engine.queries):
            self._stop(name, states.STOPPED, "worker shut down")
        for name in self.active():  # e.g. RESTARTING, its timer cancelled: not left "active"
            self._stop(name, states.STOPPED, "worker shut down")
        self.engine.close()
        self.catalog.close()
        if self.lease is not None:
            self.lease.release()
        stop_logging(self._log_handler)
        self.home_lock.release()
        if stop_spark and (self.engine.started or session.starting_or_started()):
            stop_session()

    def active(self) -> list[str]:
        """Connectors with a running query, a restart pending, or a state saying this worker
        is busy with them (STARTING, RUNNING, RESTARTING, STALLED). The state is read too:
        between a timer's end and its query's start, or a query's death and the listener's
        report, there is neither a query nor a timer, and `connectql run` must not stop then."""
        running = [n for n in list(self.engine.queries) if self.engine.is_active(n)]
        pending = [n for n in list(self.supervisor.timers) if n not in running]
        busy = [
            n
            for n, state in self.catalog.query("SELECT name, state FROM connectors")[1]
            if state in _BUSY and n not in running and n not in pending
        ]
        return running + pending + busy

    def wait_for_once(self, names=None) -> None:
        """Wait until the `run = 'once'` connectors started here (all, or `names`) are done:
        FINISHED, FAILED, PAUSED or gone; a restart in between is waited for too."""
        while True:
            waiting = [
                n
                for n, p in list(self.engine.plans.items())
                if p.run == "once"
                and (names is None or n in names)
                and self.catalog.state_of(n) in _BUSY
            ]
            if not waiting:
                return
            self.engine.wait(waiting[0], 0.5)

    def checkpoint_of(self, name: str) -> str:
        return checkpoint_path(self.home, name)

    def options_of(self, name: str) -> dict:
        """The connector's supervision options (errors.retry.*, stall.timeout.ms): its own, else
        the worker's settings, else the defaults. Read from the catalog, not from the query's
        plan: a start that fails at once has no plan, and an ALTER counts from its next restart."""
        return settings.supervision(
            self.catalog.get_connector(name).options, self.catalog.settings()
        )

    # ------------------------------------------------------------------ statements
    def execute(self, stmt: ast.Statement) -> Result:
        handler = getattr(self, "_do_" + type(stmt).__name__, None)
        if handler is None:
            first = " ".join(stmt.text.split()[:2]).upper() or type(stmt).__name__
            raise ConnectQLError(f"{first} is not supported yet")
        try:
            return handler(stmt)
        finally:
            self._refresh_redaction()

    def run_script(self, text: str, source: str = ""):
        """Parse a whole script first (a syntax error runs nothing), then execute statement by
        statement, yielding (statement, result); stops at the first failing one."""
        from connectql.grammar.parser import parse_script

        return self.run_statements(parse_script(text, source), source)

    def measure_stream(self, stream: StreamEntry) -> dict:
        """A stream's size and its sinks' progress now, as the `streams` table shows them."""
        return self.retainer.measure(stream)

    def run_statements(self, stmts: list[ast.Statement], source: str = ""):
        """run_script's statements, parsed already."""
        outer = getattr(self._script, "started", None)
        self._script.started = set() if outer is None else outer
        try:
            for stmt in stmts:
                try:
                    yield stmt, self.execute(stmt)
                except ConnectQLError as e:
                    where = f"{source}:{stmt.line}" if source else f"line {stmt.line}"
                    e.args = (f"{where}: {self._scrub(str(e))}",)
                    raise e from None
        finally:
            self._script.started = outer

    def _do_CreateSourceConnector(self, s: ast.CreateSourceConnector) -> Result:  # noqa: N802
        return self._create(
            ConnectorEntry(s.name, "source", s.type, s.stream, s.options), s.if_not_exists
        )

    def _do_CreateSinkConnector(self, s: ast.CreateSinkConnector) -> Result:  # noqa: N802
        return self._create(
            ConnectorEntry(s.name, "sink", s.type, s.stream, s.options, s.select), s.if_not_exists
        )

    def _create(self, entry: ConnectorEntry, if_not_exists: bool) -> Result:
        if self.catalog.has_connector(entry.name):
            if if_not_exists:
                return Result(f"connector {entry.name} exists; left as it is")
            raise CatalogError(f"connector '{entry.name}' already exists")
        plan = self._plan(entry)
        if entry.kind == "source":
            plan, created_streams = self._bind_stream(plan)
        else:
            created_streams = self._bind_deadletters(plan)
        if plan.writer.check:
            plan.writer.check(self.engine.sink_schema(plan))
        entry = replace(
            entry,
            type=plan.type,
            stream=plan.stream,
            tasks=plan.tasks,
            tables=tuple(plan.table_paths) or plan.inputs,
        )
        try:
            self.catalog.add_connector(entry)
            if plan.initial_state == "paused":
                self.catalog.set_state(
                    entry.name, states.PAUSED, "initial.state = paused", desired="paused"
                )
                return Result(f"created {entry.kind} connector {entry.name} (paused)")
            started = self._launch(entry.name, "created", plan)
        except Exception as e:  # a creation that fails changes nothing
            self._undo_create(entry.name, plan, created_streams)
            if isinstance(e, ConnectQLError):
                raise
            raise ConnectQLError(
                f"connector '{entry.name}' failed to start: {self._scrub(short_error(str(e)))}"
            ) from None
        if entry.kind == "source":  # its streams may be ones a sink of several follows
            following.follow(self)
        if not started:
            return Result(
                f"created {entry.kind} connector {entry.name}; {lifecycle.NO_WORKER}", warning=True
            )
        return Result(f"created {entry.kind} connector {entry.name}")

    def _undo_create(self, name: str, plan: Plan, created_streams: list[str]) -> None:
        if self.engine.is_active(name):
            self._stop(name, "DROPPED", "creation failed")
        self.engine.plans.pop(name, None)
        shutil.rmtree(plan.checkpoint, ignore_errors=True)
        if self.catalog.has_connector(name):
            self._cleanup(self.catalog.get_connector(name))
            self.catalog.remove_connector(name, "creation failed")
        for stream in created_streams:
            shutil.rmtree(self.catalog.get_stream(stream).path, ignore_errors=True)
            self.catalog.remove_stream(stream)

    def _context(self) -> PlanContext:
        carried = {
            table_stream(e.stream, t): t
            for e in self.catalog.connectors()
            if e.kind == "source" and e.stream
            for t in e.tables
        }
        streams = {s.name: s for s in self.catalog.streams()}
        return PlanContext(self.home, streams, self.secrets, carried)

    def _plan(self, entry: ConnectorEntry) -> Plan:
        return build_plan(entry, self._context())

    def check_stream_schema(self, plan: Plan) -> tuple[Plan, list[tuple]]:
        """The source plan with its schema resolved (and a multi-table source's tables), and
        what each of its streams gets: (stream, path, StructType, key); an error naming the
        differences if a stream already has another schema."""
        found = plan.reader.discover() if plan.reader.discover and not plan.reader.schema else []
        if found and found[0].table is not None:
            return self._check_tables(plan, found)
        if found:
            plan = replace(plan, reader=replace(plan.reader, schema=found[0].ddl, key=found[0].key))
        struct = self.engine.resolve_schema(plan.reader)
        plan = replace(plan, reader=replace(plan.reader, schema=schema_ddl(struct)))
        self._check_schema(
            plan.stream, struct, plan.connector, self.catalog.find_stream(plan.stream)
        )
        return plan, [(plan.stream, plan.writer.path, struct, plan.reader.key)]

    def _check_tables(self, plan: Plan, found: list) -> tuple[Plan, list[tuple]]:
        plan = self._with_tables(plan, found)
        parts, known = [], {s.name: s for s in self.catalog.streams()}  # one read, not 1,000
        for f, name in zip(found, plan.streams, strict=True):
            struct = self.engine.resolve_schema(ReaderSpec("parquet", schema=f.ddl))
            self._check_schema(name, struct, plan.connector, known.get(name))
            parts.append((name, plan.table_paths[f.table], struct, f.key))
        tables = [(f.table, p[2]) for f, p in zip(found, parts, strict=True)]
        return replace(plan, reader=with_tables_schemas(plan.reader, tables)), parts

    def _check_schema(self, stream_name: str, struct, connector: str, stream) -> None:
        """`stream`: the stream's entry, None when it is new."""
        diff = schema_diff(stream.schema_json, struct) if stream and stream.schema_json else ""
        if diff:
            raise PlanError(
                f"source connector '{connector}' writes a different schema"
                f" into stream '{stream_name}': {diff}"
            )

    def _bind_stream(self, plan: Plan) -> tuple[Plan, list[str]]:
        """Record the source's schema on its stream (and the dead-letter schema on its
        dead-letter stream), creating streams that are new. Returns the plan with the resolved
        schema, and the names of the streams created."""
        plan, parts = self.check_stream_schema(plan)
        created, known = [], {s.name: s for s in self.catalog.streams()}
        for name, path, struct, key in parts:
            created += self._register(name, path, struct, plan.connector, key, known.get(name))
        return plan, created + self._bind_deadletters(plan)

    def _bind_deadletters(self, plan: Plan) -> list[str]:
        """Create (or check) the plan's dead-letter stream; the names of the streams created."""
        if not plan.deadletter:
            return []
        dead = self.engine.resolve_schema(ReaderSpec("parquet", schema=DEADLETTER_DDL))
        stream = self.catalog.find_stream(plan.deadletter)
        self._check_schema(plan.deadletter, dead, plan.connector, stream)
        return self._register(
            plan.deadletter, plan.deadletter_path, dead, plan.connector, (), stream
        )

    def _register(self, name: str, path: str, struct, connector: str, key, stream) -> list[str]:
        """Create stream `name` (`stream`: its entry, None when it is new) or give it the
        schema and key it lacks; [name] when it was created."""
        if stream is None:
            (Path(path) / "_spark_metadata").mkdir(parents=True, exist_ok=True)
            entry = StreamEntry(name, path, schema_ddl(struct), struct.json(), created_by=connector)
            self.catalog.add_stream(replace(entry, key=",".join(key) or None))
            return [name]
        if not stream.schema or (key and not stream.key):
            self.catalog.set_stream_schema(name, schema_ddl(struct), struct.json(), key)
        return []

    def _start(self, entry: ConnectorEntry, reason: str) -> bool:
        """Start an existing connector; False when it was not started (a deferred worker, or a
        failure). A failure to start is its state, not an error: a plan that no longer holds
        is FAILED; anything else is retried with backoff."""
        try:
            plan = self._bound_plan(entry)
        except ConnectQLError as e:
            self.catalog.set_state(entry.name, states.STARTING, reason)
            self.catalog.set_state(
                entry.name, states.FAILED, "plan failed", error=self._scrub(str(e))
            )
            return False
        try:
            return self._launch(entry.name, reason, plan)
        except Exception as e:
            log.exception("starting connector %s failed", entry.name)
            self.supervisor.failed(entry.name, short_error(str(e)))
            return False

    def _launch(self, name: str, reason: str, plan: Plan) -> bool:
        """Start the plan's query; False when this worker is deferred and the connector is
        continuous (it starts with the next worker that stays)."""
        if self.deferred and plan.run != "once":
            state = self.catalog.state_of(name)
            self.catalog.log_event(name, state, f"{reason}; starts when a worker serves the home")
            return False
        self.catalog.set_state(name, states.STARTING, reason)
        if plan.kind == "sink" and plan.run == "once":
            self._wait_for_feeders(plan.streams)
        self.engine.start(_packed(plan, self.engine.resolve_schema), self._feeder(plan))
        started = getattr(self._script, "started", None)
        if started is not None:  # by a statement of the script on this thread
            started.add(name)
        self.supervisor.started(name)
        with self.catalog.lock:  # a once-query may have finished already
            if self.catalog.state_of(name) == states.STARTING:
                self.catalog.set_state(name, states.RUNNING, "query started")
        return True

    def _bound_plan(self, entry: ConnectorEntry) -> Plan:
        """The plan, a source's reader given its streams' schemas (which evolve), a sink of
        several streams reading those that match it now."""
        plan = self._plan(following.joined(self, entry))
        if plan.kind != "source":
            return plan
        if not plan.table_paths:
            reader = replace(plan.reader, schema=self.catalog.get_stream(plan.stream).schema)
        else:
            streams = [self.catalog.get_stream(s) for s in plan.streams]
            parts = [
                (t, StructType.fromJson(json.loads(s.schema_json)))
                for t, s in zip(plan.table_paths, streams, strict=True)
            ]
            reader = with_tables_schemas(plan.reader, parts)
        if entry.tables_failed:
            failed = json.dumps(sorted(entry.tables_failed))
            reader = replace(reader, options={**reader.options, FAILED_OPTION: failed})
        if entry.tables_added:
            added = json.dumps(list(entry.tables_added))
            reader = replace(reader, options={**reader.options, ADDED_OPTION: added})
        if entry.snapshots:
            snapshots = json.dumps(entry.snapshots)
            reader = replace(reader, options={**reader.options, SNAPSHOT_OPTION: snapshots})
        return replace(plan, reader=reader)

    def _engine_event(self, name: str, text: str) -> None:
        """How a connector runs changed (e.g. a sink now chained): an event in its history."""
        with self.catalog.lock:
            if self.catalog.has_connector(name):
                self.catalog.log_event(name, self.catalog.state_of(name), text)

    def _feeder(self, plan: Plan) -> str | None:
        """The stream writer id of the one continuous source that feeds a continuous sink's
        one stream, which the sink may then ride (runtime/ride.py, SET sink.chaining)."""
        if plan.kind != "sink" or plan.run == "once" or len(plan.streams) != 1:
            return None
        if not settings.chaining(self.catalog.settings()):
            return None
        feeders = [
            e
            for e in self.catalog.connectors()
            if e.kind == "source" and plan.streams[0] in e.streams
        ]
        if len(feeders) != 1:
            return None
        options = {str(k).lower(): v for k, v in feeders[0].options.items()}
        if str(options.get("run", "continuous")).lower() == "once":
            return None
        return writer_id(self.checkpoint_of(feeders[0].name))

    def _wait_for_feeders(self, streams: list[str]) -> None:
        feeders = [
            n
            for n, p in list(self.engine.plans.items())
            if p.kind == "source" and set(streams) & set(p.streams) and p.run == "once"
        ]
        self.wait_for_once(feeders)

    def _stop(self, name: str, state: str, reason: str) -> None:
        """Stop the connector's query (if any) and put it in `state`; cancels a pending restart
        and waits for one under way (its query is then stopped)."""
        with self.supervisor.launching:
            self.supervisor.forget(name)
            self.supervisor.stop_to[name] = (state, reason)  # its end, when reported, is this
            self.engine.stop(name)  # returns once that end is reported (it had a query)
            self.supervisor.forget(name)  # a failure reported just before scheduled a restart
            unsaid = self.supervisor.stop_to.pop(name, None) is not None  # no query ended
            if unsaid and state != "DROPPED" and self.catalog.has_connector(name):
                self.catalog.set_state(name, state, reason)

    def _secret_values(self) -> list[str]:
        """The secret values of every connector and setting: stored secrets, inline values
        and what ${env:..} / ${file:..} references resolve to now."""
        given = [
            (k, v)
            for options in (
                *(e.options for e in self.catalog.connectors()),
                self.catalog.settings(),
            )
            for k, v in options.items()
            if isinstance(v, str) and is_secret_key(k)
        ]
        return [*self.secrets.values(), *(_resolved(k, v) for k, v in given)]

    def _scrub(self, text: str) -> str:
        """`text` without any secret value."""
        return scrub(text, self._secret_values())

    def _refresh_redaction(self) -> None:
        """Both logs mask the secrets known now (after a statement may have added one)."""
        values = sorted(set(self._secret_values()))
        if values != self._log_secrets:
            self._log_secrets = values
            if self.engine.started:
                redact_spark_log(self.engine.spark, values)

    # ------------------------------------------------------------------ the other statements
    def _do_CreateStream(self, s: ast.CreateStream) -> Result:  # noqa: N802
        if self.catalog.find_stream(s.name):
            if s.if_not_exists:
                return Result(f"stream {s.name} exists; left as it is")
            raise CatalogError(f"stream '{s.name}' already exists")
        given = check_options(s.options, f"stream '{s.name}'")
        self.catalog.add_stream(
            StreamEntry(
                s.name,
                self._context().stream_path(s.name),
                retention=given.get("retention"),
                retention_bytes=given.get("retention.bytes"),
                retention_policy=given.get("retention.policy"),
                options={k: v for k, v in given.items() if not k.startswith("retention")} or None,
            )
        )
        return Result(f"created stream {s.name}")

    def _do_AlterStream(self, s: ast.AlterStream) -> Result:  # noqa: N802
        self.catalog.get_stream(s.name)  # raises, listing the known ones
        given = check_options(s.options, f"stream '{s.name}'")
        self.catalog.set_stream_options(s.name, given)
        now = effective_options(self.catalog.get_stream(s.name), self.catalog.settings())
        shown = ", ".join(f"{k} = {v}" for k, v in now.items() if v)
        return Result(f"altered stream {s.name}: {shown or 'no retention'}")

    def _do_CreateSecret(self, s: ast.CreateSecret) -> Result:  # noqa: N802
        if self.secrets.has(s.name):
            if s.if_not_exists:
                return Result(f"secret {s.name} exists; left as it is")
            raise CatalogError(f"secret '{s.name}' already exists")
        self.secrets.put(s.name, s.value)
        return Result(f"created secret {s.name}")

    def _do_Show(self, s: ast.Show) -> Result:  # noqa: N802
        return describe.show(self, s)

    def _do_Describe(self, s: ast.Describe) -> Result:  # noqa: N802
        return describe.describe(self, s)

    def _do_Explain(self, s: ast.Explain) -> Result:  # noqa: N802
        c = s.statement
        kind = "source" if isinstance(c, ast.CreateSourceConnector) else "sink"
        entry = ConnectorEntry(
            c.name, kind, c.type, c.stream, c.options, getattr(c, "select", None)
        )
        plan = self._plan(entry)
        discover = plan.reader.discover if kind == "source" and not plan.reader.schema else None
        if discover:  # the tables it reads now; a PlanError names a pattern matching none
            found = [f for f in discover() if f.table is not None]
            plan = self._with_tables(plan, found) if found else plan
        return Result(columns=["step", "detail"], rows=plan.describe(), title=f"plan of {c.name}")

    def _with_tables(self, plan: Plan, found: list) -> Plan:
        """A multi-table source's plan with the tables `found` and their streams (what CREATE
        records)."""
        tables = [f.table for f in found]
        return replace(plan, table_paths=self._context().table_paths(plan.stream, tables))

    def _do_Drop(self, s: ast.Drop) -> Result:  # noqa: N802
        return getattr(self, f"_drop_{s.what}")(s)

    def _drop_connector(self, s: ast.Drop) -> Result:
        if not self.catalog.has_connector(s.name):
            if s.if_exists:
                return Result(f"no connector {s.name}; nothing dropped")
            self.catalog.get_connector(s.name)  # raises, listing the known ones
        self._stop(s.name, "DROPPED", "dropped")
        cleanup = self._cleanup(self.catalog.get_connector(s.name))
        checkpoint = self._context().checkpoint(s.name)
        shutil.rmtree(checkpoint, ignore_errors=True)
        stuck = self.engine.lingering.get(s.name)
        if stuck is not None:  # its query may still write there when its call returns
            stuck.then(lambda: shutil.rmtree(checkpoint, ignore_errors=True))
        self.catalog.remove_connector(s.name)
        self.engine.plans.pop(s.name, None)
        return Result(f"dropped connector {s.name}" + (f"; {cleanup}" if cleanup else ""))

    def _cleanup(self, entry: ConnectorEntry) -> str | None:
        """The connector type's cleanup in the external system (e.g. a replication slot)."""
        try:
            plugin = registry.lookup(entry.type, entry.kind)
            if plugin.on_drop is None:
                return None
            where = f"{entry.kind} connector '{entry.name}'"
            options = resolve(
                validate(plugin.options_for(entry.kind), entry.options, where), self.secrets
            )
            return plugin.on_drop(options, entry.name, entry.kind)
        except Exception as e:  # the connector goes anyway; say what was left behind
            return self._scrub(f"cleanup failed: {short_error(str(e))}")

    def _drop_stream(self, s: ast.Drop) -> Result:
        stream = self.catalog.find_stream(s.name)
        if stream is None:
            if s.if_exists:
                return Result(f"no stream {s.name}; nothing dropped")
            self.catalog.get_stream(s.name)
        users = [
            e.name
            for e in self.catalog.connectors()
            if s.name in (*e.streams, e.options.get("errors.deadletter.stream"))
        ]
        if users:
            raise CatalogError(
                f"stream '{s.name}' is used by connectors {', '.join(users)}: drop them first"
            )
        shutil.rmtree(stream.path, ignore_errors=True)
        self.catalog.remove_stream(s.name)
        return Result(f"dropped stream {s.name}")

    def _drop_secret(self, s: ast.Drop) -> Result:
        if not self.secrets.has(s.name):
            if s.if_exists:
                return Result(f"no secret {s.name}; nothing dropped")
            self.secrets.get(s.name)
        self.secrets.remove(s.name)
        return Result(f"dropped secret {s.name}")

    def _do_Set(self, s: ast.Set) -> Result:  # noqa: N802
        value = settings.check_setting(s.key, s.value)
        key = s.key if s.key.startswith("spark.") else s.key.lower()
        self.catalog.set_setting(key, value)
        done = f"set {key} = {redact_value(key, value)}"  # e.g. an S3 secret key
        if key in settings.STREAM_SETTINGS:
            return Result(f"{done}; streams that do not set it use it from the next check on")
        if key in settings.ENGINE_SETTINGS:  # sink.chaining: read when a sink starts
            return Result(f"{done}; sinks use it from their next start (RESTART CONNECTOR)")
        if not key.startswith("spark."):
            return Result(f"{done}; connectors that do not set {key} use it from now on")
        if not (self.engine.started or session.starting_or_started()):
            self.engine.settings[s.key] = value
            return Result(done)
        if s.key.startswith("spark.sql."):
            self.engine.spark.conf.set(s.key, value)
            return Result(done)
        return Result(f"{done}; it takes effect when the worker starts again")

    def _do_Select(self, s: ast.Select) -> Result:  # noqa: N802
        # a batch script sees the results of the once-connectors it started, in order; a
        # SELECT of its own (the shell, POST /sql) answers at once
        self.wait_for_once(getattr(self._script, "started", None))
        columns, rows = run_select(self.catalog, s.sql)
        return Result(columns=columns, rows=rows)

    def _do_ConnectorAction(self, s: ast.ConnectorAction) -> Result:  # noqa: N802
        return lifecycle.act(self, s.action, s.name)

    def _do_AlterConnector(self, s: ast.AlterConnector) -> Result:  # noqa: N802
        return lifecycle.alter(self, s.name, s.options)

    def _do_SnapshotTables(self, s: ast.SnapshotTables) -> Result:  # noqa: N802
        return lifecycle.snapshot(self, s.name, s.tables)


def _resolved(key: str, value: str) -> str:
    """An option value with its ${env:..} / ${file:..} references resolved ('' when one cannot
    be: then it reached no connection either)."""
    try:
        return str(resolve_value(key, value, {}))
    except PlanError:
        return ""


def _packed(plan: Plan, resolve) -> Plan:
    """A one-table source's plan that moves its rows packed when its reader can (and sends no
    dead letters, which travel in the rows' own column); `resolve(reader)`: its StructType (the
    engine's, which waits for a session still starting: parsing DDL needs the JVM)."""
    r = plan.reader
    if plan.kind != "source" or not r.packs or r.corrupt_column or plan.table_paths:
        return plan
    struct = resolve(r)
    if len(_timestamp_kinds(struct)) > 1:  # Spark writes each its own way; pyarrow one for all
        return plan
    return replace(plan, reader=packed_one(r, struct))


def _timestamp_kinds(t: DataType) -> set[type]:
    """The kinds of timestamp (TIMESTAMP, TIMESTAMP_NTZ) in a type, nested ones too."""
    if isinstance(t, (TimestampType, TimestampNTZType)):
        return {type(t)}
    if isinstance(t, StructType):
        inner = [f.dataType for f in t.fields]
    elif isinstance(t, ArrayType):
        inner = [t.elementType]
    elif isinstance(t, MapType):
        inner = [t.keyType, t.valueType]
    else:
        inner = []
    return set().union(*map(_timestamp_kinds, inner))
