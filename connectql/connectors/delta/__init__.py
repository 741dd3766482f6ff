"""The `delta` connector: a Delta Lake table as a sink through delta-rs (`deltalake`), each
micro-batch one commit carrying Delta's application transaction (exactly-once), appended or
merged by key, on the connector toolkit."""

from connectql.connectors.delta.sink import DeltaSink
from connectql.toolkit import Connector

CONNECTOR = Connector(
    type="delta",
    doc="Delta Lake tables (delta-rs, no Spark jar): the sink appends a stream's rows or merges a"
    " change stream by its key, each micro-batch one Delta commit that records the batch as an"
    " application transaction (exactly-once).",
    sink=DeltaSink,
)
