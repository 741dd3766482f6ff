"""The redis connector's declared options and the client made from them."""

from __future__ import annotations

from typing import Any

from connectql.config import Option
from connectql.toolkit.messages import format_options

DEFAULT_URL = "redis://127.0.0.1:6379/0"
CONNECTION = (
    Option("url", default=DEFAULT_URL, doc="the server: redis://host:port/db (rediss:// for TLS)"),
    Option("user", doc="the ACL user (absent: the url's, or the default user)"),
    Option("password", secret=True, doc="the password (a secret: never shown)"),
)
FIELDS = (
    Option("value.field", default="value", doc="the entry field that holds the message value"),
    Option(
        "key.field",
        default="key",
        doc="the entry field that holds the message key (__key); the other fields are its"
        " headers (__headers)",
    ),
)
SOURCE_OPTIONS = (
    *CONNECTION,
    Option("key", required=True, doc="the stream key(s) to read: a name or a comma list"),
    Option(
        "start",
        "enum",
        "earliest",
        choices=("earliest", "latest"),
        doc="where a new connector starts: the streams' first entries, or only entries added"
        " after CREATE",
    ),
    *FIELDS,
    *format_options("source"),
    Option(
        "poll.interval.ms",
        "int",
        200,
        doc="when a look found no new entry, wait this long before looking again",
    ),
)
SINK_OPTIONS = (
    *CONNECTION,
    Option("key", doc="the stream key to add entries to (or key.column)"),
    Option("key.column", doc="a column holding each row's stream key (instead of key)"),
    *FIELDS,
    *format_options("sink"),
    Option(
        "maxlen",
        "int",
        doc="trim each stream written to about this many entries (XADD MAXLEN ~); absent: no"
        " trimming",
    ),
)


def client(options: dict[str, Any]):
    """A client of the server the options name (bytes in, bytes out)."""
    import redis

    return redis.Redis.from_url(
        options.get("url") or DEFAULT_URL,
        username=options.get("user") or None,
        password=options.get("password") or None,
        socket_connect_timeout=10,
        socket_timeout=60,
    )


def keys_of(text: str) -> list[str]:
    """The stream keys of a comma list, in order, each once."""
    return list(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))


def where(url: str | None) -> str:
    """The server as a message names it (no password)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url or DEFAULT_URL)
    return f"{parts.hostname or '127.0.0.1'}:{parts.port or 6379}"


class Connected:
    """A redis source's or sink's client, made at first use and never pickled (Spark's
    workers make their own)."""

    _client = None

    def __getstate__(self):
        return {**self.__dict__, "_client": None}

    @property
    def client(self):
        if self._client is None:
            self._client = client(self.options)
        return self._client

    def endpoint(self) -> str:
        return where(self.options.get("url"))
