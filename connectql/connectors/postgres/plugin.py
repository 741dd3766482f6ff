"""The `postgres` plugin: its source (a toolkit TableSource) and sink."""

from __future__ import annotations

from connectql.connectors.postgres.sink import PostgresSink
from connectql.connectors.postgres.source import PostgresSource
from connectql.connectors.relational import plugin as shared

PLUGIN = shared.table_plugin(
    PostgresSource,
    PostgresSink,
    type="postgres",
    doc="PostgreSQL tables: change-data capture (snapshot + logical decoding), incremental or"
    " bulk sources; exactly-once append or upsert sink",
)
