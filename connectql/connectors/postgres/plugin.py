"""The `postgres` plugin: its options and how they become Spark reader and writer specs."""

from __future__ import annotations

from typing import Any

from connectql.connectors.base import Plugin, WriterSpec
from connectql.connectors.common import SINK_COMMON
from connectql.connectors.dbsink import SinkSettings, sink_mode
from connectql.connectors.options import Option
from connectql.connectors.postgres.client import connection_config, split_table
from connectql.connectors.postgres.datasource import FORMAT

CONNECTION = {
    o.name: o
    for o in [
        Option("host", default="localhost", doc="server host name or address"),
        Option("port", "int", 5432, doc="server port"),
        Option("user", doc="role to connect as; absent: the operating-system user"),
        Option("password", secret=True, doc="the role's password (use SECRET name or ${env:..})"),
        Option("database", required=True, doc="database to connect to"),
        Option("schema", default="public", doc="schema of the table(s) when not qualified"),
    ]
}

SINK_OPTIONS = {
    **SINK_COMMON,
    **CONNECTION,
    **{
        o.name: o
        for o in [
            Option("table", required=True, doc="target table, 'name' or 'schema.name'"),
            Option(
                "mode",
                "enum",
                choices=("append", "upsert"),
                doc="'append' inserts every row; 'upsert' applies the last change per key"
                " (deletes for __op = 'd'); default: upsert when the stream has a key",
            ),
            Option(
                "primary.key",
                doc="key columns for upsert, 'a, b'; default: the stream's key (the source"
                " table's primary key)",
            ),
            Option(
                "auto.create",
                "bool",
                True,
                doc="create the target table from the stream's columns when it does not exist",
            ),
            Option(
                "delete.enabled",
                "bool",
                doc="apply __op = 'd' rows as deletes; default: true in upsert mode",
            ),
        ]
    },
}


def plan_sink(opts: dict[str, Any], stream=None) -> WriterSpec:
    from connectql.connectors.postgres.sink import prepare_target

    mode, key = sink_mode(opts, stream.key_columns if stream else ())
    schema, table = split_table(opts["table"], opts["schema"])
    delete = opts.get("delete.enabled")
    s = SinkSettings(
        connection=connection_config(opts),
        schema=schema,
        table=table,
        mode=mode,
        key=key,
        delete_enabled=(mode == "upsert") if delete is None else bool(delete),
        auto_create=opts["auto.create"],
    )
    where = f"postgres sink into {schema}.{table}"
    return WriterSpec(
        FORMAT,
        s.to_options(),
        secret_options=("password",),
        check=lambda struct: prepare_target(s, struct, where),
    )


PLUGIN = Plugin(
    type="postgres",
    doc="PostgreSQL tables: exactly-once append or upsert sink",
    sink_options=SINK_OPTIONS,
    plan_sink=plan_sink,
    delivery="exactly-once",
)
