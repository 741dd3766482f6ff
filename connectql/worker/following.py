"""A sink of several streams follows its `streams` patterns: a stream created later that
matches (a source created after it, a table a source found) joins it, read from its
beginning, with an event in the sink's history; a running sink restarts to read it."""

from __future__ import annotations

import logging
from dataclasses import replace

from connectql.catalog import states
from connectql.catalog.store import ConnectorEntry
from connectql.connectors.multitable import matches
from connectql.planner.routes import streams_items

log = logging.getLogger("connectql.worker")


def joining(worker, entry: ConnectorEntry) -> list[str]:
    """The streams sink `entry`'s `streams` matches now that it does not read yet (those
    with a schema, not its own dead-letter stream)."""
    options = {str(k).lower(): v for k, v in entry.options.items()}
    if entry.kind != "sink" or not entry.tables or not options.get("streams"):
        return []
    items, own = streams_items(options["streams"]), options.get("errors.deadletter.stream")
    return [
        s.name
        for s in worker.catalog.streams()
        if s.schema and s.name != own and s.name not in entry.tables and matches(s.name, items)
    ]


def joined(worker, entry: ConnectorEntry) -> ConnectorEntry:
    """`entry` reading the streams that match it now too (recorded, an event each)."""
    new = joining(worker, entry)
    if not new:
        return entry
    tables = (*entry.tables, *new)
    worker.catalog.set_tables(entry.name, tables, entry.tables_added)
    state = worker.catalog.state_of(entry.name)
    for name in new:
        worker.catalog.log_event(entry.name, state, f"follows stream {name}, created later")
    return replace(entry, tables=tables)


def follow(worker) -> None:
    """Each running sink of several streams that new streams match restarts reading them;
    the others record them, to read from their next start."""
    for entry in worker.catalog.connectors():
        with worker.supervisor.launching:  # not between a restart's plan and its query
            if not joining(worker, entry):
                continue
            if not worker.engine.is_active(entry.name):
                joined(worker, entry)  # a start pending plans them
                continue
            reason = "streams created later match streams = '...'"
            log.info("sink %s: %s", entry.name, reason)
            worker._stop(entry.name, states.STOPPED, reason)
            worker._start(worker.catalog.get_connector(entry.name), reason)
