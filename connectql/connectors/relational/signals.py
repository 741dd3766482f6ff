"""A cdc source's signal table (signal.table, as Debezium's): a row of type 'execute-snapshot'
with data '{"data-collections": ["t", ...]}' asks for those tables to be read again while the
change log flows. Each row is served once: the source's offset keeps the ids served ("signals",
while their rows stay in the table) and counts the snapshots asked per table ("signalled")."""

from __future__ import annotations

import json
import logging

SIGNAL_EVERY_S = 1.0  # how often the source reads its signal table
SNAPSHOT = "execute-snapshot"
CREATE = "CREATE TABLE {name} (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, data VARCHAR(2048))"

log = logging.getLogger(__name__)


def read(db, relation: str) -> list[tuple[str, str, str]]:
    """(id, type, data) of each row of the signal table, as text."""
    quoted = ", ".join(db.quote(c) for c in ("id", "type", "data"))
    return [tuple(_text(v) for v in row) for row in db.rows(f"SELECT {quoted} FROM {relation}")]


def tables_asked(data: str) -> list[str]:
    """The table names of a signal's data-collections ('t', 'schema.t' or 'db.schema.t')."""
    try:
        body = json.loads(data or "{}")
    except ValueError:
        return []
    names = body.get("data-collections") if isinstance(body, dict) else None
    return [str(n).rsplit(".", 1)[-1] for n in names] if isinstance(names, list) else []


def served(start: dict, rows: list[tuple[str, str, str]], reading: list) -> dict:
    """`start` with the signals of `rows` it has not served yet counted in "signalled" (for
    the tables of `reading`; others are named in the log and left) and their ids in
    "signals"; `start` itself when there is nothing new."""
    done = set(start.get("signals") or [])
    present = {i for i, _kind, _data in rows}
    fresh = [(i, kind, data) for i, kind, data in rows if i not in done]
    if not fresh and done <= present:
        return start
    signalled = dict(start.get("signalled") or {})
    for i, kind, data in fresh:
        if kind != SNAPSHOT:
            continue
        for table in tables_asked(data):
            if table in reading:
                signalled[table] = signalled.get(table, 0) + 1
            else:
                log.warning("signal %s asks for a snapshot of %s, not a table read", i, table)
    ids = sorted((done & present) | {i for i, _k, _d in fresh})
    return {
        **start,
        "signals": ids,
        **({"signalled": dict(sorted(signalled.items()))} if signalled else {}),
    }


def _text(value) -> str:
    if value is None:
        return ""
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)
