"""Supervision: a failed query is restarted with capped exponential backoff until
errors.retry.max, then FAILED; a query without progress while its source has newer data, or
whose batch has been running longer than stall.timeout.ms (e.g. waiting on a database that
does not answer), is STALLED with what it waits on. Keeps each connector's shown state the
truth about its query."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from connectql.catalog import states
from connectql.connectors.streamsread import hold
from connectql.errors import PermanentError, SchemaEvolved, cause, permanent_cause, table_failed
from connectql.errortext import short_error
from connectql.worker import evolution

log = logging.getLogger("connectql.supervisor")

BACKOFF_CAP_MS = 60_000
CLOSE_JOIN_S = 10.0  # close waits this long at most for a stall check under way


def backoff_ms(attempt: int, base_ms: int, cap_ms: int = BACKOFF_CAP_MS) -> int:
    """Wait before restart `attempt` (1-based): base, 2*base, 4*base, ... at most cap."""
    return min(cap_ms, base_ms * 2 ** max(0, attempt - 1))


# states a user's PAUSE or a stop put a connector in: the supervisor restarts nothing there
HELD = (states.PAUSED, states.STOPPED)


class Supervisor:
    """Reacts to query termination and progress (Spark's listener thread) and watches for
    stalls (its own thread). `worker` provides catalog, engine, _launch, _plan_for and _scrub."""

    def __init__(self, worker, poll_s: float = 1.0):
        self.worker = worker
        self.attempts: dict[str, int] = {}
        self.last_data: dict[str, float] = {}  # monotonic time of the last batch with rows
        self.lag: dict[str, int | None] = {}
        self.busy_since: dict[str, float] = {}  # monotonic time a trigger was first seen busy
        self.timers: dict[str, threading.Timer] = {}
        self.stop_to: dict[str, tuple[str, str]] = {}  # name -> (state, reason) after our stop
        self._closed = threading.Event()
        # held while a timer launches a query, while closing and while the worker stops a
        # query: a close or a user's PAUSE waits for a launch under way (else the new query
        # outlives it), and a launch that waited sees the state they left. Reentrant: a
        # schema's evolution, under it, stops and starts the sinks of its streams
        self.launching = threading.RLock()
        self._poll_s = poll_s
        self._thread = threading.Thread(
            target=self._watch, name="connectql-supervisor", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """No restart or stall check after this; returns once the watch has ended (it reads
        the catalog, which must not be in use on another thread when the process exits)."""
        with self.launching:
            self._closed.set()
            for timer in list(self.timers.values()):
                timer.cancel()
            self.timers.clear()
        if self._thread is not threading.current_thread():
            self._thread.join(CLOSE_JOIN_S)

    def forget(self, name: str) -> None:
        timer = self.timers.pop(name, None)
        if timer:
            timer.cancel()
        for d in (self.attempts, self.last_data, self.lag, self.busy_since):
            d.pop(name, None)

    # ------------------------------------------------------------------ events from Spark
    def started(self, name: str) -> None:
        self.last_data[name] = time.monotonic()

    def progress(self, name: str, row: dict) -> None:
        self.worker.catalog.record_progress(name, row)
        self.attempts.pop(name, None)  # a batch completed: the failure streak is over
        self.busy_since.pop(name, None)
        self.lag[name] = row.get("rows_behind")
        if row["input_rows"] > 0:
            self.last_data[name] = time.monotonic()
            self.worker.retainer.read_more(name)  # a sink's lag: measured again soon
        cat = self.worker.catalog
        with cat.lock:
            state = cat.state_of(name)
            if state == states.STALLED:
                cat.set_state(name, states.RUNNING, "progress resumed")
            if state in (states.STALLED, states.RUNNING):  # a batch succeeded: healed
                cat.clear_error(name)

    def terminated(self, name: str, error: str | None, stopped: bool) -> None:
        cat = self.worker.catalog
        if stopped or name in self.stop_to:  # a failure as the worker stops it: the stop
            state, reason = self.stop_to.pop(name, (states.STOPPED, "stopped"))
            if state != "DROPPED":
                cat.set_state(name, state, reason)
        elif error:
            evolved = cause(error, SchemaEvolved)
            if evolved:
                self._later(name, lambda: self._evolve(name, evolved, error))
                return
            stopped = table_failed(error)
            if stopped:
                table, message = stopped[0], self.worker._scrub(stopped[1])
                if cat.fail_table(name, table, message):
                    self._later(name, lambda: self._without_table(name, table, message))
                    return
            permanent = permanent_cause(error)
            self.failed(name, permanent or short_error(error), permanent=permanent is not None)
        else:
            try:  # before FINISHED, which a script waits for before its next SELECT
                self.worker.retainer.measure_lag(name)
            except Exception:  # a stream dropped meanwhile: the next pass measures
                log.warning("measuring the lag of %s failed", name, exc_info=True)
            cat.set_state(name, states.FINISHED, "all available data processed")

    # ------------------------------------------------------------------ restarts
    def failed(self, name: str, message: str, permanent: bool = False) -> None:
        """A query died or could not start: restart it later, or give up (FAILED)."""
        cat, message = self.worker.catalog, self.worker._scrub(message)
        if not cat.has_connector(name) or cat.state_of(name) in HELD:
            return  # paused or stopped by the user as it failed: it stays so
        options = self.worker.options_of(name)
        attempt = self.attempts.get(name, 0) + 1
        if permanent:
            self.attempts.pop(name, None)
            cat.set_state(name, states.FAILED, "a restart cannot fix this", error=message)
            return
        if attempt > options["errors.retry.max"]:
            self.attempts.pop(name, None)
            cat.set_state(
                name, states.FAILED, f"gave up after {attempt - 1} restarts", error=message
            )
            return
        self.attempts[name] = attempt
        delay = backoff_ms(attempt, options["errors.retry.backoff.ms"])
        reason = f"restart {attempt} of {options['errors.retry.max']} in {delay} ms"
        cat.set_state(name, states.RESTARTING, reason, error=message)
        log.info("connector %s: %s", name, reason)
        timer = threading.Timer(delay / 1000, self._restart, args=(name,))
        timer.daemon = True
        self.timers[name] = timer
        timer.start()

    def _later(self, name: str, action) -> None:
        """Run `action` on a timer thread (not on Spark's listener thread)."""
        timer = threading.Timer(0.05, action)
        timer.daemon = True
        self.timers[name] = timer
        timer.start()

    def _evolve(self, name: str, evolved: str, error: str) -> None:
        with self.launching:
            self.timers.pop(name, None)
            if not self._wanted(name):
                return
            try:
                if evolution.evolve(self.worker, name, evolved):
                    return
            except Exception as e:
                log.exception("evolving the schema of %s failed", name)
                error = str(e)
            self.failed(name, short_error(error))

    def _without_table(self, name: str, table: str, error: str) -> None:
        """Start the connector again at once without the table (a sink: the stream) that stopped
        (recorded in the catalog's tables_failed; `error` scrubbed); the others go on from the
        same offsets."""
        with self.launching:
            self.timers.pop(name, None)
            if not self._wanted(name):  # e.g. paused meanwhile: RESUME starts without it
                return
            if self.worker.catalog.get_connector(name).kind == "sink":
                hold(self.worker.checkpoint_of(name), table)
                reason = f"stream {table} stopped: its target refuses its rows; the others go on"
            else:
                reason = f"table {table} stopped: a value it cannot read; the other tables go on"
            log.warning("connector %s: %s: %s", name, reason, error)
            self.worker.catalog.set_state(name, states.RESTARTING, reason, error=error)
            self._relaunch(name)

    def _wanted(self, name: str) -> bool:
        """Whether a restart the supervisor scheduled is still wanted: the worker is open and
        no one paused, stopped or dropped the connector while it waited."""
        cat = self.worker.catalog
        if self._closed.is_set() or not cat.has_connector(name):
            return False
        entry = cat.get_connector(name)
        return entry.desired_state == "running" and entry.state not in HELD

    def _restart(self, name: str) -> None:
        with self.launching:
            self.timers.pop(name, None)
            if not self._closed.is_set():
                self._relaunch(name)

    def _relaunch(self, name: str) -> None:
        cat = self.worker.catalog
        if not cat.has_connector(name):
            return
        entry = cat.get_connector(name)
        if entry.state != states.RESTARTING or entry.desired_state != "running":
            return
        try:
            self.worker._launch(
                name, f"restart {self.attempts.get(name, 0)}", self.worker._bound_plan(entry)
            )
        except Exception as e:  # e.g. the external system is still down
            log.warning("restart of %s failed: %s", name, e)
            self.failed(name, short_error(str(e)), permanent=isinstance(e, PermanentError))

    # ------------------------------------------------------------------ stalls
    def _watch(self) -> None:
        while not self._closed.wait(self._poll_s):
            try:
                self.check_stalls()
            except Exception:  # the watch must go on; the catalog may be closing
                log.debug("stall check failed", exc_info=True)

    def check_stalls(self) -> None:
        engine, cat = self.worker.engine, self.worker.catalog
        for name, query in list(engine.queries.items()):
            reason = self._hang_reason(name, query) or self._stall_reason(name, query)
            if reason:
                with cat.lock:
                    if cat.state_of(name) == states.RUNNING:
                        cat.set_state(name, states.STALLED, reason, error=reason)

    def _stall_reason(self, name: str, query) -> str | None:
        timeout_ms = self.worker.options_of(name)["stall.timeout.ms"]
        idle_ms = (time.monotonic() - self.last_data.get(name, time.monotonic())) * 1000
        if idle_ms < timeout_ms or not self.lag.get(name):
            return None
        return (
            f"no rows for {idle_ms / 1000:.0f} s while the source is"
            f" {self.lag[name]} behind its latest offset"
        )

    def _hang_reason(self, name: str, query) -> str | None:
        """Why the query's current batch counts as hung: it has been busy (a trigger active and
        not waiting for data) at every look for longer than stall.timeout.ms; None otherwise.
        An idle query's triggers come and go between looks, so it never counts."""
        status, now = query.status, time.monotonic()
        message = str(status.get("message") or "")
        if not status.get("isTriggerActive") or message.startswith(("Waiting", "Stopped")):
            self.busy_since.pop(name, None)
            return None
        waited = now - self.busy_since.setdefault(name, now)
        plan = self.worker.engine.plans.get(name)
        # not plan.options: validation filled in the default there, hiding the worker's SET
        if plan is None or waited * 1000 < self.worker.options_of(name)["stall.timeout.ms"]:
            return None
        batch = status.get("batchId")  # a chained sink's ride says which (runtime/ride.py)
        batch = running_batch(plan.checkpoint) if batch is None else batch
        return f"batch {batch} {waiting_on(plan, message, waited)}"


def running_batch(checkpoint: str) -> int:
    """The id of the batch a query is running or planning: the last one in the checkpoint's
    offset log when it has no commit yet, else the next one."""
    ids = [int(p.name) for p in Path(checkpoint, "offsets").glob("[0-9]*") if p.name.isdigit()]
    if not ids:
        return 0
    last = max(ids)
    return last if not Path(checkpoint, "commits", str(last)).exists() else last + 1


def waiting_on(plan, message: str, seconds: float) -> str:
    """'waiting 75 s on 127.0.0.1:5432 (source query)': the external system the batch's calls
    go to (a source's reader, a sink's writer) and the step Spark says the batch is in."""
    if plan.kind == "source":
        planning = message.startswith("Getting offsets")
        place, step = plan.reader.endpoint, "source query" if planning else "source read"
    else:  # the stream it reads is local: a sink waits on its target (also while its
        # writer is set up for the batch, which Spark does before it says "Processing")
        place, step = plan.writer.endpoint, "target write"
    if place is None:
        return f"running for {seconds:.0f} s ({message})"
    return f"waiting {seconds:.0f} s on {place} ({step})"
