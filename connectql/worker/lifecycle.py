"""User lifecycle actions on a connector: PAUSE, RESUME, RESTART, ALTER ... SET; the states
each needs are checked in catalog/states.py."""

from __future__ import annotations

import shutil
from dataclasses import replace
from typing import Any

from connectql.catalog import states
from connectql.connectors.multitable import patterns
from connectql.errors import ConnectQLError, PlanError
from connectql.worker import evolution, following
from connectql.worker.results import Result

NO_WORKER = (
    "no worker serves this home, so it takes effect when one does: connectql start"
    " (a server in the background) or connectql run FILE"
)


def act(worker, action: str, name: str) -> Result:
    entry = worker.catalog.get_connector(name)
    states.check_action(name, action, entry.state)
    return {"pause": pause, "resume": resume, "restart": restart, "reset_offsets": reset_offsets}[
        action
    ](worker, entry)


def pause(worker, entry) -> Result:
    worker.catalog.set_desired(entry.name, "paused")
    worker._stop(entry.name, states.PAUSED, "paused by user")
    return Result(f"paused connector {entry.name}; its offsets are kept")


def resume(worker, entry) -> Result:
    worker.catalog.set_desired(entry.name, "running")
    return _started(worker, entry.name, worker._start(entry, "resumed by user"), "resumed")


def restart(worker, entry) -> Result:
    """Stop and start the connector; a sink's streams that stopped alone are tried again."""
    worker._stop(entry.name, states.STOPPED, "restart requested")
    if entry.kind == "sink" and entry.tables_failed:
        worker.catalog.clear_failed_tables(entry.name)
        tried = ", ".join(sorted(entry.tables_failed))
        worker.catalog.log_event(entry.name, states.STOPPED, f"streams tried again: {tried}")
    worker.catalog.set_desired(entry.name, "running")
    entry = worker.catalog.get_connector(entry.name)
    return _started(worker, entry.name, worker._start(entry, "restarted by user"), "restarted")


def _started(worker, name: str, started: bool, done: str) -> Result:
    """What a RESUME or RESTART did: started the query, left it to the next worker, or failed
    (then the error, as the connector's last_error says)."""
    if started:
        return Result(f"{done} connector {name} from its checkpoint")
    entry = worker.catalog.get_connector(name)
    if entry.state == states.FAILED:
        return Result(f"connector {name} did not start: {entry.last_error}", warning=True)
    if entry.state == states.RESTARTING:
        return Result(
            f"connector {name} failed to start; retrying: {entry.last_error}", warning=True
        )
    return Result(f"connector {name} is to run from its checkpoint; {NO_WORKER}", warning=True)


def reset_offsets(worker, entry) -> Result:
    """Forget the connector's offsets: its next start reads from the beginning (a source
    re-snapshots, its stopped tables too; a database sink re-applies its stream). The new
    checkpoint gets a new writer id, so the batches it writes are new ones, not replays."""
    plan = worker._plan(entry)
    if plan.kind == "sink" and plan.writer.path:
        raise ConnectQLError(
            f"RESET CONNECTOR {entry.name} OFFSETS: a {plan.type} sink cannot start over, since"
            f" Spark's file sink at {plan.writer.path} skips batch ids it has committed; drop"
            " the connector and create it again with a new path"
        )
    cleanup = worker._cleanup(entry)  # e.g. a replication slot: the next start makes a new one
    shutil.rmtree(plan.checkpoint, ignore_errors=True)
    worker.catalog.execute("DELETE FROM connector_offsets WHERE connector = ?", [entry.name])
    worker.catalog.clear_failed_tables(entry.name)
    worker.catalog.log_event(entry.name, entry.state, "offsets reset by user")
    return Result(
        f"reset the offsets of connector {entry.name}; it starts from the beginning when"
        f" resumed or restarted" + (f"; {cleanup}" if cleanup else "")
    )


def alter(worker, name: str, changes: dict[str, Any]) -> Result:
    """New options are validated like CREATE; a running connector restarts with them from the
    same checkpoint. A change that does not validate changes nothing."""
    entry = worker.catalog.get_connector(name)
    states.check_action(name, "alter", entry.state)
    for key in ("connector", "stream"):
        if key in {k.lower() for k in changes}:
            raise PlanError(
                f"ALTER CONNECTOR cannot change '{key}': drop and re-create"
                f" connector '{name}' instead"
            )
    if "initial.state" in {k.lower() for k in changes}:
        raise PlanError(
            f"ALTER CONNECTOR {name}: initial.state only says how CREATE leaves a connector;"
            " use PAUSE CONNECTOR or RESUME CONNECTOR to change whether it runs"
        )
    updated = replace(
        entry, options={**entry.options, **{k.lower(): v for k, v in changes.items()}}
    )
    if entry.tables or patterns(updated.options.get("table")):
        if updated.options.get("table") != entry.options.get("table"):
            return retable(worker, entry, updated)
    if entry.tables and updated.options.get("streams") != entry.options.get("streams"):
        raise PlanError(
            f"ALTER CONNECTOR cannot change the streams of sink '{name}' (each has its own"
            " progress in the target): drop and re-create it instead"
        )
    plan = worker._plan(updated)
    if plan.kind == "source":
        worker.check_stream_schema(plan)
    worker._bind_deadletters(plan)  # a new dead-letter stream is registered, like at CREATE
    was_active = worker.engine.is_active(name) or entry.state == states.RESTARTING
    worker.catalog.update_options(name, updated.options, plan.tasks)
    if was_active:
        worker._stop(name, states.STOPPED, "altered")
        worker._start(worker.catalog.get_connector(name), "restarted with new options")
    return Result(
        f"altered connector {name}" + ("; restarted from its checkpoint" if was_active else "")
    )


def retable(worker, entry, updated) -> Result:
    """ALTER CONNECTOR ... SET (table = '...') on a source of several tables that takes tables
    while it runs: the tables the new value adds are read whole while the others' changes
    flow, the ones it leaves out are no longer read (their streams stay), the others go on."""
    name = entry.name
    reader = _taking_tables(worker, replace(updated, tables=entry.tables))
    if reader is None:
        raise PlanError(
            f"ALTER CONNECTOR cannot change the tables of connector '{name}' (only a cdc"
            " source (postgres, mysql) of several tables takes tables while it runs): drop and re-create it"
        )
    found = reader.discover()
    names = [f.table for f in found]
    kept = tuple(t for t in entry.tables if t in names)
    new = [f for f in found if f.table not in entry.tables]
    gone = [t for t in entry.tables if t not in names]
    was_active = worker.engine.is_active(name) or entry.state == states.RESTARTING
    worker.catalog.update_options(name, updated.options, entry.tasks)
    said = [evolution.add_tables(worker, entry, new, kept, "added")] if new else []
    if not new:
        worker.catalog.set_tables(name, kept, tuple(t for t in entry.tables_added if t in kept))
    said += [f"table(s) {', '.join(gone)} no longer read (their streams stay)"] if gone else []
    for text in said:
        worker.catalog.log_event(name, worker.catalog.state_of(name), text)
    if was_active:
        worker._stop(name, states.STOPPED, "altered")
        worker._start(worker.catalog.get_connector(name), "restarted with its new tables")
    following.follow(worker)
    return Result(f"altered connector {name}: " + "; ".join(said or ["its tables are the same"]))


def snapshot(worker, name: str, tables: list[str]) -> Result:
    """ALTER CONNECTOR name SNAPSHOT TABLE t, ...: read those tables of a source that takes
    tables while it runs again, whole, in chunks while the change log flows (its target then
    gets every row again: rows gone missing there come back); restarts it to ask."""
    entry = worker.catalog.get_connector(name)
    states.check_action(name, "alter", entry.state)
    if _taking_tables(worker, entry) is None:
        raise PlanError(
            f"ALTER CONNECTOR {name} SNAPSHOT TABLE: only a cdc source (postgres, mysql) of several"
            " tables reads a table again while it runs"
        )
    unknown = [t for t in tables if t not in entry.tables or t in entry.tables_failed]
    if unknown:
        raise PlanError(
            f"ALTER CONNECTOR {name} SNAPSHOT TABLE: {', '.join(unknown)} is not a table it"
            f" reads (it reads {', '.join(t for t in entry.tables if t not in entry.tables_failed)})"
        )
    asked = {**entry.snapshots, **{t: entry.snapshots.get(t, 0) + 1 for t in tables}}
    worker.catalog.set_snapshots(name, asked)
    said = f"snapshot of {', '.join(tables)} asked: read whole while the change log flows"
    worker.catalog.log_event(name, worker.catalog.state_of(name), said)
    if worker.engine.is_active(name) or entry.state == states.RESTARTING:
        worker._stop(name, states.STOPPED, "a snapshot asked")
        worker._start(worker.catalog.get_connector(name), said)
    return Result(f"connector {name}: {said}")


def _taking_tables(worker, entry):
    """The reader spec of source `entry` (its options, tables not yet resolved) when it is one
    of several tables that takes tables while it runs; None otherwise."""
    if entry.kind != "source" or not entry.tables:
        return None
    reader = worker._plan(replace(entry, tables=())).reader
    return reader if reader.adds_tables else None
