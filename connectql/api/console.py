"""The web console: its static files at /ui (shipped in the package, nothing fetched from
elsewhere), and a browser's GET / sent there. Both pass without the token: the files hold no
data, and the page asks for the token before it calls the API."""

from __future__ import annotations

from pathlib import Path

from starlette.responses import RedirectResponse
from starlette.staticfiles import StaticFiles

FILES = Path(__file__).parent / "console"
PREFIX = "/ui"
# The page's own files only: no inline script, no other origin (the charts are inline SVG).
HEADERS = [
    (b"content-security-policy", b"default-src 'self'; img-src 'self' data:; style-src 'self'"),
    (b"x-content-type-options", b"nosniff"),
    (b"cache-control", b"no-cache"),
]


class Console:
    """Answers /ui and /ui/... from FILES and a browser's GET / (Accept: text/html) with a
    redirect to /ui/; everything else goes to `api`."""

    def __init__(self, api):
        self.api = api
        self.files = StaticFiles(directory=FILES, html=True)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.api(scope, receive, send)
        path = scope["path"]
        if path == PREFIX or (path == "/" and wants_html(scope)):
            return await RedirectResponse(PREFIX + "/", 303)(scope, receive, send)
        if path.startswith(PREFIX + "/"):
            inner = {**scope, "root_path": scope.get("root_path", "") + PREFIX}
            return await self.files(inner, receive, with_headers(send))
        return await self.api(scope, receive, send)


def wants_html(scope) -> bool:
    """A browser's navigation (its Accept names text/html); API clients send */* or JSON."""
    if scope["method"] not in ("GET", "HEAD"):
        return False
    accept = dict(scope["headers"]).get(b"accept", b"").decode("latin-1")
    return "text/html" in accept


def with_headers(send):
    async def send_with(message):
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *HEADERS]}
        await send(message)

    return send_with
