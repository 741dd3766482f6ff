"""The S3 store: a pyarrow S3FileSystem from the connector's options, objects listed in key order
by prefix and pattern, and each object's ETag."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from pyarrow import fs as pafs

from connectql.errors import ValidationError

# keys under this prefix are the sink's staged objects and progress, never read as data
INTERNAL = "_connectql/"


@dataclass(frozen=True)
class Place:
    """Where the objects are and how to reach them (picklable: sent to Spark's workers)."""

    bucket: str
    endpoint: str | None = None
    region: str | None = None
    access_key: str | None = None
    secret_key: str | None = None
    timeout_s: float = 30.0

    def filesystem(self) -> pafs.S3FileSystem:
        kw: dict[str, Any] = {"region": self.region or "us-east-1"}
        if self.endpoint:
            url = urlparse(self.endpoint)
            kw.update(endpoint_override=url.netloc or url.path, scheme=url.scheme or "https")
        if self.access_key:
            kw.update(access_key=self.access_key, secret_key=self.secret_key)
        return pafs.S3FileSystem(
            **kw, request_timeout=self.timeout_s, connect_timeout=self.timeout_s
        )

    def path(self, key: str) -> str:
        return f"{self.bucket}/{key}"

    def url(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def where(self) -> str:
        return f"bucket {self.bucket} at {self.endpoint or 'AWS S3'}"


def place_of(opts: dict[str, Any]) -> Place:
    """The Place of a connector's resolved options; keys must come both or neither."""
    return Place(opts["bucket"], *server_of(opts, "s3"))


def server_of(
    opts: dict[str, Any], who: str
) -> tuple[str | None, str | None, str | None, str | None]:
    """(endpoint, region, access key, secret key) of a connector's resolved S3 options, checked:
    the keys both or neither, the endpoint an http(s) URL."""
    access, secret = opts.get("access.key"), opts.get("secret.key")
    if bool(access) != bool(secret):
        given, missing = ("access.key", "secret.key") if access else ("secret.key", "access.key")
        raise ValidationError(
            f"{who}: {given} is given without {missing}: give both, or neither to use the"
            " standard AWS credential chain"
        )
    endpoint = opts.get("endpoint")
    if endpoint and urlparse(endpoint).scheme not in ("http", "https"):
        raise ValidationError(
            f"{who}: endpoint '{endpoint}' must be a URL starting with http:// or https://"
        )
    return endpoint, opts.get("region"), access, secret


@dataclass(frozen=True)
class Listed:
    """One object of a listing: its key, size in bytes and modification time (ns)."""

    key: str
    size: int
    mtime_ns: int


class Matcher:
    """Which keys a source reads: under `prefix`, matching `pattern` (a glob on the whole key,
    or with pattern.type = 'regex' a regular expression searched in it)."""

    def __init__(self, prefix: str = "", pattern: str | None = None, kind: str = "glob"):
        self.prefix = prefix or ""
        self.pattern = pattern
        self._regex = None
        if pattern:
            source = fnmatch.translate(pattern) if kind == "glob" else pattern
            try:
                self._regex = re.compile(source)
            except re.error as e:
                raise ValidationError(
                    f"s3: pattern '{pattern}' is not a valid regex: {e}"
                ) from None
        self._search = kind == "regex"

    def __call__(self, key: str) -> bool:
        if not key.startswith(self.prefix) or key.startswith(INTERNAL):
            return False
        if self._regex is None:
            return True
        found = self._regex.search(key) if self._search else self._regex.match(key)
        return found is not None


def list_objects(fs: pafs.FileSystem, place: Place, matcher: Matcher) -> list[Listed]:
    """The objects under the prefix that match, in key order (S3's own order: UTF-8 bytes)."""
    base = matcher.prefix.rsplit("/", 1)[0] if "/" in matcher.prefix else ""
    selector = pafs.FileSelector(place.path(base).rstrip("/"), recursive=True, allow_not_found=True)
    cut = len(place.bucket) + 1
    found = [
        Listed(info.path[cut:], info.size, info.mtime_ns or 0)
        for info in fs.get_file_info(selector)
        if info.type == pafs.FileType.File and matcher(info.path[cut:])
    ]
    return sorted(found, key=lambda o: o.key.encode())


def etag_of(metadata: dict) -> str:
    """The ETag of an opened object (from its response headers), without quotes."""
    value = metadata.get("ETag") or metadata.get("etag") or b""
    return (value.decode() if isinstance(value, bytes) else str(value)).strip('"')


def head_etag(fs: pafs.FileSystem, place: Place, key: str) -> str:
    with fs.open_input_file(place.path(key)) as f:
        return etag_of(f.metadata())


def require_bucket(fs: pafs.FileSystem, place: Place, who: str) -> None:
    """A ValidationError naming the bucket and server when the bucket is not there (an
    unreachable server or refused keys raise OSError)."""
    if fs.get_file_info(place.bucket).type == pafs.FileType.NotFound:
        raise ValidationError(f"{who}: there is no {place.where()}")
