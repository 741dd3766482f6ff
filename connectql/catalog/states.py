"""Connector lifecycle states and the transitions allowed between them, in one place."""

from __future__ import annotations

from connectql.errors import StateError

CREATED, STARTING, RUNNING, PAUSED = "CREATED", "STARTING", "RUNNING", "PAUSED"
RESTARTING, FAILED, STOPPED, FINISHED, STALLED = (
    "RESTARTING",
    "FAILED",
    "STOPPED",
    "FINISHED",
    "STALLED",
)

# states in which a query runs: only these have a rows_per_sec above zero
MOVING = (STARTING, RUNNING, STALLED, RESTARTING)

STATES = (CREATED, STARTING, RUNNING, PAUSED, RESTARTING, FAILED, STOPPED, FINISHED, STALLED)

# from-state -> states it may move to
TRANSITIONS: dict[str, frozenset[str]] = {
    CREATED: frozenset({STARTING, PAUSED, FAILED, STOPPED}),
    STARTING: frozenset({RUNNING, FAILED, RESTARTING, STOPPED, PAUSED, FINISHED}),
    RUNNING: frozenset({PAUSED, RESTARTING, FAILED, STOPPED, FINISHED, STALLED}),
    STALLED: frozenset({RUNNING, PAUSED, RESTARTING, FAILED, STOPPED, FINISHED}),
    PAUSED: frozenset({STARTING, STOPPED}),
    RESTARTING: frozenset({STARTING, RUNNING, FAILED, STOPPED, PAUSED}),
    FAILED: frozenset({STARTING, PAUSED, STOPPED}),
    STOPPED: frozenset({STARTING, PAUSED}),
    FINISHED: frozenset({STARTING, STOPPED}),
}


def check(name: str, current: str, new: str) -> None:
    """Raise StateError naming the connector and its current state if current -> new is illegal."""
    if current == new:
        return
    if new not in TRANSITIONS.get(current, frozenset()):
        raise StateError(f"connector '{name}' is {current}: it cannot become {new}")


# user action -> the states a connector may be in for it
ACTIONS: dict[str, frozenset[str]] = {
    "pause": frozenset({CREATED, STARTING, RUNNING, STALLED, RESTARTING, FAILED, STOPPED}),
    "resume": frozenset({PAUSED}),
    "restart": frozenset(STATES),
    "alter": frozenset(STATES),
    "reset_offsets": frozenset({PAUSED, FAILED, FINISHED}),
}


def check_action(name: str, action: str, current: str) -> None:
    """Raise StateError naming the current state if `action` is not allowed in it."""
    allowed = ACTIONS[action]
    if current not in allowed:
        verb = action.replace("_", " ")
        raise StateError(
            f"connector '{name}' is {current}: {verb} needs it to be {' or '.join(sorted(allowed))}"
        )
