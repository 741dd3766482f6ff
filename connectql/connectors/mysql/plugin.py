"""The `mysql` plugin (alias `mariadb`): its options and how they become Spark reader and writer
specs."""

from __future__ import annotations

from typing import Any

from connectql.connectors.base import Plugin, ReaderSpec, WriterSpec
from connectql.connectors.bounds import BOUND_OPTIONS
from connectql.connectors.common import SINK_COMMON, SOURCE_COMMON
from connectql.connectors.dbsink import sink_options, writer_spec
from connectql.connectors.dbsource import (
    check_source_options,
    config_fields,
    reader_spec,
    source_options,
    table_place,
)
from connectql.connectors.mysql.client import connection_config, split_table
from connectql.connectors.mysql.datasource import FORMAT
from connectql.connectors.options import Option
from connectql.errors import PlanError

CONNECTION = {
    o.name: o
    for o in [
        Option("host", default="localhost", doc="server host name or address"),
        Option("port", "int", 3306, doc="server port"),
        Option("user", default="root", doc="user to connect as"),
        Option("password", secret=True, doc="the user's password (use SECRET name or ${env:..})"),
        Option("database", required=True, doc="database (schema) of the table(s)"),
    ]
} | BOUND_OPTIONS

SINK_OPTIONS = {**SINK_COMMON, **CONNECTION, **sink_options("database.name")}


SOURCE_OPTIONS = {
    **SOURCE_COMMON,
    **CONNECTION,
    **source_options("binary log"),
    **{
        o.name: o
        for o in [
            Option(
                "server.id",
                "int",
                doc="cdc: the id the binlog client registers with (unique among the server's"
                " replicas); default: derived from the connector's name",
            ),
            Option(
                "heartbeat.interval.ms",
                "int",
                30000,
                doc="cdc: move the offset past other tables' transactions this often while the"
                " captured table is quiet, so later looks ahead start further on",
            ),
        ]
    },
}


def plan_source(opts: dict[str, Any]) -> ReaderSpec:
    from connectql.connectors.mysql.discovery import discover
    from connectql.connectors.mysql.source import ReaderConfig

    where = "mysql source"
    check_source_options(opts, where)
    cfg = ReaderConfig(
        connection=connection_config(opts),
        **table_place(opts, "database", split_table, where),
        server_id=opts.get("server.id") or 0,
        **config_fields(opts),
    )
    if cfg.server_id and cfg.server_id < 1:
        raise PlanError(f"{where}: server.id must be a positive number")
    return reader_spec(
        FORMAT, cfg, lambda: discover(cfg, cfg.mode == "cdc", where), where, lambda: count(cfg)
    )


def count(cfg) -> int:
    from connectql.connectors.mysql.client import connect, qualified, query
    from connectql.connectors.mysql.tables import tables_of

    with connect(cfg.connection) as conn:
        return sum(
            int(query(conn, f"SELECT count(*) FROM {qualified(cfg.schema, t)}")[0][0])
            for t in tables_of(conn, cfg, "mysql source")
        )


def plan_sink(opts: dict[str, Any], stream=None) -> WriterSpec:
    from connectql.connectors.mysql.sink import prepare_target

    place = split_table(opts["table"], opts["database"])
    return writer_spec(FORMAT, opts, stream, connection_config(opts), place, prepare_target)


PLUGIN = Plugin(
    type="mysql",
    doc="MySQL/MariaDB tables: change-data capture (snapshot + binary log), incremental or bulk"
    " sources; exactly-once append or upsert sink",
    source_options=SOURCE_OPTIONS,
    plan_source=plan_source,
    sink_options=SINK_OPTIONS,
    plan_sink=plan_sink,
    delivery="exactly-once",
    aliases=("mariadb",),
)
