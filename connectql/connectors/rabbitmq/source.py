"""The rabbitmq source: a classic or quorum queue cannot replay what it has delivered, so a
thread of the driver consumes it with manual acknowledgements, appends what arrives to the
toolkit's spool under the checkpoint (durably) and only then acknowledges it. The offsets are
spool positions, so a replayed batch reads the same messages from the spool. A kill -9 loses
nothing acknowledged; a message delivered but not yet spooled goes back to the queue when the
connection drops and is delivered again: at-least-once."""

from __future__ import annotations

import threading
import time
from typing import Any

from connectql.config import Option
from connectql.connectors.rabbitmq.client import CONNECTION, connect, where
from connectql.toolkit import Source, ValidationError
from connectql.toolkit.messages import (
    ValueFormat,
    format_options,
    text_of,
)
from connectql.toolkit.spool import Spooled, SpooledSource

GROUP = 10_000  # messages spooled (and acknowledged) together at most
SETTLE_S = 30.0  # the longest a query's first look waits for the queue's backlog to be spooled
SOURCE_OPTIONS = (
    *CONNECTION,
    Option("queue", required=True, doc="the queue to consume (it must exist)"),
    Option(
        "prefetch",
        "int",
        GROUP,
        doc="messages the broker sends before they are acknowledged (basic.qos)",
    ),
    *format_options("source"),
)


class RabbitSource(SpooledSource, Source):
    """A consuming thread in the driver's source process, a spool under the checkpoint."""

    options = SOURCE_OPTIONS
    spool_folder = "rabbitmq-spool"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.format = ValueFormat.of(options, "rabbitmq source")
        if self.format.name == "json" and self.format.schema is None:
            raise ValidationError(
                "rabbitmq source: format = 'json' needs schema = '...' (a queue cannot replay"
                " messages to infer it from)"
            )
        self._consumer: threading.Thread | None = None
        self._stop, self._idle = threading.Event(), threading.Event()
        self._failed: list[Exception] = []

    def __getstate__(self):  # what goes to Spark's workers: no thread
        state = {**self.__dict__, "_consumer": None, "_failed": []}
        return {k: v for k, v in state.items() if k not in ("_stop", "_idle")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._stop, self._idle = threading.Event(), threading.Event()

    def endpoint(self) -> str:
        return where(self.options)

    def check(self) -> None:
        import pika.exceptions as px

        conn = connect(self.options, "rabbitmq source")
        try:
            conn.channel().queue_declare(self.options["queue"], passive=True)
        except px.ChannelClosedByBroker as e:
            raise ValidationError(
                f"rabbitmq source: queue '{self.options['queue']}' on {self.endpoint()}: {e.reply_text}"
            ) from None
        finally:
            if conn.is_open:
                conn.close()

    def schema(self) -> str:
        return self.format.row_ddl()  # json has a schema: __init__ asks for it

    # ----------------------------------------------------------------- offsets (driver)
    def latest_offset(self, start: dict) -> dict:
        if self._failed:
            raise self._failed.pop()
        if self._consumer is None or not self._consumer.is_alive():
            self._stop.clear()
            self._idle = threading.Event()
            self._consumer = threading.Thread(target=self._consume, name="rabbitmq-spool")
            self._consumer.daemon = True
            self._consumer.start()
            # what the queue holds now is spooled first (so run = 'once' reads it)
            self._idle.wait(SETTLE_S)
        return self.spooled_offset(start)

    def _consume(self) -> None:
        """Messages appended to the spool a group at a time, then acknowledged together."""
        try:
            conn = connect(self.options, "rabbitmq source")
        except Exception as e:  # noqa: BLE001 (raised by the next latest_offset)
            self._failed.append(e)
            return
        try:
            channel = conn.channel()
            channel.basic_qos(prefetch_count=self.options["prefetch"])
            group: list = []
            for delivered in channel.consume(self.options["queue"], inactivity_timeout=0.2):
                if delivered[0] is not None:
                    group.append(delivered)
                if group and (delivered[0] is None or len(group) >= GROUP or self._stop.is_set()):
                    self._spool(group)
                    channel.basic_ack(group[-1][0].delivery_tag, multiple=True)
                    group = []
                if delivered[0] is None:
                    self._idle.set()  # nothing more delivered for a while: all spooled
                if self._stop.is_set():
                    break
        except Exception as e:  # noqa: BLE001 (raised by the next latest_offset)
            self._failed.append(e)
        finally:
            if conn.is_open:
                conn.close()  # what was delivered and not acknowledged goes back to the queue

    def _spool(self, group: list) -> None:
        now = time.time_ns() // 1000
        queue = self.options["queue"]
        self.spool_messages(
            [
                Spooled(
                    queue, body, method.routing_key or None, _headers(props.headers),
                    props.timestamp * 1_000_000 if props.timestamp else now,
                )
                for method, props, body in group
            ]
        )  # fmt: skip

    def close(self) -> None:
        if self._consumer is not None:
            self._stop.set()
            self._consumer.join(timeout=10)
            self._consumer = None


def _headers(given: dict | None) -> dict[str, str] | None:
    """AMQP headers as message-column text (a value that is no text: its str)."""
    return (
        {k: text_of(v if isinstance(v, bytes) else str(v)) for k, v in given.items()} or None
        if given
        else None
    )
