"""The nats connector's options shared by source and sink, and calls to the server: each a
coroutine run to its end on a fresh event loop and connection (Spark calls the connector from
plain threads), an unreachable server raised as Retryable."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit

from connectql.config import Option
from connectql.toolkit import Retryable

T = TypeVar("T")
DEFAULT_URL = "nats://127.0.0.1:4222"
CONNECTION = (
    Option("url", default=DEFAULT_URL, doc="the server(s): nats://host:port, a comma list"),
    Option("user", doc="the user (absent: none, or the url's)"),
    Option("password", secret=True, doc="the password (a secret: never shown)"),
)
CONNECT_S = 10.0


def call(options: dict[str, Any], what: str, body: Callable[[Any], Awaitable[T]]) -> T:
    """`body(nc)` on a connection to the server the options name; `what` names the caller in
    errors."""
    return asyncio.run(_with_connection(options, what, body))


async def _with_connection(options, what, body):
    import nats
    from nats.errors import ConnectionClosedError, NoServersError, TimeoutError

    servers = [u.strip() for u in (options.get("url") or DEFAULT_URL).split(",") if u.strip()]
    try:
        nc = await nats.connect(
            servers,
            user=options.get("user") or None,
            password=options.get("password") or None,
            connect_timeout=CONNECT_S,
            max_reconnect_attempts=0,
            allow_reconnect=False,
        )
    except (NoServersError, OSError, TimeoutError, asyncio.TimeoutError) as e:
        raise Retryable(f"{what}: cannot reach {where(options)}: {e or type(e).__name__}") from None
    try:
        return await body(nc)
    except (ConnectionClosedError, TimeoutError, asyncio.TimeoutError) as e:
        raise Retryable(f"{what}: {where(options)}: {e or type(e).__name__}") from None
    finally:
        await nc.close()


def where(options: dict[str, Any]) -> str:
    """The first server, as a message names it (no password)."""
    parts = urlsplit((options.get("url") or DEFAULT_URL).split(",")[0].strip())
    return f"{parts.hostname or '127.0.0.1'}:{parts.port or 4222}"
