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
MODES = ("jetstream", "core")
CONNECTION = (
    Option("url", default=DEFAULT_URL, doc="the server(s): nats://host:port, a comma list"),
    Option("user", doc="the user (absent: none, or the url's)"),
    Option("password", secret=True, doc="the password (a secret: never shown)"),
)
CONNECT_S = 10.0
CALL_S = 60.0  # a call not done by then has lost its server (a dead connection can leave
# nats-py awaiting a reply forever): it gives up, Retryable
CLOSE_S = 5.0


def call(options: dict[str, Any], what: str, body: Callable[[Any], Awaitable[T]]) -> T:
    """`body(nc)` on a connection to the server the options name, within CALL_S; `what` names
    the caller in errors."""
    return asyncio.run(_bounded(options, what, body))


def held(options: dict[str, Any], what: str, body: Callable[[Any], Awaitable[T]]) -> T:
    """`body(nc)` on a connection it may hold as long as it likes (a subscription), in the
    calling thread; the connection closed when it returns."""
    return asyncio.run(_with_connection(options, what, body))


async def _bounded(options, what, body):
    try:
        return await asyncio.wait_for(_with_connection(options, what, body), CALL_S)
    except asyncio.TimeoutError:
        raise Retryable(f"{what}: {where(options)} did not answer within {CALL_S:.0f} s") from None


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
            # nats-py >= 2.10 tries a refused server forever with 0 attempts: one, then
            # NoServersError; its own errors are ours to raise, not to print
            max_reconnect_attempts=1,
            reconnect_time_wait=0.2,
            allow_reconnect=False,
            error_cb=_quiet,
        )
    except (NoServersError, OSError, TimeoutError, asyncio.TimeoutError) as e:
        raise Retryable(f"{what}: cannot reach {where(options)}: {e or type(e).__name__}") from None
    try:
        return await body(nc)
    except (ConnectionClosedError, TimeoutError, asyncio.TimeoutError) as e:
        raise Retryable(f"{what}: {where(options)}: {e or type(e).__name__}") from None
    finally:
        try:
            await asyncio.wait_for(nc.close(), CLOSE_S)
        except (asyncio.TimeoutError, ConnectionClosedError):
            pass


async def reachable(nc) -> None:
    """A call's body that only proves the server answers (a round trip)."""
    await nc.flush(CONNECT_S)


async def _quiet(_error) -> None:
    pass


def where(options: dict[str, Any]) -> str:
    """The first server, as a message names it (no password)."""
    parts = urlsplit((options.get("url") or DEFAULT_URL).split(",")[0].strip())
    return f"{parts.hostname or '127.0.0.1'}:{parts.port or 4222}"
