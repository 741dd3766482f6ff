"""What every request passes before a route: its whole body read (within MAX_BODY, with a
Content-Length, each part within BODY_TIMEOUT_S), the token checked (but for GET /health, whose
answer without one says only whether the worker is up and its role), HEAD answered as GET
without the body, a trailing slash ignored. A pure ASGI middleware: a refused request never
reaches the routes."""

from __future__ import annotations

import asyncio
import hmac
import json
import re

from connectql.api.errors import error_answer
from connectql.api.routes import ApiError

MAX_BODY = 1 << 20
BODY_TIMEOUT_S = 30.0  # a body that stops arriving holds a connection no longer than this
# what /health says to a caller without the token: up or not, and who is active
PUBLIC_HEALTH = ("status", "role", "epoch", "active")
_CLOSE = {"Connection": "close"}  # what is left of an unread body must not become a request


class Guard:
    def __init__(self, app, token: str | None):
        self.app, self.token = app, token

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        head = scope["method"] == "HEAD"
        path = scope["path"].rstrip("/") or "/"
        try:
            body = await read_body(headers, receive)
            anonymous = bool(self.token) and not self.authorized(headers)
            if anonymous and not (path == "/health" and scope["method"] in ("GET", "HEAD")):
                raise ApiError(401, "this server wants a token: send Authorization: Bearer <token>")
        except ApiError as e:
            return await error_answer(e)(scope, receive, send)
        scope = {**scope, "method": "GET" if head else scope["method"], "path": path}
        reply = without_body(send) if head else send
        reply = only_public_health(reply) if anonymous else reply
        return await self.app(scope, replay(body, receive), reply)

    def authorized(self, headers: dict[str, str]) -> bool:
        given = headers.get("authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {self.token}".encode())


async def read_body(headers: dict[str, str], receive) -> bytes:
    """The whole body, as Content-Length says; refused (and the connection closed after the
    answer) when it is chunked or too large."""
    if headers.get("transfer-encoding"):
        raise ApiError(
            411, "send the body with a Content-Length; chunked bodies are not read", _CLOSE
        )
    given = headers.get("content-length") or "0"
    if not re.fullmatch(r"[0-9]+", given):  # uvicorn refuses it first; see serve.Protocol
        raise ApiError(400, f"Content-Length {given!r} is not a number of bytes", _CLOSE)
    if int(given) > MAX_BODY:
        raise ApiError(413, f"the body is {given} bytes; at most {MAX_BODY}", _CLOSE)
    chunks = []
    while True:
        try:
            message = await asyncio.wait_for(receive(), BODY_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise ApiError(
                408, f"the body did not arrive within {BODY_TIMEOUT_S:g} s", _CLOSE
            ) from None
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


def replay(body: bytes, receive):
    """`receive` giving the body read already, then what the connection says (a disconnect)."""
    sent = False

    async def again():
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again


def only_public_health(send):
    """`send` for /health without the token: the answer keeps only PUBLIC_HEALTH's keys."""
    start = {}

    async def send_public(message):
        if message["type"] == "http.response.start":
            start.update(message)
            return
        try:
            data = json.loads(message.get("body", b""))
            data = {k: v for k, v in data.items() if k in PUBLIC_HEALTH}
        except (ValueError, AttributeError):  # not the JSON /health answers: send nothing of it
            data = {"status": "unknown"}
        body = json.dumps(data).encode()
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(body)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return send_public


def without_body(send):
    async def send_head(message):
        if message["type"] == "http.response.body":
            message = {**message, "body": b""}
        await send(message)

    return send_head
