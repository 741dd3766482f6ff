"""GET /events: the connectors' state changes and progress as Server-Sent Events. Each tick reads
the status table once; the first event is a snapshot, then only what changed since the tick
before."""

from __future__ import annotations

import asyncio
import json

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import StreamingResponse

from connectql.api.errors import finite
from connectql.api.routes import ApiError, Routes

PROGRESS = ("rows_total", "rows_written", "rows_dead_lettered", "rows_per_sec", "lag", "lag_bytes")
INTERVAL = (0.2, 60.0)  # the ?interval= (seconds) a client may ask for


def changes(before: dict[str, dict], after: dict[str, dict]) -> list[tuple[str, dict]]:
    """(event, data) for each connector created, dropped, changed state or moved."""
    out = []
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name), after.get(name)
        old_state = old["state"] if old else None
        new_state = new["state"] if new else "DELETED"
        if old_state != new_state:
            error = new.get("last_error") if new else None
            out.append(("state", {"connector": name, "from": old_state, "to": new_state,
                                  "error": error}))  # fmt: skip
        if new and (not old or any(old[k] != new[k] for k in PROGRESS)):
            out.append(("progress", {"connector": name, **{k: new[k] for k in PROGRESS}}))
    return out


def frame(event: str, data) -> bytes:
    return f"event: {event}\ndata: {json.dumps(finite(data), default=str)}\n\n".encode()


def interval(query: dict[str, str]) -> float:
    given = query.get("interval", "1")
    try:
        seconds = float(given)
    except ValueError:
        seconds = -1.0
    if not INTERVAL[0] <= seconds <= INTERVAL[1]:
        raise ApiError(
            400, f"interval is seconds from {INTERVAL[0]} to {INTERVAL[1]}, not {given!r}"
        )
    return seconds


def feed(routes: Routes):
    """The /events endpoint over `routes`' status table."""

    async def events(request: Request):
        every = interval(dict(request.query_params))

        async def stream():
            before = await run_in_threadpool(routes.status_rows)
            yield frame("snapshot", list(before.values()))
            while True:
                await asyncio.sleep(every)
                after = await run_in_threadpool(routes.status_rows)
                for event, data in changes(before, after):
                    yield frame(event, data)
                before = after

        return StreamingResponse(
            stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )

    return events
