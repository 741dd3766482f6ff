"""The `kafka` connector: Kafka-protocol brokers as a source (topic-partitions read by the
checkpointed offsets, exactly-once into the stream) and a sink (a transaction per task and
batch with the batch id committed in it, or an idempotent producer), on the connector toolkit."""

from connectql.connectors.kafka.sink import KafkaSink
from connectql.connectors.kafka.source import KafkaSource
from connectql.toolkit import Connector

CONNECTOR = Connector(
    type="kafka",
    doc="Kafka (and Kafka-protocol brokers): the source reads topics by the checkpointed"
    " offset of each partition (exactly-once into the stream; topics and partitions found"
    " while running); the sink writes each task's rows of a batch in one transaction that"
    " also records the batch (exactly-once for read_committed readers), or at-least-once.",
    source=KafkaSource,
    sink=KafkaSink,
)
