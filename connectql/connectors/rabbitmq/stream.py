"""A RabbitMQ stream queue (x-queue-type = stream) over AMQP 0-9-1: whether a queue is one, where
it starts and ends, and the messages between two of its offsets. A stream keeps what it delivers
(an acknowledgement only gives the consumer credit), each message at an offset the broker puts in
its `x-stream-offset` header, so a range of offsets reads the same messages every time."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

from connectql.connectors.rabbitmq.client import connect, where
from connectql.toolkit import Retryable, ValidationError

OFFSET = "x-stream-offset"
SPECS = ("first", "last", "next")  # what x-stream-offset takes besides a number or a timestamp
PREFETCH = 1000  # deliveries unacknowledged at most (a stream consumer needs basic.qos)
PROBE_S = 0.3  # a probe's wait for the next delivery: none by then, the stream has no more
RESOLVE_S = 2.0  # the same for where a new connector starts (asked once)
PROBE_MOST = 20_000  # deliveries a probe reads at most (a busy stream's tail never goes quiet)
WAIT_S = 30.0  # the longest a read waits for a delivery it knows exists
# arguments a stream queue and a classic or quorum one may both have: a declare that differs in
# one says nothing of the type, so it is declared again with the queue's own value
SHARED = ("x-max-length-bytes", "x-queue-leader-locator", "x-initial-cluster-size")
STREAM_ONLY = ("x-max-age", "x-stream-max-segment-size-bytes")
TELLING = ("x-queue-type", *STREAM_ONLY)  # an argument whose difference says the type
_INEQUIVALENT = re.compile(
    r"inequivalent arg '([^']+)'(?:.*current is the value '([^']*)' of type '(\w+)')?"
)


def is_stream(options: dict[str, Any]) -> bool:
    """Whether `queue` is a stream queue: declared again as one, the broker either agrees or
    names the argument that differs (x-queue-type: it is not; one only streams take: it is;
    one only classic or quorum queues take: it is not; one both take: declared again with the
    queue's own value)."""
    import pika.exceptions as px

    arguments: dict[str, Any] = {"x-queue-type": "stream"}
    conn = connect(options, "rabbitmq source")
    try:
        try:  # it exists (else the declares below would make it, as a stream)
            conn.channel().queue_declare(options["queue"], passive=True)
        except px.ChannelClosedByBroker as e:
            raise ValidationError(
                f"rabbitmq source: queue '{options['queue']}' on {where(options)}: {e.reply_text}"
            ) from None
        while True:
            try:
                conn.channel().queue_declare(options["queue"], durable=True, arguments=arguments)
                return True
            except px.ChannelClosedByBroker as e:
                found = _INEQUIVALENT.search(e.reply_text or "") if e.reply_code == 406 else None
                name, value, kind = found.groups() if found else (None, None, None)
                if name in TELLING:
                    return name != "x-queue-type"
                if name in SHARED and value is not None and name not in arguments:
                    arguments[name] = value if kind == "longstr" else int(value)
                elif name is not None and name not in SHARED:
                    return False
                else:
                    raise _cannot_tell(options, e.reply_text) from None
    finally:
        if conn.is_open:
            conn.close()


def _cannot_tell(options: dict[str, Any], why: str) -> ValidationError:
    return ValidationError(
        f"rabbitmq source: cannot tell whether queue '{options['queue']}' on {where(options)} is"
        f" a stream queue ({why}): give queue.type = 'stream' or 'classic'"
    )


def start_spec(text: str) -> Any:
    """stream.offset as x-stream-offset takes it: first, last, next, a number, a timestamp."""
    if text in SPECS:
        return text
    if text.isdigit():
        return int(text)
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationError(
            f"rabbitmq source: stream.offset = '{text}' is not first, last, next, an offset or"
            " an ISO timestamp"
        ) from None
    return at if at.tzinfo else at.replace(tzinfo=timezone.utc)


def first_offset(options: dict[str, Any], spec: Any) -> int:
    """The offset of the first message x-stream-offset = `spec` delivers; the next offset to be
    written when it delivers none (a number is its own answer)."""
    if isinstance(spec, int):
        return spec
    if spec != "next":
        for offset in _offsets(options, spec, RESOLVE_S, 1):
            return offset
    return next_offset(options, RESOLVE_S)


def next_offset(options: dict[str, Any], wait_s: float = PROBE_S) -> int:
    """The offset after the last message delivered from the stream's last chunk (0: none), a
    lower bound of its end: every message before it is there to read."""
    last = -1
    for offset in _offsets(options, "last", wait_s, PROBE_MOST):
        last = max(last, offset)
    return last + 1


def _offsets(options: dict[str, Any], spec: Any, wait_s: float, most: int) -> Iterator[int]:
    for offset, _delivered in deliveries(options, spec, wait_s, most):
        yield offset


def deliveries(
    options: dict[str, Any], spec: Any, wait_s: float, most: int | None
) -> Iterator[tuple]:
    """(offset, (method, properties, body)) of up to `most` messages (None: no limit) from
    x-stream-offset = `spec`, until none comes within `wait_s`; acknowledged as they come (a
    stream consumer's credit)."""
    import pika.exceptions as px

    conn = connect(options, "rabbitmq source")
    try:
        channel = conn.channel()
        # pika rejects (requeues) what a cancelled consumer was sent and not yet given; a
        # stream queue refuses basic.reject by closing the connection, and needs nothing back
        channel._impl.basic_reject = _nothing
        most = most or float("inf")
        channel.basic_qos(prefetch_count=int(max(1, min(PREFETCH, most))))
        consumed = channel.consume(
            options["queue"], arguments={OFFSET: spec}, inactivity_timeout=wait_s
        )
        for n, delivered in enumerate(consumed, 1):
            if delivered[0] is None:
                return
            if n % (PREFETCH // 2) == 0 or n >= most:
                channel.basic_ack(delivered[0].delivery_tag, multiple=True)
            yield int((delivered[1].headers or {})[OFFSET]), delivered
            if n >= most:
                return
    except (px.AMQPConnectionError, px.AMQPChannelError) as e:
        raise Retryable(f"rabbitmq source: {where(options)}: {e!r}") from None
    finally:
        if conn.is_open:
            conn.close()


def _nothing(*_args, **_kwargs) -> None:
    pass


def between(options: dict[str, Any], start: int, end: int) -> Iterator[list]:
    """The messages at offsets start .. end - 1 (below an offset the driver has seen
    delivered), in pages of (offset, (method, properties, body))."""
    page: list = []
    for offset, delivered in deliveries(options, start, WAIT_S, None):
        if offset >= end:  # end - 1 holds no message (removed by the stream's retention)
            break
        if offset >= start:  # a consumer starts at the chunk that holds `start`
            page.append((offset, delivered))
        if len(page) >= PREFETCH or offset == end - 1:
            yield page
            page = []
        if offset == end - 1:
            return
    else:
        raise Retryable(
            f"rabbitmq source: stream queue '{options['queue']}' on {where(options)} delivered"
            f" nothing more before offset {end - 1} within {WAIT_S:.0f} s"
        )
    if page:
        yield page
