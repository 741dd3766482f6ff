"""The nats source: a JetStream subject read by stream sequence. An offset is the last stream
sequence read; a partition is the messages of the subject after one sequence up to another,
which an ordered consumer started at the first gives the same every time (unless the stream's
limits removed some meanwhile): each message enters the connectql stream exactly once.

With mode = 'core', a core NATS subject (no JetStream) is subscribed to and spooled (core.py):
offsets are spool positions, `{"n": 120}`, and what is published while no subscription is there
is lost: at-most-once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from connectql.config import Option
from connectql.connectors.nats import core
from connectql.connectors.nats.client import CONNECTION, MODES, call, reachable, where
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
from connectql.toolkit.spool import SpooledSource, Spooler

PAGE = 10_000  # messages per consumer
FETCH = 1_000  # messages per pull
WAIT_S = 5.0  # the longest wait for a message a consumer has said is pending

SOURCE_OPTIONS = (
    *CONNECTION,
    Option(
        "subject",
        required=True,
        doc="the subject to read (wildcards * and > allowed); with mode = 'jetstream' a"
        " JetStream stream must hold it",
    ),
    Option(
        "mode",
        "enum",
        "jetstream",
        choices=MODES,
        doc="jetstream: read the subject from the JetStream stream that holds it, by sequence"
        " (exactly-once into the stream); core: subscribe to a core NATS subject, no JetStream,"
        " and spool what arrives: at-most-once (what is published while the connector is not"
        " subscribed, paused, stopped or restarting, is lost)",
    ),
    Option(
        "start",
        "enum",
        "earliest",
        choices=("earliest", "latest"),
        doc="mode = 'jetstream': where a new connector starts: the stream's first message, or"
        " only messages published after CREATE (core: always at the subscription)",
    ),
    *format_options("source"),
    Option(
        "poll.interval.ms",
        "int",
        200,
        doc="when a look found no new message, wait this long before looking again",
    ),
)


class NatsSource(SpooledSource, Source):
    """latest_offset asks the stream's last sequence; read runs ordered consumers over one
    partition's range, a page at a time. mode = 'core': a subscription and a spooler in the
    driver's source process, a spool under the checkpoint."""

    options = SOURCE_OPTIONS
    lag_field = "seq"  # stream sequences (messages of the stream's other subjects count too)
    spool_folder = "nats-spool"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.subject = options["subject"]
        self.format = ValueFormat.of(options, "nats source")
        self.core = options.get("mode") == "core"
        if self.core:
            self.lag_field = "n"  # messages spooled and not yet read
            if self.format.name == "json" and self.format.schema is None:
                raise ValidationError(
                    "nats source: mode = 'core' with format = 'json' needs schema = '...' (core"
                    " NATS keeps no messages to infer it from)"
                )
        self._stream: str | None = None
        self._idle_until = 0.0
        self._spooler: Spooler | None = None
        self._subscription: core.Subscription | None = None

    def __getstate__(self):  # what goes to Spark's workers: no subscription, no thread
        return {**self.__dict__, "_spooler": None, "_subscription": None}

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
                f" `nats stream add --subjects '{self.subject}'`, or read it at most once with"
                " mode = 'core')"
            ) from None

    def check(self) -> None:
        if self.core:
            self._call(reachable)  # reachable, the credentials taken
        else:
            self._call(self._stream_of)  # found, or the error names the subject

    def available_now(self) -> None:
        if self.core:
            raise ValidationError(
                "nats source: mode = 'core' has nothing to read once (core NATS delivers a"
                " message only to the subscribers connected when it is published): run it"
                " continuously, or put the subject in a JetStream stream"
            )

    def schema(self) -> str:
        if not self.core and self.format.row_ddl() is None:
            first = self._state()[0] - 1
            sample = [m.data for m in self._call(self._fetch, first, None, INFER_MESSAGES)]
        else:
            sample = []
        return self.format.row_ddl_of(
            sample, "nats source", f"{len(sample)} messages of '{self.subject}'"
        )

    # ----------------------------------------------------------------- offsets (driver)
    def initial_offset(self) -> dict:
        if self.core:
            return super().initial_offset()
        first, last = self._state()
        return {"seq": last if self.options["start"] == "latest" else max(first - 1, 0)}

    def latest_offset(self, start: dict) -> dict:
        field = "n" if self.core else "seq"
        if field not in start:
            raise ValidationError(
                f"nats source: mode = '{self.options['mode']}', and the checkpoint holds"
                f" {'stream sequences' if self.core else 'spool positions'}: RESET CONNECTOR ..."
                " OFFSETS (paused) to start it afresh"
            )
        if time.monotonic() < self._idle_until:
            return start
        latest = self._spooled_latest(start) if self.core else self._stream_latest(start)
        if latest == start:
            self._idle_until = time.monotonic() + self.options["poll.interval.ms"] / 1000
        return latest

    def _stream_latest(self, start: dict) -> dict:
        return {"seq": max(self._state()[1], start["seq"])}

    def _spooled_latest(self, start: dict) -> dict:
        """The spool's end, the subscription made first (once per driver process)."""
        if self._spooler is None:
            self._spooler = Spooler(self, core.spooled, name="nats-spool")
            self._subscription = core.Subscription(self.options, self.subject, self._spooler)
            self._spooler.start()
            self._subscription.start()
        self._spooler.check()
        return self.spooled_offset(start)

    def end_offset(self, start: dict, latest: dict, max_records: int) -> dict:
        if self.core:
            return super().end_offset(start, latest, max_records)
        return {"seq": min(latest["seq"], start["seq"] + max_records)}

    def partitions(self, start: dict, end: dict) -> list[Any]:
        if self.core:
            return super().partitions(start, end)
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
    def commit(self, end: dict) -> None:
        if self.core:  # the spool's segments read into the stream go
            super().commit(end)

    def close(self) -> None:
        if self._spooler is not None:
            self._subscription.stop()  # what the server sent is handed over, then spooled
            self._spooler.stop()
            self._spooler = self._subscription = None

    def read(self, partition: dict) -> Iterator[Any]:
        if self.core:
            yield from super().read(partition)
            return
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
