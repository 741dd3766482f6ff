"""The `postgres` plugin: its options and how they become Spark reader and writer specs."""

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
} | BOUND_OPTIONS

SINK_OPTIONS = {**SINK_COMMON, **CONNECTION, **sink_options("schema.name")}


SOURCE_OPTIONS = {
    **SOURCE_COMMON,
    **CONNECTION,
    **source_options("write-ahead log"),
    **{
        o.name: o
        for o in [
            Option(
                "slot.name",
                doc="cdc: logical replication slot, created if absent (dropped by DROP"
                " CONNECTOR); default connectql_<connector>",
            ),
            Option(
                "heartbeat.interval.ms",
                "int",
                30000,
                doc="cdc: advance the slot this often while no captured table changes, so a"
                " quiet table does not hold back the server's WAL",
            ),
        ]
    },
}


def plan_source(opts: dict[str, Any]) -> ReaderSpec:
    from connectql.connectors.postgres.source import ReaderConfig
    from connectql.connectors.postgres.tables import discover

    where = "postgres source"
    check_source_options(opts, where)
    cfg = ReaderConfig(
        connection=connection_config(opts),
        **table_place(opts, "schema", split_table, where),
        slot=opts.get("slot.name") or "",
        **config_fields(opts),
    )
    return reader_spec(
        FORMAT, cfg, lambda: discover(cfg, cfg.mode == "cdc", where), where, lambda: count(cfg)
    )


def count(cfg) -> int:
    from connectql.connectors.postgres.client import connect
    from connectql.connectors.postgres.tables import tables_of

    with connect(cfg.connection, autocommit=True) as conn:
        return sum(
            conn.execute(f"SELECT count(*) FROM {cfg.for_table(t).relation()}").fetchone()[0]
            for t in tables_of(conn, cfg, "postgres source")
        )


# DROP waits this long at most on the server for the slot's cleanup (a server that hangs
# would otherwise hold the DROP for connect.timeout.ms); what it could not drop it says
DROP_BOUNDS = {"connect.timeout.ms": 3000, "read.timeout.ms": 10_000}


def drop_source(opts: dict[str, Any], connector: str) -> str | None:
    """DROP CONNECTOR of a cdc source drops its replication slot (it would pin WAL forever) and
    its publication (named as the slot), within DROP_BOUNDS (or the connector's own, if
    shorter)."""
    from connectql.connectors.postgres.cdc import drop_publication, drop_slot
    from connectql.connectors.postgres.client import connect
    from connectql.connectors.postgres.source import default_slot

    if opts.get("mode", "cdc") != "cdc":
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


def plan_sink(opts: dict[str, Any], stream=None) -> WriterSpec:
    from connectql.connectors.postgres.sink import prepare_target

    place = split_table(opts["table"], opts["schema"])
    return writer_spec(FORMAT, opts, stream, connection_config(opts), place, prepare_target)


PLUGIN = Plugin(
    type="postgres",
    doc="PostgreSQL tables: change-data capture (snapshot + logical decoding), incremental or"
    " bulk sources; exactly-once append or upsert sink",
    source_options=SOURCE_OPTIONS,
    plan_source=plan_source,
    on_drop=drop_source,
    sink_options=SINK_OPTIONS,
    plan_sink=plan_sink,
    delivery="exactly-once",
)
