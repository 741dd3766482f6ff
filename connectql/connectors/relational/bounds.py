"""How long a database connector waits on its server: the options every database connector
declares (connect and read timeouts, lock waits, TCP keepalives) and their values in seconds.

A server that stops answering (a suspended process, a frozen VM, a network black hole) must
fail the call that waits on it, so that the connector is retried with backoff instead of
showing RUNNING while nothing moves. Each database turns `Bounds` into its driver's connect
arguments (postgres/client.py and mysql/client.py: `connect_kwargs`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from connectql.connectors.options import Option
from connectql.errors import PlanError

BOUND_OPTIONS = {
    o.name: o
    for o in [
        Option(
            "connect.timeout.ms",
            "int",
            10_000,
            doc="how long opening a connection may take before it fails (and is retried)",
        ),
        Option(
            "read.timeout.ms",
            "int",
            300_000,
            doc="how long one call (a query, a COPY chunk, a commit, a change-log read) may wait"
            " for the server's answer before it fails and the connector is restarted with"
            " backoff; also the server's statement timeout where it has one; 0: no limit",
        ),
        Option(
            "lock.timeout.ms",
            "int",
            60_000,
            doc="how long a statement waits for a lock someone else holds (e.g. a target table"
            " locked by another session) before it fails and is retried; 0: the server's"
            " default",
        ),
        Option(
            "keepalive.ms",
            "int",
            30_000,
            doc="TCP keepalive: a peer that stops answering on the network (a dropped link, a"
            " frozen host) is noticed after about this long; 0: the system's default",
        ),
    ]
}
BOUND_KEYS = tuple(BOUND_OPTIONS)


@dataclass(frozen=True)
class Bounds:
    """The bounds of a connection in seconds; None: no limit of ours."""

    connect_s: float
    read_s: float | None
    lock_s: float | None
    keepalive_s: float | None

    @classmethod
    def of(cls, cfg: dict[str, Any]) -> Bounds:
        """The bounds in a connection config (the options above; defaults when absent)."""

        def seconds(key: str) -> float | None:
            value = cfg.get(key)
            ms = int(BOUND_OPTIONS[key].default if value is None else value)
            return ms / 1000 if ms > 0 else None

        return cls(
            seconds("connect.timeout.ms") or 1.0,
            seconds("read.timeout.ms"),
            seconds("lock.timeout.ms"),
            seconds("keepalive.ms"),
        )

    def keepalive_probes(self) -> tuple[int, int, int] | None:
        """(idle, interval, count) in whole seconds: probes start after a third of the
        keepalive time and three unanswered ones close the connection."""
        if self.keepalive_s is None:
            return None
        idle = max(1, round(self.keepalive_s / 3))
        interval = max(1, round(self.keepalive_s * 2 / 9))
        return idle, interval, 3


def check_bounds(opts: dict[str, Any], where: str) -> None:
    """A negative bound (or a connect timeout of 0) is refused, naming the option."""
    for key in BOUND_KEYS:
        least = 1 if key == "connect.timeout.ms" else 0
        if opts.get(key) is not None and int(opts[key]) < least:
            raise PlanError(f"{where}: {key} must be {least} or more, not {opts[key]}")


def endpoint(connection: dict[str, Any]) -> str:
    """'host:port' of a connection config (the port as declared, with its default)."""
    return f"{connection.get('host', 'localhost')}:{connection.get('port', '')}".rstrip(":")
