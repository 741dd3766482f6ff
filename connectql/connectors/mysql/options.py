"""The `mysql` connector's options, source and sink."""

from __future__ import annotations

from connectql.connectors.mysql.client import connection_config, split_table
from connectql.connectors.options import Option
from connectql.connectors.relational import plugin as shared

CONNECTION = shared.connection_options(
    3306,
    Option("user", default="root", doc="user to connect as"),
    shared.password_option("user"),
    Option("database", required=True, doc="database (schema) of the table(s)"),
)


# what its source and sink share: their name, where a table is, the connection settings
MysqlTables = shared.tables("mysql", ("database", split_table), connection_config)

SINK_OPTIONS = shared.sink_option_set(CONNECTION, "database.name")

SOURCE_OPTIONS = shared.source_option_set(
    CONNECTION,
    "binary log",
    "cdc: move the offset past other tables' transactions this often while the captured table"
    " is quiet, so later looks ahead start further on",
    Option(
        "server.id",
        "int",
        doc="cdc: the id the binlog client registers with (unique among the server's"
        " replicas); default: derived from the connector's name",
    ),
)
