"""The `s3` connector: objects in an S3-compatible store as a source (and a sink), on the
connector toolkit."""

from connectql.connectors.s3.sink import S3Sink
from connectql.connectors.s3.source import S3Source
from connectql.toolkit import Connector

CONNECTOR = Connector(
    type="s3",
    doc="Objects in an S3-compatible store (AWS S3, SeaweedFS, MinIO): jsonl, csv, parquet or"
    " avro. The source reads objects in key order and resumes inside an object after a crash;"
    " the sink publishes a micro-batch's objects when it commits (exactly-once).",
    source=S3Source,
    sink=S3Sink,
)
