"""The `delta` connector: a Delta Lake table through delta-rs (`deltalake`), as a sink (each
micro-batch one commit carrying Delta's application transaction: exactly-once, appended or
merged by key) and a source (the table, then its appends by version, or its change data feed),
on the connector toolkit."""

from connectql.connectors.delta.sink import DeltaSink
from connectql.connectors.delta.source import DeltaSource
from connectql.toolkit import Connector

CONNECTOR = Connector(
    type="delta",
    doc="Delta Lake tables (delta-rs, no Spark jar): the sink appends a stream's rows or merges a"
    " change stream by its key, each micro-batch one Delta commit that records the batch as an"
    " application transaction (exactly-once); the source reads a table, then the rows each"
    " later version appends, or its change data feed as a change stream (change.feed), its"
    " offset the version (exactly-once).",
    source=DeltaSource,
    sink=DeltaSink,
)
