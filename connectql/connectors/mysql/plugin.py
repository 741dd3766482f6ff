"""The `mysql` plugin (alias `mariadb`): its source (a toolkit TableSource) and sink."""

from __future__ import annotations

from connectql.connectors.mysql.sink import MysqlSink
from connectql.connectors.mysql.source import MysqlSource
from connectql.connectors.relational import plugin as shared

PLUGIN = shared.table_plugin(
    MysqlSource,
    MysqlSink,
    type="mysql",
    doc="MySQL/MariaDB tables: change-data capture (snapshot + binary log), incremental or bulk"
    " sources; exactly-once append or upsert sink",
    aliases=("mariadb",),
)
