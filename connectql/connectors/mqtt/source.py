"""The mqtt source: MQTT cannot replay, so the driver subscribes with a persistent session and
acknowledges nothing by hand: each latest_offset appends the messages received since the last
one to the toolkit's spool under the checkpoint (durably) and only then acknowledges them. The
offsets are spool positions, so a replayed batch reads the same messages from the spool. A
kill -9 loses nothing acknowledged (it is spooled); what was received but not yet spooled is
sent again by the broker to the same session: at-least-once."""

from __future__ import annotations

from typing import Any

from connectql.config import Option
from connectql.connectors.mqtt.client import CONNECTION, connected, where
from connectql.toolkit import Retryable, Source, ValidationError
from connectql.toolkit.messages import (
    ValueFormat,
    format_options,
)
from connectql.toolkit.spool import Spooled, SpooledSource, Spooler

SETTLE_S = 30.0  # the longest a query's first look waits for the session's backlog
SOURCE_OPTIONS = (
    *CONNECTION,
    Option("topic", required=True, doc="the topic filter to subscribe to (+ and # allowed)"),
    Option(
        "client.id",
        doc="the persistent session's client id (absent: connectql-<connector>); the broker"
        " keeps the session's messages while the connector is paused or down",
    ),
    *format_options("source"),
)


class MqttSource(SpooledSource, Source):
    """A subscribed client in the driver's source process, a spool under the checkpoint."""

    options = SOURCE_OPTIONS
    spool_folder = "mqtt-spool"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        if options.get("qos") not in (0, 1, 2):
            raise ValidationError(f"mqtt source: qos must be 0, 1 or 2, not {options.get('qos')}")
        self.format = ValueFormat.of(options, "mqtt source")
        if self.format.name == "json" and self.format.schema is None:
            raise ValidationError(
                "mqtt source: format = 'json' needs schema = '...' (an MQTT broker cannot replay"
                " messages to infer it from)"
            )
        self._client = None
        self._spooler: Spooler | None = None

    def __getstate__(self):  # what goes to Spark's workers: no client, no thread
        return {**self.__dict__, "_client": None, "_spooler": None}

    def endpoint(self) -> str:
        return where(self.options)

    def check(self) -> None:
        connected(self.options, "", "mqtt source").disconnect()

    def schema(self) -> str:
        return self.format.row_ddl()  # json has a schema: __init__ asks for it

    def _client_id(self, connector: str | None = None) -> str:
        return self.options.get("client.id") or f"connectql-{connector or self.connector}"

    # ----------------------------------------------------------------- offsets (driver)
    def latest_offset(self, start: dict) -> dict:
        self._subscribed()
        self._spooler.check()
        return self.spooled_offset(start)

    def _subscribed(self) -> None:
        """The client subscribed and the spooler running (once per driver process)."""
        if self._client is not None:
            return
        self._spooler = Spooler(self, _spooled, self._acknowledge, "mqtt-spool")
        client = connected(
            self.options,
            self._client_id(),
            "mqtt source",
            clean=False,
            on_message=lambda _c, _u, message: self._spooler.put(message),
            manual_ack=True,
        )
        client.on_disconnect = self._lost
        client.subscribe(self.options["topic"], self.options["qos"])
        self._client = client
        self._spooler.start()
        # what the broker kept for the session is spooled first (so run = 'once' reads it)
        self._spooler.settled.wait(SETTLE_S)

    def _acknowledge(self, messages: list) -> None:
        for m in messages:
            self._client.ack(m.mid, m.qos)

    def _lost(self, _client, _userdata, _flags, reason, _properties) -> None:
        """The broker went away: paho would reconnect in silence, so the next look fails
        instead, naming the broker (the connector shows RESTARTING; its restart connects
        again, the persistent session keeping what was published meanwhile)."""
        self._spooler.fail(Retryable(f"mqtt source: lost {where(self.options)}: {reason}"))

    def close(self) -> None:
        if self._client is not None:
            self._spooler.stop()  # what was received spooled and acknowledged
            self._client.disconnect()  # sent after the acknowledgements queued before it
            self._client.loop_stop()
            self._client = None

    def on_drop(self, connector: str) -> str | None:
        """End the persistent session: the broker forgets its queued messages."""
        connected(self.options, self._client_id(connector), "mqtt source").disconnect()
        return f"ended the broker's session {self._client_id(connector)}"


def _spooled(message, now_us: int) -> Spooled:
    return Spooled(message.topic, message.payload, timestamp_us=now_us)
