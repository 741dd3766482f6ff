"""The `rabbitmq` connector: a queue as a source (a classic or quorum queue consumed with manual
acknowledgements, each message spooled under the checkpoint before it is acknowledged:
at-least-once; a stream queue read by offset from the checkpoint: exactly-once) and a sink
(persistent messages published with confirms, each with a message_id from the batch and row),
on the connector toolkit."""

from connectql.connectors.rabbitmq.sink import RabbitSink
from connectql.connectors.rabbitmq.source import RabbitSource
from connectql.toolkit import Connector

CONNECTOR = Connector(
    type="rabbitmq",
    doc="RabbitMQ (AMQP 0-9-1): the source consumes a classic or quorum queue and spools each"
    " message under its checkpoint before acknowledging it (at-least-once, no loss across"
    " kill -9), and reads a stream queue (x-queue-type = stream) by offset from its checkpoint"
    " (exactly-once, from stream.offset); the sink publishes persistent messages with publisher confirms (at-least-once,"
    " a message_id per row for consumers to de-duplicate).",
    source=RabbitSource,
    sink=RabbitSink,
)
