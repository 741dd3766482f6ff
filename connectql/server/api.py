"""`connectql server`: a headless worker behind an HTTP API (routes.py), on loopback unless a
token guards it; its address goes to $CONNECTQL_HOME so other commands find it."""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import logging
import math
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from connectql.errors import ConnectQLError
from connectql.server.home import remove_address, write_address
from connectql.server.routes import ROUTES, ApiError, Request, Routes, error_status

log = logging.getLogger("connectql.api")

MAX_BODY = 1 << 20
_COMPILED = [
    (method, re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", path) + "$"), handler)
    for method, path, handler in ROUTES
]


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def query(text: str) -> dict[str, str]:
    """The query's parameters; a repeated one's values joined with commas, so that
    ?expand=status&expand=info (Kafka Connect's form) reads as ?expand=status,info."""
    out: dict[str, str] = {}
    for key, value in parse_qsl(text, keep_blank_values=True):
        out[key] = f"{out[key]},{value}" if key in out else value
    return out


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


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "connectql"
    server: ApiServer
    # An answer leaves in one write (buffered; flushed after each request), at once (no Nagle):
    # unbuffered, the body waited for the client's delayed ACK of the headers, ~40 ms a request.
    wbufsize = -1
    disable_nagle_algorithm = True
    # A client that stalls mid-request, or a kept-alive connection left idle, frees its thread
    timeout = 120

    def __getattr__(self, name: str):
        # Every method is routed, so one a path does not take gets a JSON 405 naming those it
        # does, not BaseHTTPRequestHandler's HTML 501 for a method without a do_ handler.
        if name.startswith("do_"):
            return self._handle
        raise AttributeError(name)

    def _handle(self) -> None:
        headers: dict[str, str] = {}
        try:
            status, body = self._dispatch()
        except ApiError as e:
            status, body = e.status, {"error_code": e.status, "message": str(e), **e.extra}
            headers = e.headers
        except ConnectQLError as e:
            status, body = error_status(e), {"error_code": error_status(e), "message": str(e)}
        except Exception as e:  # a bug: say so without a traceback, keep serving
            log.exception("%s %s failed", self.command, self.path)
            status, body = (
                500,
                {"error_code": 500, "message": f"internal error: {type(e).__name__}"},
            )
        self._send(status, body, headers)

    def _dispatch(self):
        body = self._body()  # first: an unread body would be parsed as the next request
        if self.server.token and not self._authorized():
            raise ApiError(401, "this server wants a token: send Authorization: Bearer <token>")
        url = urlsplit(self.path)
        handler, params = match(self.command, url.path.rstrip("/") or "/")
        req = Request(
            self.command,
            url.path,
            params,
            query(url.query),
            body,
            self.headers.get("Content-Type", ""),
        )
        return getattr(self.server.routes, handler)(req)

    def _body(self) -> bytes:
        """The whole body, as Content-Length says. When it cannot be read, the connection is
        closed after the error: what is left of the body must not become the next request."""
        if self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            raise ApiError(411, "send the body with a Content-Length; chunked bodies are not read")
        given = self.headers.get("Content-Length") or "0"
        if not re.fullmatch(r"[0-9]+", given):
            self.close_connection = True
            raise ApiError(400, f"Content-Length {given!r} is not a number of bytes")
        length = int(given)
        if length > MAX_BODY:
            self.close_connection = True
            raise ApiError(413, f"the body is {length} bytes; at most {MAX_BODY}")
        try:
            return self.rfile.read(length) if length > 0 else b""
        except TimeoutError:
            self.close_connection = True
            raise ApiError(408, f"the body did not arrive within {self.timeout} s") from None

    def _authorized(self) -> bool:
        given = self.headers.get("Authorization", "")
        expected = f"Bearer {self.server.token}"
        return hmac.compare_digest(given.encode(), expected.encode())

    def _send(self, status: int, body, headers: dict[str, str]) -> None:
        if isinstance(body, str):
            data, kind = body.encode(), "text/plain; version=0.0.4; charset=utf-8"
        else:
            data, kind = json.dumps(finite(body), default=str).encode(), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def log_message(self, format, *args):  # noqa: A002 (BaseHTTPRequestHandler's name)
        log.debug("%s %s", self.address_string(), format % args)


class ApiServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address, routes: Routes, token: str | None):
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, Handler)
        self.routes, self.token = routes, token


def check_host(host: str, token: str | None) -> None:
    if not is_loopback(host) and not token:
        raise ConnectQLError(
            f"--host {host} is not a loopback address: anyone who can reach it could run"
            " statements, so the server needs a token (set CONNECTQL_TOKEN or --token-file)"
            " and refuses to start without one"
        )


@contextlib.contextmanager
def serving(worker, host: str, port: int, token: str | None):
    """The API of `worker` on host:port while the block runs, its address in the home's
    server.json (so other commands find it); yields (url, the routes' statement lock)."""
    try:
        httpd = ApiServer((host, port), Routes(worker, f"{host}:{port}"), token)
    except OSError as e:
        raise ConnectQLError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    url = write_address(worker.home, host, httpd.server_address[1])
    httpd.routes.worker_id = url.removeprefix("http://")
    thread = threading.Thread(target=httpd.serve_forever, name="connectql-api", daemon=True)
    thread.start()
    try:
        yield url, httpd.routes.statements
    finally:
        remove_address(worker.home)
        httpd.shutdown()
        httpd.server_close()


def serve(home: Path, host: str, port: int, token: str | None, say=print) -> None:
    """Run a worker on `home` behind the API until SIGINT/SIGTERM; every connector whose desired
    state is running is started again from its checkpoint first."""
    from connectql.server.worker import Worker

    check_host(host, token)
    worker = Worker(home)  # takes the home's lock: a second worker is refused, naming the first
    worker.start_session_early()  # ready, or nearly, when the first statement arrives
    try:
        with serving(worker, host, port, token) as (url, statements):
            say(f"connectql server on {url} (home {worker.home})")
            with statements:
                resumed = worker.resume_all()
            if resumed:
                say(f"resumed from checkpoints: {', '.join(resumed)}")
            try:
                while True:
                    time.sleep(3600)
            finally:
                statements.acquire()  # no statement runs while the worker closes
    finally:
        worker.close()
