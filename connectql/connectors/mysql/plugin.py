"""The `mysql` plugin (alias `mariadb`): its options and how they become Spark reader and writer
specs."""

from __future__ import annotations

from typing import Any

from connectql.connectors.base import ReaderSpec
from connectql.connectors.mysql.client import connection_config, split_table
from connectql.connectors.mysql.datasource import FORMAT
from connectql.connectors.options import Option
from connectql.connectors.relational import plugin as shared
from connectql.errors import PlanError

CONNECTION = shared.connection_options(
    3306,
    Option("user", default="root", doc="user to connect as"),
    shared.password_option("user"),
    Option("database", required=True, doc="database (schema) of the table(s)"),
)
# the option naming the tables' container, and how a qualified table name splits
PLACE = ("database", split_table)

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


def plan_source(opts: dict[str, Any]) -> ReaderSpec:
    from connectql.connectors.mysql.discovery import count, discover

    def config(**fields):
        from connectql.connectors.mysql.source import ReaderConfig

        server_id = opts.get("server.id") or 0
        if server_id < 0:
            raise PlanError("mysql source: server.id must be a positive number")
        return ReaderConfig(connection=connection_config(opts), server_id=server_id, **fields)

    return shared.plan_table_source(opts, FORMAT, PLACE, config, discover, count)


PLUGIN = shared.table_plugin(
    FORMAT,
    PLACE,
    connection_config,
    "connectql.connectors.mysql.sink",
    type="mysql",
    doc="MySQL/MariaDB tables: change-data capture (snapshot + binary log), incremental or bulk"
    " sources; exactly-once append or upsert sink",
    source_options=SOURCE_OPTIONS,
    plan_source=plan_source,
    sink_options=SINK_OPTIONS,
    aliases=("mariadb",),
)
