"""The `mysql` connector (alias `mariadb`): MySQL/MariaDB tables as sources (snapshot and binlog
change-data capture, incremental polling) and as exactly-once append/upsert sinks."""

from connectql.connectors.mysql.plugin import PLUGIN

__all__ = ["PLUGIN"]
