"""The `s3` connector: objects in an S3-compatible store as a source (and a sink)."""

from connectql.connectors.s3.plugin import PLUGIN, S3DataSource

__all__ = ["PLUGIN", "S3DataSource"]
