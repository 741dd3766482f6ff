"""The rabbitmq source. A classic or quorum queue cannot replay what it has delivered, so a
thread of the driver consumes it with manual acknowledgements, appends what arrives to the
toolkit's spool under the checkpoint (durably) and only then acknowledges it. The offsets are
spool positions, so a replayed batch reads the same messages from the spool. A kill -9 loses
nothing acknowledged; a message delivered but not yet spooled goes back to the queue when the
connection drops and is delivered again: at-least-once.

A stream queue keeps its messages, so it is read by offset as the nats and redis sources read
theirs (stream.py): an offset is the next stream offset to read, `{"n": 120, "stream": true}`,
kept only in the checkpoint; a partition is the messages at offsets from one to another, the
same every time: each message enters the connectql stream exactly once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

from connectql.config import Option
from connectql.connectors.rabbitmq import stream
from connectql.connectors.rabbitmq.client import CONNECTION, connect, where
from connectql.toolkit import Source, ValidationError
from connectql.toolkit.messages import (
    HEADERS,
    INFER_MESSAGES,
    KEY,
    POSITION,
    TIMESTAMP,
    TOPIC,
    ValueFormat,
    format_options,
    message_rows,
    text_of,
)
from connectql.toolkit.spool import Spooled, SpooledSource

GROUP = 10_000  # messages spooled (and acknowledged) together at most
IDLE_S = 0.5  # a stream queue found with nothing new is looked at again this much later
SETTLE_S = 30.0  # the longest a query's first look waits for the queue's backlog to be spooled
SOURCE_OPTIONS = (
    *CONNECTION,
    Option("queue", required=True, doc="the queue to consume (it must exist)"),
    Option(
        "queue.type",
        "enum",
        "auto",
        choices=("auto", "stream", "classic"),
        doc="stream: `queue` is a stream queue, read by offset (exactly-once); classic: a classic"
        " or quorum queue, consumed and spooled (at-least-once); auto: asked of the broker at"
        " each start (declaring the queue again as a stream, which needs configure permission)",
    ),
    Option(
        "stream.offset",
        default="first",
        doc="a stream queue: where a new connector starts, as x-stream-offset: first (the"
        " oldest message kept), last (the last chunk written), next (only messages published"
        " after CREATE), an offset, or an ISO timestamp (the first chunk written then or later)",
    ),
    Option(
        "prefetch",
        "int",
        GROUP,
        doc="a classic or quorum queue: messages the broker sends before they are acknowledged"
        " (basic.qos)",
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
        self.start_at = stream.start_spec(options.get("stream.offset") or "first")
        self._stream: bool | None = {"stream": True, "classic": False}.get(
            options.get("queue.type") or "auto"
        )
        if self._stream is False:
            self._schema_given()
        self._initial: dict | None = None
        self._idle_until = 0.0
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
        if not self.is_stream():  # a queue.type the broker cannot tell is refused now
            self._schema_given()

    def _schema_given(self) -> None:
        """A classic or quorum queue cannot give its messages twice: no sample to infer from."""
        if self.format.row_ddl() is None:
            raise ValidationError(
                f"rabbitmq source: format = '{self.format.name}' needs schema = '...' for a"
                f" classic or quorum queue ('{self.options['queue']}' cannot replay messages to"
                " infer it from; a stream queue can)"
            )

    def schema(self) -> str:
        """Given, or inferred from the stream queue's first messages from stream.offset."""
        sample = []
        if self.format.row_ddl() is None:
            found = stream.deliveries(self.options, self.start_at, stream.RESOLVE_S, INFER_MESSAGES)
            sample = [body for _offset, (_method, _props, body) in found]
        found = f"{len(sample)} messages of stream queue '{self.options['queue']}'"
        return self.format.row_ddl_of(sample, "rabbitmq source", found)

    def is_stream(self) -> bool:
        """Whether `queue` is a stream queue (queue.type, else asked of the broker once)."""
        if self._stream is None:
            self._stream = stream.is_stream(self.options)
        return self._stream

    # ----------------------------------------------------------------- offsets (driver)
    def initial_offset(self) -> dict:
        if not self.is_stream():
            return super().initial_offset()
        if self._initial is None:
            self._initial = _at(stream.first_offset(self.options, self.start_at))
        return self._initial

    def latest_offset(self, start: dict) -> dict:
        if self.is_stream() != bool(start.get("stream")):
            raise ValidationError(
                f"rabbitmq source: queue '{self.options['queue']}' is "
                f"{'now' if self.is_stream() else 'no longer'} a stream queue, and the checkpoint"
                f" holds {'spool positions' if self.is_stream() else 'stream offsets'}: RESET"
                " CONNECTOR ... OFFSETS (paused) to read it from its start"
            )
        if self.is_stream():
            return self._stream_latest(start)
        return self._spooled_latest(start)

    def _stream_latest(self, start: dict) -> dict:
        """The stream's next offset; an idle stream is asked again IDLE_S later at the soonest
        (each look is a connection and a wait for deliveries)."""
        if time.monotonic() < self._idle_until:
            return start
        latest = _at(max(stream.next_offset(self.options), start["n"]))
        if latest == start:
            self._idle_until = time.monotonic() + IDLE_S
        return latest

    def end_offset(self, start: dict, latest: dict, max_records: int) -> dict:
        end = super().end_offset(start, latest, max_records)
        return _at(end["n"]) if start.get("stream") else end

    def partitions(self, start: dict, end: dict) -> list:
        parts = super().partitions(start, end)
        return [{**p, "stream": True} for p in parts] if start.get("stream") else parts

    def commit(self, end: dict) -> None:
        if not end.get("stream"):  # a stream keeps what was read: nothing to drop
            super().commit(end)

    # ----------------------------------------------------------------- reading (executor)
    def read(self, partition: dict) -> Iterator:
        if not partition.get("stream"):
            yield from super().read(partition)
            return
        fmt = self.format.reading(self.stream_schemas.get(None))
        for page in stream.between(self.options, partition["start"], partition["end"]):
            yield from self._rows(page, fmt)

    def _rows(self, page: list, fmt: ValueFormat) -> Iterator:
        """A page of (offset, delivery) of the stream as rows with their message columns."""
        queue = self.options["queue"]
        offsets = [offset for offset, _d in page]
        props = [d[1] for _o, d in page]
        keys = [d[0].routing_key or None for _o, d in page]
        yield from message_rows(
            fmt,
            [d[2] for _o, d in page],
            where=lambda i: {"queue": queue, "offset": offsets[i]},
            meta=lambda kept: {
                TOPIC: [queue] * len(kept),
                KEY: [keys[i] for i in kept],
                HEADERS: [_pairs(props[i].headers) for i in kept],
                POSITION: [str(offsets[i]) for i in kept],
                TIMESTAMP: [_micros(props[i].timestamp) for i in kept],
            },
            keys=[k.encode() if k else None for k in keys],
            positions=[f"{o:020d}" for o in offsets],
        )

    # ----------------------------------------------------------------- a classic queue (driver)
    def _spooled_latest(self, start: dict) -> dict:
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


def _at(offset: int) -> dict:
    """A stream queue's offset: the next stream offset to read (`n`: the lag counts by it)."""
    return {"n": offset, "stream": True}


def _micros(timestamp: int | None) -> int | None:
    """The timestamp property (seconds) in microseconds; None: the message has none (a stream
    message's arrival time would differ between replays)."""
    return timestamp * 1_000_000 if timestamp else None


def _pairs(given: dict | None) -> list[tuple[str, str]] | None:
    """A stream message's headers as the message columns hold them (its offset is __position)."""
    headers = _headers({k: v for k, v in (given or {}).items() if k != stream.OFFSET})
    return sorted(headers.items()) if headers else None


def _headers(given: dict | None) -> dict[str, str] | None:
    """AMQP headers as message-column text (a value that is no text: its str)."""
    return (
        {k: text_of(v if isinstance(v, bytes) else str(v)) for k, v in given.items()} or None
        if given
        else None
    )
