"""The mqtt connector's connection options and paho clients made from them."""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import urlsplit

from connectql.config import Option
from connectql.toolkit import Retryable, ValidationError

DEFAULT_URL = "mqtt://127.0.0.1:1883"
CONNECTION = (
    Option("url", default=DEFAULT_URL, doc="the broker: mqtt://host:port (mqtts:// for TLS)"),
    Option("user", doc="the user name (absent: none)"),
    Option("password", secret=True, doc="the password (a secret: never shown)"),
    Option("qos", "int", 1, doc="the quality of service: 0 (at most once), 1 or 2"),
)
CONNECT_S = 10.0


def where(options: dict[str, Any]) -> str:
    parts = urlsplit(options.get("url") or DEFAULT_URL)
    return f"{parts.hostname or '127.0.0.1'}:{parts.port or 1883}"


def connected(
    options: dict[str, Any], client_id: str, what: str, clean: bool = True, on_message=None, **kw
):
    """A paho client connected to the broker (its network loop running); Retryable when the
    broker cannot be reached, a ValidationError naming the broker's refusal. `on_message` is
    set before connecting: a persistent session's queued messages come right after the broker's
    CONNACK, and paho drops (unacknowledged, so never sent again on this connection) those that
    arrive before a callback is set."""
    import paho.mqtt.client as mqtt

    parts = urlsplit(options.get("url") or DEFAULT_URL)
    client = mqtt.Client(
        mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, clean_session=clean, **kw
    )
    if options.get("user"):
        client.username_pw_set(options["user"], options.get("password") or None)
    if parts.scheme == "mqtts":
        client.tls_set()
    answered, refused = threading.Event(), []

    def on_connect(_c, _u, _flags, reason, _props):
        if reason.is_failure:
            refused.append(str(reason))
        answered.set()

    client.on_connect = on_connect
    if on_message is not None:
        client.on_message = on_message
    try:
        client.connect(parts.hostname or "127.0.0.1", parts.port or 1883, keepalive=30)
    except OSError as e:
        raise Retryable(f"{what}: cannot reach {where(options)}: {e}") from None
    client.loop_start()
    if not answered.wait(CONNECT_S) or refused:
        client.loop_stop()
        client.disconnect()
        if refused:
            raise ValidationError(f"{what}: {where(options)} refused the connection: {refused[0]}")
        raise Retryable(f"{what}: {where(options)} did not answer in {CONNECT_S:.0f} s")
    return client
