"""Error answers: `{"error_code", "message"}` for an ApiError, a ConnectQLError, a bug, and the
404/405 of a path or method no route takes (405 with Allow, naming the methods the path takes)."""

from __future__ import annotations

import json
import logging
import math
import re
from urllib.parse import unquote

from starlette.responses import Response

from connectql.api.routes import ROUTES, ApiError, error_status
from connectql.errors import ConnectQLError

log = logging.getLogger("connectql.api")

_COMPILED = [
    (method, re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", path) + "$"), handler)
    for method, path, handler in ROUTES
]


def match(method: str, path: str) -> tuple[str, dict[str, str]]:
    """The handler's name and path parameters; ApiError 404 (no such path) or 405 (method, with
    the Allow header). HEAD is answered as GET, without the body."""
    wanted = "GET" if method == "HEAD" else method
    allowed = []
    for m, pattern, handler in _COMPILED:
        found = pattern.match(path)
        if found:
            if m == wanted:
                return handler, {k: unquote(v) for k, v in found.groupdict().items()}
            allowed.append(m)
    if allowed:
        raise ApiError(
            405,
            f"{method} is not allowed on {path}; use {', '.join(allowed)}",
            headers={"Allow": ", ".join(allowed)},
        )
    raise ApiError(404, f"no such endpoint: {path} (see /openapi.json)")


def finite(value):
    """`value` with NaN and infinities as the text "NaN", "Infinity", "-Infinity": json.dumps
    writes them bare, which is not JSON, and strict parsers (JSON.parse, jq) refuse the body."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def answer(status: int, body, headers: dict[str, str] | None = None) -> Response:
    """The response: JSON, or Prometheus text when `body` is a str."""
    if isinstance(body, str):
        data, kind = body.encode(), "text/plain; version=0.0.4; charset=utf-8"
    else:
        data, kind = json.dumps(finite(body), default=str).encode(), "application/json"
    return Response(data, status, headers, media_type=kind)


def error_answer(e: Exception, where: str = "") -> Response:
    if isinstance(e, ApiError):
        body = {"error_code": e.status, "message": str(e), **e.extra}
        return answer(e.status, body, e.headers)
    if isinstance(e, ConnectQLError):
        status = error_status(e)
        return answer(status, {"error_code": status, "message": str(e)})
    log.error("%s failed", where, exc_info=e)  # a bug: say so without a traceback, keep serving
    return answer(500, {"error_code": 500, "message": f"internal error: {type(e).__name__}"})
