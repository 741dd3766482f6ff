"""The `postgres` plugin: its options and how they become Spark reader and writer specs."""

from __future__ import annotations

from typing import Any

from connectql.connectors.base import ReaderSpec
from connectql.connectors.options import Option
from connectql.connectors.postgres.client import connection_config, split_table
from connectql.connectors.postgres.datasource import FORMAT
from connectql.connectors.relational import plugin as shared
from connectql.connectors.relational.bounds import BOUND_OPTIONS

CONNECTION = shared.connection_options(
    5432,
    Option("user", doc="role to connect as; absent: the operating-system user"),
    shared.password_option("role"),
    Option("database", required=True, doc="database to connect to"),
    Option("schema", default="public", doc="schema of the table(s) when not qualified"),
)
# the option naming the tables' container, and how a qualified table name splits
PLACE = ("schema", split_table)

SINK_OPTIONS = shared.sink_option_set(CONNECTION, "schema.name")

SOURCE_OPTIONS = shared.source_option_set(
    CONNECTION,
    "write-ahead log",
    "cdc: advance the slot this often while no captured table changes, so a quiet table does"
    " not hold back the server's WAL",
    Option(
        "slot.name",
        doc="cdc: logical replication slot, created if absent (dropped by DROP CONNECTOR);"
        " default connectql_<connector>",
    ),
)


def plan_source(opts: dict[str, Any]) -> ReaderSpec:
    from connectql.connectors.postgres.tables import count, discover

    def config(**fields):
        from connectql.connectors.postgres.source import ReaderConfig

        slot = opts.get("slot.name") or ""
        return ReaderConfig(connection=connection_config(opts), slot=slot, **fields)

    return shared.plan_table_source(opts, FORMAT, PLACE, config, discover, count)


# DROP waits this long at most on the server for the slot's cleanup (a server that hangs
# would otherwise hold the DROP for connect.timeout.ms); what it could not drop it says
DROP_BOUNDS = {"connect.timeout.ms": 3000, "read.timeout.ms": 10_000}


def drop_source(opts: dict[str, Any], connector: str, kind: str) -> str | None:
    """DROP CONNECTOR of a cdc source drops its replication slot (it would pin WAL forever) and
    its publication (named as the slot), within DROP_BOUNDS (or the connector's own, if
    shorter)."""
    from connectql.connectors.postgres.cdc import drop_publication, drop_slot
    from connectql.connectors.postgres.client import connect
    from connectql.connectors.postgres.source import default_slot

    if kind != "source" or opts.get("mode", "cdc") != "cdc":
        return None
    slot = opts.get("slot.name") or default_slot(connector)
    with connect(drop_config(opts), autocommit=True) as conn:
        dropped = [
            f"{what} {slot}"
            for what, done in (
                ("replication slot", drop_slot(conn, slot)),
                ("publication", drop_publication(conn, slot)),
            )
            if done
        ]
    return f"dropped {' and '.join(dropped)}" if dropped else None


def drop_config(opts: dict[str, Any]) -> dict[str, Any]:
    """The connection config of the cleanup: the connector's bounds capped by DROP_BOUNDS."""
    cfg = connection_config(opts)
    for key, cap in DROP_BOUNDS.items():
        own = int(cfg.get(key) or BOUND_OPTIONS[key].default)
        cfg[key] = min(own, cap) if own > 0 else cap
    return cfg


PLUGIN = shared.table_plugin(
    FORMAT,
    PLACE,
    connection_config,
    "connectql.connectors.postgres.sink",
    type="postgres",
    doc="PostgreSQL tables: change-data capture (snapshot + logical decoding), incremental or"
    " bulk sources; exactly-once append or upsert sink",
    source_options=SOURCE_OPTIONS,
    plan_source=plan_source,
    on_drop=drop_source,
    sink_options=SINK_OPTIONS,
)
