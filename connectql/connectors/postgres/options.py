"""The `postgres` connector's options, source and sink."""

from __future__ import annotations

from connectql.connectors.options import Option
from connectql.connectors.postgres.client import connection_config, split_table
from connectql.connectors.relational import plugin as shared

CONNECTION = shared.connection_options(
    5432,
    Option("user", doc="role to connect as; absent: the operating-system user"),
    shared.password_option("role"),
    Option("database", required=True, doc="database to connect to"),
    Option("schema", default="public", doc="schema of the table(s) when not qualified"),
)


# what its source and sink share: their name, where a table is, the connection settings
PostgresTables = shared.tables("postgres", ("schema", split_table), connection_config)

SINK_OPTIONS = shared.sink_option_set(CONNECTION, "schema.name")

SOURCE_OPTIONS = shared.source_option_set(
    CONNECTION,
    "write-ahead log",
    "cdc: advance the slot this often while no captured table changes, so a quiet table does"
    " not hold back the server's WAL",
    Option(
        "keyless",
        default="refuse",
        choices=("refuse", "inserts"),
        doc="cdc: a table without a primary key or other replica identity (PostgreSQL refuses"
        " its UPDATE and DELETE once it is published for change capture): 'refuse' it at"
        " CREATE, naming it, or capture only its 'inserts' (through a second publication that"
        " publishes inserts alone; its updates and deletes are not captured)",
    ),
    Option(
        "slot.name",
        doc="cdc: logical replication slot, created if absent (dropped by DROP CONNECTOR);"
        " default connectql_<connector>",
    ),
)
