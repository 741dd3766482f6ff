"""The kafka sink: each task of a micro-batch produces its rows in one Kafka transaction, under a
transactional.id made from the connector's writer and the task (a restarted task fences its
predecessor), and commits the batch id in the same transaction as the offset of a consumer
group of its own (`connectql.<writer>.<task>`, on partition 0 of the marker topic): a task of
a batch Spark replays finds its batch there and produces nothing, so each row is in Kafka once
(for readers with isolation.level = read_committed). With delivery = 'at-least-once' an
idempotent producer writes each task's rows and a replayed batch is written again.

A row of a change stream whose __op is 'd' becomes a tombstone (its key, a null value), as
compacted topics expect; with format = 'debezium' it is a delete event and then a tombstone, as
Debezium writes them."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from connectql.config import Option
from connectql.connectors.kafka.client import (
    CONNECTION,
    TIMEOUT_S,
    create_topic,
    failed,
    settings,
    topics,
    where,
)
from connectql.toolkit import OP, Retryable, Sink, ValidationError
from connectql.toolkit.jsontext import json_value
from connectql.toolkit.messages import (
    HEADERS,
    KEY,
    ValueFormat,
    check_destination,
    column_values,
    destinations,
    format_options,
    message_bytes,
)

SINK_OPTIONS = (
    *CONNECTION,
    Option("topic", doc="the topic to write to (or topic.column)"),
    Option("topic.column", doc="a column holding each row's topic (instead of topic)"),
    Option(
        "key",
        doc="the columns whose values make each message's key, as a JSON object (default: the"
        " stream's __key column when it has one, else the stream's key, e.g. the source"
        " table's primary key; none: no key)",
    ),
    *format_options("sink"),
    Option(
        "delivery",
        "enum",
        "exactly-once",
        choices=("exactly-once", "at-least-once"),
        doc="exactly-once: one transaction per task and batch, a replayed batch skipped;"
        " at-least-once: an idempotent producer, a replayed batch written again",
    ),
    Option(
        "auto.create",
        "bool",
        False,
        doc="create the topic (and the marker topic) when it does not exist",
    ),
    Option("topic.partitions", "int", 1, doc="partitions of a topic auto.create makes"),
    Option("topic.replication", "int", 1, doc="replication factor of a topic auto.create makes"),
    Option(
        "marker.topic",
        default="connectql_batches",
        doc="with topic.column and exactly-once: an existing topic (or one auto.create makes)"
        " on whose partition 0 each task's batch ids are committed as a consumer group's"
        " offset (with topic: that topic)",
    ),
)


class KafkaSink(Sink):
    options = SINK_OPTIONS
    delivery = "exactly-once"
    several = True  # streams = 'shop_*' with topic = 'shop.${table}': a topic per stream
    target_options = {"topic": ""}

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.format = ValueFormat.of(options, "kafka sink")

    def endpoint(self) -> str:
        return where(self.options)

    def check(self, schema: pa.Schema) -> None:
        check_destination(self.options, schema, "kafka sink", "topic")
        self.format.check_rows(schema, "kafka sink")
        missing = [c for c in self._key_columns(schema) if c not in schema.names]
        if missing:
            raise ValidationError(f"kafka sink: key names no column {', '.join(missing)}")
        wanted = [t for t in (self.options.get("topic"), self._marker()) if t]
        held = topics(self.options, "kafka sink")
        for topic in dict.fromkeys(wanted):
            if topic in held:
                continue
            if not self.options["auto.create"]:
                raise ValidationError(
                    f"kafka sink: no topic '{topic}' on {where(self.options)} (create it, or"
                    " set auto.create = true)"
                )
            create_topic(self.options, "kafka sink", topic, *self._shape(topic))

    def _shape(self, topic: str) -> tuple[int, int]:
        parts = 1 if topic == self._marker() and topic != self.options.get("topic") else None
        return parts or self.options["topic.partitions"], self.options["topic.replication"]

    def _marker(self) -> str | None:
        """The topic whose partition 0 holds the batch ids (None: at-least-once)."""
        if self.options["delivery"] != "exactly-once":
            return None
        return self.options.get("topic") or self.options["marker.topic"]

    def _key_columns(self, schema: pa.Schema) -> list[str]:
        if "key" in self.options:  # given ('' for no key)
            return [c.strip() for c in self.options["key"].split(",") if c.strip()]
        return [KEY] if KEY in schema.names else list(self.stream_key)

    def last_batch(self, writer: str) -> int | None:
        return None  # each task knows its own batches (stage_batches)

    def commit(self, writer: str, batch_id: int, staged: list[Any]) -> None:
        """Nothing: each task committed its own transaction."""

    def stage(self, writer: str, batch_id: int, task: int, data: pa.Table) -> int:
        if self._marker() is None:
            return self._produce(data, None)
        from confluent_kafka import KafkaException

        txn = f"connectql.{writer}.{task}"
        producer = self._producer(txn)
        group = _marker_group(self.options, txn)  # the task's batch ids, as its offsets
        try:
            if (_done(group, self._marker()) or -1) >= batch_id:
                return 0  # a replay: this task's rows are in Kafka already
            producer.begin_transaction()
            written = self._produce(data, producer)
            marker = _marker_offset(self._marker(), batch_id)
            metadata = group.consumer_group_metadata()
            producer.send_offsets_to_transaction([marker], metadata, TIMEOUT_S)
            producer.commit_transaction(TIMEOUT_S)
            return written
        except KafkaException as e:
            _abort(producer)
            raise failed("kafka sink", self.options, e) from None
        finally:
            group.close()

    def _producer(self, txn: str | None):
        from confluent_kafka import KafkaException, Producer

        extra = {"transactional.id": txn} if txn else {"enable.idempotence": True}
        producer = Producer(settings(self.options, **extra, **{"linger.ms": 5}))
        if txn:
            try:
                producer.init_transactions(TIMEOUT_S)  # fences an older one, aborts its open one
            except KafkaException as e:
                raise failed("kafka sink", self.options, e) from None
        return producer

    def _produce(self, data: pa.Table, producer) -> int:
        """Produce the rows (through `producer`, inside its transaction; None: an idempotent
        producer of its own, flushed) and wait until each is acknowledged."""
        producer = producer or self._producer(None)
        errors: list[str] = []

        def delivered(error, _message):
            if error is not None:
                errors.append(error.str())

        for topic, key, value, headers in self._messages(data):
            while True:
                try:
                    producer.produce(topic, value, key, headers=headers, on_delivery=delivered)
                    break
                except BufferError:  # the local queue is full: let it drain
                    producer.poll(0.1)
        left = producer.flush(TIMEOUT_S * 6)
        if errors or left:
            reason = errors[0] if errors else f"{left} messages not acknowledged in time"
            raise Retryable(f"kafka sink: {where(self.options)}: {reason}")
        return data.num_rows

    def _messages(self, data: pa.Table):
        values = self.format.encode(data)
        keys = self._keys(data)
        topics_ = destinations(self.options, "topic", data)
        headers = column_values(data, HEADERS)
        deletes = column_values(data, OP)
        events = self.format.name == "debezium"
        for i in range(data.num_rows):
            given = [(k, message_bytes(v)) for k, v in headers[i] or ()] or None
            if deletes[i] == "d" and events:  # Debezium's delete event, then its tombstone
                yield str(topics_[i]), keys[i], values[i], given
            yield str(topics_[i]), keys[i], None if deletes[i] == "d" else values[i], given

    def _keys(self, data: pa.Table) -> list[bytes | None]:
        columns = self._key_columns(data.schema)
        if not columns:
            return [None] * data.num_rows
        if columns == [KEY]:
            return [message_bytes(k) for k in column_values(data, KEY)]
        rows = data.select(columns).to_pylist()
        return [json.dumps(r, default=json_value, ensure_ascii=False).encode() for r in rows]

    def on_drop(self, connector: str) -> str | None:
        return None  # the marker groups are small; Kafka expires idle groups by itself


def _marker_group(options: dict[str, Any], group: str):
    """A consumer of a task's marker group: its committed offset is the task's last batch id,
    its metadata what the transaction commits the next one for."""
    from confluent_kafka import Consumer

    return Consumer(settings(options, **{"group.id": group, "isolation.level": "read_committed"}))


def _done(group, topic: str) -> int | None:
    """The last batch id committed for a task's marker group, or None."""
    from confluent_kafka import TopicPartition

    found = group.committed([TopicPartition(topic, 0)], timeout=TIMEOUT_S)[0]
    return found.offset - 1 if found.offset > 0 else None


def _marker_offset(topic: str, batch_id: int):
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, 0, batch_id + 1)  # 0 would read as no offset


def _abort(producer) -> None:
    from confluent_kafka import KafkaException

    try:
        producer.abort_transaction(TIMEOUT_S)
    except KafkaException:
        pass  # the next init_transactions of this id aborts it
