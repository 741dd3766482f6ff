"""The rabbitmq connector's connection options and pika connections made from them."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from connectql.config import Option
from connectql.toolkit import Retryable, ValidationError

DEFAULT_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"
CONNECTION = (
    Option(
        "url",
        default=DEFAULT_URL,
        doc="the broker: amqp://user:password@host:port/vhost (amqps:// for TLS); put the"
        " password in `password` to keep it secret",
    ),
    Option("user", doc="the user (absent: the url's)"),
    Option("password", secret=True, doc="the password (a secret: never shown; absent: the url's)"),
)


def where(options: dict[str, Any]) -> str:
    parts = urlsplit(options.get("url") or DEFAULT_URL)
    return f"{parts.hostname or '127.0.0.1'}:{parts.port or 5672}"


def connect(options: dict[str, Any], what: str):
    """A pika BlockingConnection to the broker; Retryable when it cannot be reached, a
    ValidationError when it refuses the credentials."""
    import pika
    import pika.exceptions as px

    params = pika.URLParameters(options.get("url") or DEFAULT_URL)
    if options.get("user") or options.get("password"):
        given = params.credentials
        params.credentials = pika.PlainCredentials(
            options.get("user") or given.username, options.get("password") or given.password
        )
    params.connection_attempts, params.socket_timeout, params.heartbeat = 1, 10, 30
    try:
        return pika.BlockingConnection(params)
    except (px.ProbableAuthenticationError, px.ProbableAccessDeniedError) as e:
        raise ValidationError(f"{what}: {where(options)} refused the credentials: {e}") from None
    except px.AMQPConnectionError as e:
        raise Retryable(f"{what}: cannot reach {where(options)}: {e!r}") from None
