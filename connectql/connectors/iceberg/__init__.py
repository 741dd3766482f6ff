"""The `iceberg` connector: an Apache Iceberg table through pyiceberg and a SQL or REST catalog,
as a sink (each micro-batch one transaction whose snapshots record the batch: exactly-once,
appended or upserted by key) and a source (the table, then its appends by snapshot), on the
connector toolkit."""

from connectql.connectors.iceberg.sink import IcebergSink
from connectql.connectors.iceberg.source import IcebergSource
from connectql.toolkit import Connector

CONNECTOR = Connector(
    type="iceberg",
    doc="Apache Iceberg tables (pyiceberg, a SQL or REST catalog, files local or on S3; no Spark"
    " jar): the sink appends a"
    " stream's rows or upserts a change stream by its key, each micro-batch one transaction"
    " whose snapshots record the batch id (exactly-once); the source reads a table, then"
    " the rows each later snapshot appends, its offset the snapshot (exactly-once).",
    source=IcebergSource,
    sink=IcebergSink,
)
