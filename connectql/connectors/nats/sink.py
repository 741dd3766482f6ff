"""The nats sink: each row published to JetStream as one message with a Nats-Msg-Id made from
the writer, the batch and the row (toolkit row_ids), each publish acknowledged by the server,
then the batch id put in the key-value bucket `connectql_progress`. A batch Spark replays after
a crash is skipped when the bucket has it; one that crashed between its publishes and that put
is published again and the server drops the messages it already has, within the stream's
duplicate window (two minutes by default).

With mode = 'core' the rows are published as plain core NATS messages (with the same
Nats-Msg-Id header, for subscribers to drop a replayed batch's repeats), flushed to the server
before the batch commits, and no progress is kept (core NATS has no bucket): the server hands
each message to the subscribers connected then and keeps nothing, at-most-once."""

from __future__ import annotations

import asyncio
from typing import Any

import pyarrow as pa

from connectql.config import Option
from connectql.connectors.nats.client import CONNECT_S, CONNECTION, MODES, call, reachable, where
from connectql.toolkit import Sink, ValidationError
from connectql.toolkit.messages import (
    HEADERS,
    ValueFormat,
    check_destination,
    column_values,
    destinations,
    format_options,
)  # fmt: skip
from connectql.toolkit.sink import row_ids

BUCKET = "connectql_progress"  # key '<connector>.<writer>': the last batch id written
IN_FLIGHT = 2_000  # publishes awaiting their acknowledgement at once
SINK_OPTIONS = (
    *CONNECTION,
    Option("subject", doc="the subject to publish to (or subject.column)"),
    Option("subject.column", doc="a column holding each row's subject (instead of subject)"),
    Option(
        "mode",
        "enum",
        "jetstream",
        choices=MODES,
        doc="jetstream: publish to a JetStream stream's subject, each message acknowledged and"
        " de-duplicated by its Nats-Msg-Id (idempotent); core: plain core NATS messages, no"
        " JetStream: at-most-once (only the subscribers connected then receive them; a batch"
        " replayed after a crash is published again)",
    ),
    *format_options("sink"),
)


class NatsSink(Sink):
    options = SINK_OPTIONS
    delivery = "idempotent"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.format = ValueFormat.of(options, "nats sink")
        self.core = options.get("mode") == "core"

    def endpoint(self) -> str:
        return where(self.options)

    def check(self, schema: pa.Schema) -> None:
        check_destination(self.options, schema, "nats sink", "subject")
        self.format.check_rows(schema, "nats sink")
        if self.core:
            self._call(reachable)  # reachable, the credentials taken
        elif self.options.get("subject"):
            self._call(self._held, self.options["subject"])

    async def _held(self, nc, subject: str) -> str:
        from nats.js.errors import NotFoundError

        try:
            return await nc.jetstream().find_stream_name_by_subject(subject)
        except NotFoundError:
            raise ValidationError(
                f"nats sink: no JetStream stream holds subject '{subject}' (add one, e.g."
                f" `nats stream add --subjects '{subject}'`, or publish at most once with"
                " mode = 'core')"
            ) from None

    def last_batch(self, writer: str) -> int | None:
        if self.core:
            return None  # nothing kept: a replayed batch is published again

        async def get(nc):
            from nats.js.errors import KeyNotFoundError

            kv = await _bucket(nc)
            try:
                entry = await kv.get(self._progress_key(writer))
            except KeyNotFoundError:
                return None
            return int(entry.value) if entry.value else None

        return self._call(get)

    def write(self, writer: str, batch_id: int, data: pa.Table) -> None:
        messages = self._messages(writer, batch_id, data)

        async def publish_core(nc):
            for subject, value, headers in messages:
                await nc.publish(subject, value, headers=headers)
            await nc.flush(CONNECT_S)  # the server has them all

        async def publish(nc):
            js = nc.jetstream()
            for at in range(0, len(messages), IN_FLIGHT):
                acks = [
                    js.publish(subject, value, headers=headers)
                    for subject, value, headers in messages[at : at + IN_FLIGHT]
                ]
                await asyncio.gather(*acks)
            kv = await _bucket(nc)
            await kv.put(self._progress_key(writer), str(batch_id).encode())

        self._call(publish_core if self.core else publish)

    def _messages(self, writer, batch_id, data: pa.Table) -> list[tuple[str, bytes, dict]]:
        values = self.format.encode(data)
        subjects = destinations(self.options, "subject", data)
        headers = column_values(data, HEADERS)
        out = []
        for i, msg_id in enumerate(row_ids(writer, batch_id, data.num_rows)):
            given = {k: v for k, v in headers[i] or () if v is not None}
            out.append((str(subjects[i]), values[i] or b"", {**given, "Nats-Msg-Id": msg_id}))
        return out

    def _progress_key(self, writer: str) -> str:
        return f"{self.connector or 'test'}.{writer}"

    def on_drop(self, connector: str) -> str | None:
        if self.core:
            return None

        async def purge(nc):
            kv = await _bucket(nc)
            removed = 0
            for key in await _keys(kv):
                if key.startswith(f"{connector}."):
                    await kv.purge(key)
                    removed += 1
            return removed

        removed = self._call(purge)
        return f"removed its progress from the bucket {BUCKET}" if removed else None

    def _call(self, body, *args):
        return call(self.options, "nats sink", lambda nc: body(nc, *args))


async def _bucket(nc):
    js = nc.jetstream()
    try:
        return await js.key_value(BUCKET)
    except Exception:  # nats-py raises BucketNotFoundError, or NotFoundError by version
        return await js.create_key_value(bucket=BUCKET)


async def _keys(kv) -> list[str]:
    from nats.js.errors import NoKeysError

    try:
        return await kv.keys()
    except NoKeysError:
        return []
