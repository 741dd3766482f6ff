"""The mqtt sink: each row published as one message to `topic` (or its `topic.column`) with the
QoS and retain flag given; the batch commits once the broker has acknowledged every publish, so
a batch is never lost, and one Spark replays after a crash is published again (at-least-once)."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa

from connectql.config import Option
from connectql.connectors.mqtt.client import CONNECTION, connected, where
from connectql.toolkit import Retryable, Sink, ValidationError
from connectql.toolkit.messages import (
    ValueFormat,
    check_destination,
    destinations,
    format_options,
)  # fmt: skip

ACK_S = 60.0  # the longest wait for the broker to acknowledge a batch's publishes
SINK_OPTIONS = (
    *CONNECTION,
    Option("topic", doc="the topic to publish to (or topic.column)"),
    Option("topic.column", doc="a column holding each row's topic (instead of topic)"),
    Option("retain", "bool", False, doc="publish with the retain flag"),
    *format_options("sink"),
)


class MqttSink(Sink):
    options = SINK_OPTIONS
    delivery = "at-least-once"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        if options.get("qos") not in (0, 1, 2):
            raise ValidationError(f"mqtt sink: qos must be 0, 1 or 2, not {options.get('qos')}")
        self.format = ValueFormat.of(options, "mqtt sink")

    def endpoint(self) -> str:
        return where(self.options)

    def check(self, schema: pa.Schema) -> None:
        check_destination(self.options, schema, "mqtt sink", "topic")
        self.format.check_rows(schema, "mqtt sink")
        connected(self.options, "", "mqtt sink").disconnect()

    def last_batch(self, writer: str) -> int | None:
        return None

    def write(self, writer: str, batch_id: int, data: pa.Table) -> None:
        values = self.format.encode(data)
        topics = destinations(self.options, "topic", data)
        client = connected(self.options, f"connectql-{uuid.uuid4().hex[:12]}", "mqtt sink")
        try:
            sent = [
                client.publish(str(t), v, self.options["qos"], self.options["retain"])
                for t, v in zip(topics, values, strict=True)
            ]
            for info in sent:
                info.wait_for_publish(ACK_S)
                if not info.is_published():
                    raise Retryable(f"mqtt sink: {self.endpoint()} did not acknowledge a publish")
        finally:
            client.disconnect()
            client.loop_stop()
