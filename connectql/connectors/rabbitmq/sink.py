"""The rabbitmq sink: each row published as one persistent message to `exchange` with its
routing key, on a channel in confirm mode, so the batch commits only once the broker has taken
every message; a batch Spark replays after a crash is published again (at-least-once), each
message with the same message_id (the toolkit's row ids) for consumers to de-duplicate."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from connectql.config import Option
from connectql.connectors.rabbitmq.client import CONNECTION, connect, where
from connectql.toolkit import Retryable, Sink
from connectql.toolkit.messages import (
    HEADERS,
    ValueFormat,
    check_destination,
    column_values,
    destinations,
    format_options,
)  # fmt: skip
from connectql.toolkit.sink import row_ids

SINK_OPTIONS = (
    *CONNECTION,
    Option("exchange", default="", doc="the exchange to publish to ('': the default exchange)"),
    Option("routing.key", doc="the routing key (the queue's name on the default exchange)"),
    Option("routing.key.column", doc="a column holding each row's routing key"),
    *format_options("sink"),
)


class RabbitSink(Sink):
    options = SINK_OPTIONS
    delivery = "at-least-once"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.format = ValueFormat.of(options, "rabbitmq sink")

    def endpoint(self) -> str:
        return where(self.options)

    def check(self, schema: pa.Schema) -> None:
        check_destination(self.options, schema, "rabbitmq sink", "routing.key")
        self.format.check_rows(schema, "rabbitmq sink")
        conn = connect(self.options, "rabbitmq sink")
        conn.close()

    def last_batch(self, writer: str) -> int | None:
        return None

    def write(self, writer: str, batch_id: int, data: pa.Table) -> None:
        import pika
        import pika.exceptions as px

        values = self.format.encode(data)
        n = data.num_rows
        keys = destinations(self.options, "routing.key", data)
        headers = column_values(data, HEADERS)
        conn = connect(self.options, "rabbitmq sink")
        try:
            channel = conn.channel()
            channel.confirm_delivery()
            for i, message_id in enumerate(row_ids(writer, batch_id, n)):
                props = pika.BasicProperties(
                    delivery_mode=2, message_id=message_id, headers=dict(headers[i] or ()) or None
                )
                channel.basic_publish(
                    self.options["exchange"], str(keys[i]), values[i] or b"", props
                )
        except (px.AMQPConnectionError, px.NackError) as e:
            raise Retryable(f"rabbitmq sink: {self.endpoint()}: {e!r}") from None
        finally:
            if conn.is_open:
                conn.close()
