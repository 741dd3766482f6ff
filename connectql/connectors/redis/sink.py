"""The redis sink: each row XADDed to a stream as one entry, the whole micro-batch in one
MULTI/EXEC together with the batch id in the connector's progress hash, so that a batch Spark
replays after a crash is recognised there and adds nothing (exactly-once). The hash also holds
the lease epoch of the worker writing: a batch of an older worker is refused."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from connectql.connectors.redis.options import SINK_OPTIONS, Connected
from connectql.errors import PermanentError
from connectql.toolkit import Retryable, Sink
from connectql.toolkit.messages import (
    HEADERS,
    KEY,
    ValueFormat,
    check_destination,
    column_values,
    destinations,
    message_bytes,
)  # fmt: skip

PROGRESS = "connectql:progress:{connector}"  # hash: writer -> batch id, writer:epoch -> epoch


class RedisSink(Connected, Sink):
    options = SINK_OPTIONS
    delivery = "exactly-once"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.format = ValueFormat.of(options, "redis sink")

    def check(self, schema: pa.Schema) -> None:
        check_destination(self.options, schema, "redis sink", "key")
        self.format.check_rows(schema, "redis sink")
        self._call(self.client.ping)

    def open(self, writer: str, schema: pa.Schema) -> None:
        if self.epoch is None:
            return
        import redis

        with self.client.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(self._progress())
                    self._fence(pipe, writer)
                    pipe.multi()
                    pipe.hset(self._progress(), f"{writer}:epoch", self.epoch)
                    pipe.execute()
                    return
                except redis.WatchError:
                    continue

    def last_batch(self, writer: str) -> int | None:
        found = self._call(self.client.hget, self._progress(), writer)
        return None if found is None else int(found)

    def write(self, writer: str, batch_id: int, data: pa.Table) -> None:
        import redis

        entries = self._entries(data)
        with self.client.pipeline() as pipe:
            try:
                pipe.watch(self._progress())
                self._fence(pipe, writer)
                pipe.multi()
                maxlen = self.options.get("maxlen")
                for stream, fields in entries:
                    pipe.xadd(stream, fields, maxlen=maxlen, approximate=True)
                pipe.hset(self._progress(), writer, batch_id)
                pipe.execute()
            except redis.WatchError:  # another worker wrote the progress meanwhile
                raise Retryable("redis sink: the progress changed during the batch") from None
            except (redis.ConnectionError, redis.TimeoutError) as e:
                self._client = None
                raise Retryable(f"redis sink: cannot reach {self.endpoint()}: {e}") from None

    def _entries(self, data: pa.Table) -> list[tuple[str, dict[bytes, bytes]]]:
        """(stream key, fields) of each row, in order."""
        values = self.format.encode(data)
        n = data.num_rows
        streams = destinations(self.options, "key", data)
        keys, headers = column_values(data, KEY), column_values(data, HEADERS)
        value_field = self.options["value.field"].encode()
        key_field = self.options["key.field"].encode()
        out = []
        for i in range(n):
            if streams[i] is None:
                raise PermanentError(
                    f"redis sink: row {i} of the batch has no {self.options['key.column']}"
                )
            fields = {message_bytes(k): message_bytes(v) or b"" for k, v in headers[i] or ()}
            if keys[i] is not None:
                fields[key_field] = message_bytes(keys[i])
            fields[value_field] = values[i] if values[i] is not None else b""
            out.append((str(streams[i]), fields))
        return out

    def _fence(self, pipe, writer: str) -> None:
        held = pipe.hget(self._progress(), f"{writer}:epoch")
        if self.epoch is not None and held is not None and int(held) > self.epoch:
            raise PermanentError(
                f"redis sink: a newer worker (lease epoch {int(held)}) writes this connector;"
                f" this one (epoch {self.epoch}) stops"
            )

    def _progress(self) -> str:
        return PROGRESS.format(connector=self.connector)

    def on_drop(self, connector: str) -> str | None:
        removed = self._call(self.client.delete, PROGRESS.format(connector=connector))
        return (
            f"removed its progress hash {PROGRESS.format(connector=connector)}" if removed else None
        )

    def _call(self, method, *args):
        import redis

        try:
            return method(*args)
        except (redis.ConnectionError, redis.TimeoutError) as e:
            self._client = None
            raise Retryable(f"redis sink: cannot reach {self.endpoint()}: {e}") from None
