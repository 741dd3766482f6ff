"""A run = 'once' sink started while the once sources feeding its stream still read: it follows
the stream (writing chunk N while a source reads chunk N+1) and ends FINISHED once they are
done and it has written everything they wrote."""

from __future__ import annotations

import logging
import threading

from connectql.catalog import states

log = logging.getLogger(__name__)

BUSY = (states.STARTING, states.RUNNING, states.RESTARTING, states.STALLED)
POLL_S = 0.2


def finish_after(worker, name: str, feeders: list[str]) -> None:
    """Stop the sink `name` as FINISHED once `feeders` are no longer at work and its query
    has processed what is in the stream then (a daemon thread; it leaves a query that was
    stopped, restarted or failed meanwhile to whoever did that)."""
    query = worker.engine.queries.get(name)

    def current() -> bool:
        return worker.engine.queries.get(name) is query and query.isActive

    def run() -> None:
        try:
            while current() and any(worker.catalog.state_of(f) in BUSY for f in feeders):
                query.awaitTermination(POLL_S)
            if not current():
                return
            query.processAllAvailable()
            if current():
                worker.supervisor.stop_to[name] = (
                    states.FINISHED,
                    "all available data processed",
                )
                worker.engine.stop(name)
        except Exception:  # the query's own failure is reported and restarted as any query's
            log.debug("finishing once sink %s", name, exc_info=True)

    threading.Thread(target=run, name=f"finish-{name}", daemon=True).start()
