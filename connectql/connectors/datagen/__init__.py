"""The `datagen` source: generated rows as Arrow record batches (like Flink's or Kafka Connect's
datagen), on the connector toolkit; every value of row k is a pure function of (seed, k,
column), so replays are identical."""

from connectql.connectors.datagen.fields import Field, parse_fields, schema_ddl
from connectql.connectors.datagen.generate import BLOCK
from connectql.connectors.datagen.source import OPTIONS, DatagenSource, read_settings
from connectql.toolkit import Connector

CONNECTOR = Connector(
    type="datagen",
    doc="Generated rows (like Flink's datagen): a sequence plus random, choice and time columns;"
    " deterministic per seed, so a replayed micro-batch is identical.",
    source=DatagenSource,
)

__all__ = [
    "BLOCK",
    "CONNECTOR",
    "OPTIONS",
    "DatagenSource",
    "Field",
    "parse_fields",
    "read_settings",
    "schema_ddl",
]
