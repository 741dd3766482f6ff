"""The `postgres` connector: PostgreSQL tables as sources (snapshot, change-data capture,
incremental polling) and as exactly-once append/upsert sinks."""

from connectql.connectors.postgres.plugin import PLUGIN

__all__ = ["PLUGIN"]
