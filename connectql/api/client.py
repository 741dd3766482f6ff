"""Where `connectql` commands send their statements: the server running on the home (or named
with --server), else a worker embedded in this process. Both run a script and return Results."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from connectql.errors import ConnectQLError
from connectql.worker.home import read_address
from connectql.worker.interface import WorkerApi
from connectql.worker.results import Result


class Embedded:
    """A worker in this process, started on first use; it holds the home until closed.
    `deferred`: it serves one command, so continuous connectors are recorded, not started."""

    def __init__(self, home: Path | None, deferred: bool = False, given: str | None = None):
        self.home, self.deferred, self.given = home, deferred, given  # given: as the user wrote it
        self._worker = None

    @property
    def worker(self) -> WorkerApi:
        if self._worker is None:
            from connectql.worker.worker import Worker

            self._worker = Worker(self.given or self.home, deferred=self.deferred)
        return self._worker

    def run(self, text: str, source: str = "") -> Iterator[Result]:
        for _stmt, result in self.worker.run_script(text, source):
            yield result

    def close(self) -> None:
        if self._worker is not None:
            try:
                self._worker.wait_for_once()
            finally:
                self._worker.close()


class Remote:
    """A running `connectql server`, over its HTTP API."""

    def __init__(self, url: str, token: str | None = None, timeout: float = 600):
        self.url, self.token, self.timeout = url.rstrip("/"), token, timeout

    def request(self, method: str, path: str, body=None) -> tuple[int, object]:
        """(status, decoded JSON body); an error status raises ConnectQLError with the server's
        message. `body` is sent as JSON, or as text when it is a str."""
        data = body.encode() if isinstance(body, str) else None
        if body is not None and data is None:
            data = json.dumps(body).encode()
        headers = {"Content-Type": "text/plain" if isinstance(body, str) else "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.url + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return resp.status, _decode(resp.read())
        except urllib.error.HTTPError as e:
            payload = _decode(e.read())
            raise RemoteError(e.code, _message(e.code, payload, self.url), payload) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ConnectQLError(f"no connectql server answers at {self.url}: {reason}") from None

    def run(self, text: str, source: str = "") -> Iterator[Result]:
        try:
            _, payload = self.request("POST", "/sql", {"sql": text, "source": source})
        except RemoteError as e:
            yield from (Result.from_json(r) for r in (e.payload or {}).get("results", []))
            raise ConnectQLError(str(e)) from None
        yield from (Result.from_json(r) for r in payload["results"])

    def close(self) -> None:
        pass


class RemoteError(ConnectQLError):
    def __init__(self, status: int, message: str, payload):
        super().__init__(message)
        self.status, self.payload = status, payload if isinstance(payload, dict) else {}


def _decode(raw: bytes):
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace")


def _message(status: int, payload, url: str) -> str:
    if status == 401:
        return f"the server at {url} wants a token: set CONNECTQL_TOKEN or pass --token-file"
    if isinstance(payload, dict) and payload.get("message"):
        return str(payload["message"])
    return f"the server at {url} answered {status}"


def token(token_file: str | None = None) -> str | None:
    """The API token: the contents of `token_file`, else $CONNECTQL_TOKEN, else none."""
    if token_file:
        try:
            return Path(token_file).read_text().strip() or None
        except OSError as e:
            raise ConnectQLError(f"cannot read the token file {token_file}: {e.strerror}") from None
    return os.environ.get("CONNECTQL_TOKEN") or None


def connect(
    home: Path,
    server: str | None = None,
    token_file: str | None = None,
    deferred: bool = False,
    given: str | None = None,
):
    """The server named by `server`, else the one serving `home`, else an embedded worker
    (`deferred` for one command: see Embedded; `given`: the home as the user wrote it)."""
    if server:
        return Remote(server, token(token_file))
    address = read_address(home)
    if address:
        return Remote(address["url"], token(token_file))
    return Embedded(home, deferred, given)
