"""The `iceberg` connector: an Apache Iceberg table as a sink through pyiceberg and a SQL
catalog, each micro-batch one transaction whose snapshots record the batch (exactly-once),
appended or upserted by key, on the connector toolkit."""

from connectql.connectors.iceberg.sink import IcebergSink
from connectql.toolkit import Connector

CONNECTOR = Connector(
    type="iceberg",
    doc="Apache Iceberg tables (pyiceberg, a SQL or REST catalog, files local or on S3; no Spark"
    " jar): the sink appends a"
    " stream's rows or upserts a change stream by its key, each micro-batch one transaction"
    " whose snapshots record the batch id (exactly-once).",
    sink=IcebergSink,
)
