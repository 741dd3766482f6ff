"""The `mysql` plugin (alias `mariadb`): its source (a toolkit TableSource) and sink."""

from __future__ import annotations

from connectql.connectors.mysql.datasource import FORMAT
from connectql.connectors.mysql.options import SINK_OPTIONS
from connectql.connectors.mysql.source import MysqlSource
from connectql.connectors.relational import plugin as shared

PLUGIN = shared.table_plugin(
    MysqlSource,
    FORMAT,
    "connectql.connectors.mysql.sink",
    type="mysql",
    doc="MySQL/MariaDB tables: change-data capture (snapshot + binary log), incremental or bulk"
    " sources; exactly-once append or upsert sink",
    sink_options=SINK_OPTIONS,
    aliases=("mariadb",),
)
