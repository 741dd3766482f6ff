"""The nats source: a JetStream subject read by stream sequence. An offset is the last stream
sequence read; a partition is the messages of the subject after one sequence up to another,
which an ordered consumer started at the first gives the same every time (unless the stream's
limits removed some meanwhile): each message enters the connectql stream exactly once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from connectql.config import Option
from connectql.connectors.nats.client import CONNECTION, call, where
from connectql.toolkit import Source, ValidationError
from connectql.toolkit.messages import (
    HEADERS,
    INFER_MESSAGES,
    POSITION,
    TIMESTAMP,
    TOPIC,
    ValueFormat,
    format_options,
    message_rows,
)

PAGE = 10_000  # messages per consumer
FETCH = 1_000  # messages per pull
WAIT_S = 5.0  # the longest wait for a message a consumer has said is pending

SOURCE_OPTIONS = (
    *CONNECTION,
    Option(
        "subject",
        required=True,
        doc="the subject to read (wildcards * and > allowed); a JetStream stream must hold it",
    ),
    Option(
        "start",
        "enum",
        "earliest",
        choices=("earliest", "latest"),
        doc="where a new connector starts: the stream's first message, or only messages"
        " published after CREATE",
    ),
    *format_options("source"),
    Option(
        "poll.interval.ms",
        "int",
        200,
        doc="when a look found no new message, wait this long before looking again",
    ),
)


class NatsSource(Source):
    """latest_offset asks the stream's last sequence; read runs ordered consumers over one
    partition's range, a page at a time."""

    options = SOURCE_OPTIONS
    lag_field = "seq"  # stream sequences (messages of the stream's other subjects count too)

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.subject = options["subject"]
        self.format = ValueFormat.of(options, "nats source")
        self._stream: str | None = None
        self._idle_until = 0.0

    def endpoint(self) -> str:
        return where(self.options)

    async def _stream_of(self, nc) -> str:
        """The JetStream stream that holds the subject (looked up once per process)."""
        from nats.js.errors import NotFoundError

        if self._stream is not None:
            return self._stream
        try:
            self._stream = await nc.jetstream().find_stream_name_by_subject(self.subject)
            return self._stream
        except NotFoundError:
            raise ValidationError(
                f"nats source: no JetStream stream holds subject '{self.subject}' (add one, e.g."
                f" `nats stream add --subjects '{self.subject}'`)"
            ) from None

    def check(self) -> None:
        self._call(self._stream_of)  # found, or the error names the subject

    def schema(self) -> str:
        if self.format.row_ddl() is None:
            first = self._state()[0] - 1
            sample = [m.data for m in self._call(self._fetch, first, None, INFER_MESSAGES)]
        else:
            sample = []
        return self.format.row_ddl_of(
            sample, "nats source", f"{len(sample)} messages of '{self.subject}'"
        )

    # ----------------------------------------------------------------- offsets (driver)
    def initial_offset(self) -> dict:
        first, last = self._state()
        return {"seq": last if self.options["start"] == "latest" else max(first - 1, 0)}

    def latest_offset(self, start: dict) -> dict:
        if time.monotonic() < self._idle_until:
            return start
        latest = {"seq": max(self._state()[1], start["seq"])}
        if latest == start:
            self._idle_until = time.monotonic() + self.options["poll.interval.ms"] / 1000
        return latest

    def end_offset(self, start: dict, latest: dict, max_records: int) -> dict:
        return {"seq": min(latest["seq"], start["seq"] + max_records)}

    def partitions(self, start: dict, end: dict) -> list[Any]:
        tasks = max(1, int(self.options.get("tasks.max") or 1))
        after, to = start["seq"], end["seq"]
        step = max(1, -(-(to - after) // tasks))
        return [{"after": a, "to": min(a + step, to)} for a in range(after, to, step)]

    def _state(self) -> tuple[int, int]:
        """(first, last) sequence of the stream."""

        async def state(nc):
            info = await nc.jetstream().stream_info(await self._stream_of(nc))
            return info.state.first_seq, info.state.last_seq

        return self._call(state)

    # ----------------------------------------------------------------- reading (executor)
    def read(self, partition: dict) -> Iterator[Any]:
        after, to = partition["after"], partition["to"]
        fmt = self.format.reading(self.stream_schemas.get(None))
        while after < to:
            page = self._call(self._fetch, after, to, PAGE)
            if not page:
                return
            yield from self._rows(page, fmt)
            after = page[-1].metadata.sequence.stream
            if len(page) < PAGE:
                return

    async def _fetch(self, nc, after: int, to: int | None, most: int) -> list:
        """Up to `most` messages of the subject after sequence `after` (up to `to`), through an
        ephemeral pull consumer: its pending count, taken before anything is delivered, says
        how many there are."""
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=after + 1,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=60.0,
        )
        sub = await nc.jetstream().pull_subscribe(
            self.subject, stream=await self._stream_of(nc), config=config
        )
        info = await sub.consumer_info()
        try:
            left = min(info.num_pending, most)
            found = []
            while left > 0:
                for msg in await sub.fetch(min(left, FETCH), timeout=WAIT_S):
                    if to is not None and msg.metadata.sequence.stream > to:
                        return found
                    found.append(msg)
                    left -= 1
            return found
        finally:
            await sub.unsubscribe()
            await nc.jsm().delete_consumer(info.stream_name, info.name)

    def _rows(self, page: list, fmt: ValueFormat) -> Iterator[Any]:
        def seq(i: int) -> int:
            return page[i].metadata.sequence.stream

        yield from message_rows(
            fmt,
            [m.data for m in page],
            where=lambda i: {"subject": page[i].subject, "seq": seq(i)},
            meta=lambda kept: {
                HEADERS: [
                    sorted(page[i].headers.items()) if page[i].headers else None for i in kept
                ],
                TOPIC: [page[i].subject for i in kept],
                POSITION: [str(seq(i)) for i in kept],
                TIMESTAMP: [page[i].metadata.timestamp for i in kept],
            },
            positions=[f"{seq(i):020d}" for i in range(len(page))],
        )

    def _call(self, body, *args):
        return call(self.options, "nats source", lambda nc: body(nc, *args))
