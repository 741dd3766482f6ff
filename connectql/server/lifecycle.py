"""User lifecycle actions on a connector: PAUSE, RESUME, RESTART, ALTER ... SET; the states
each needs are checked in catalog/states.py."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from connectql.catalog import states
from connectql.errors import ConnectQLError, PlanError
from connectql.server.results import Result


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
    worker._start(entry, "resumed by user")
    return Result(f"resumed connector {entry.name} from its checkpoint")


def restart(worker, entry) -> Result:
    worker._stop(entry.name, states.STOPPED, "restart requested")
    worker.catalog.set_desired(entry.name, "running")
    worker._start(worker.catalog.get_connector(entry.name), "restarted by user")
    return Result(f"restarted connector {entry.name} from its checkpoint")


def reset_offsets(worker, entry) -> Result:
    raise ConnectQLError(
        "RESET CONNECTOR ... OFFSETS is not supported yet: a stream's file sink skips batch ids"
        " it has already committed, so a connector started from an empty checkpoint would"
        " silently write nothing (drop and re-create it with a new name instead)"
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
    updated = replace(
        entry, options={**entry.options, **{k.lower(): v for k, v in changes.items()}}
    )
    plan = worker._plan(updated)
    if plan.kind == "source":
        worker.check_stream_schema(plan)
    was_active = worker.engine.is_active(name) or entry.state == states.RESTARTING
    worker.catalog.update_options(name, updated.options, plan.tasks)
    if was_active:
        worker._stop(name, states.STOPPED, "altered")
        worker._start(worker.catalog.get_connector(name), "restarted with new options")
    return Result(
        f"altered connector {name}" + ("; restarted from its checkpoint" if was_active else "")
    )
