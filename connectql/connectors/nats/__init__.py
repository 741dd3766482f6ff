"""The `nats` connector: NATS JetStream as a source (an ordered consumer from the checkpointed
stream sequence, exactly-once into the stream) and a sink (publishes with a Nats-Msg-Id the
server de-duplicates, and the batch recorded in a key-value bucket), on the connector toolkit;
with mode = 'core', plain core NATS subjects without JetStream, at-most-once both ways (core.py)."""

from connectql.connectors.nats.sink import NatsSink
from connectql.connectors.nats.source import NatsSource
from connectql.toolkit import Connector

CONNECTOR = Connector(
    type="nats",
    doc="NATS JetStream: the source reads a subject's messages from the checkpointed stream"
    " sequence (exactly-once into the stream); the sink publishes each row with a message id"
    " the server de-duplicates and records each batch (idempotent: exactly-once unless a batch"
    " is replayed after the stream's duplicate window); mode = 'core' reads and publishes core"
    " NATS subjects without JetStream, at-most-once: the source spools what its subscription"
    " receives, and loses what is published while it is not subscribed.",
    source=NatsSource,
    sink=NatsSink,
)
