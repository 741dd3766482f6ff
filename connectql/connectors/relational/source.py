"""What every database table source shares (PostgreSQL, MySQL): its option declarations, their
checks, and how they become a tablereader.TableConfig."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from connectql.connectors import multitable
from connectql.connectors.options import Option
from connectql.connectors.relational.bounds import check_bounds
from connectql.errors import PlanError

# batch.rows' defaults: a micro-batch costs 0.5-1 s of its own on 2 cores (planning, tasks,
# the stream's commit) while a chunk's rows stream through Arrow batches, not held whole, so a
# one-table snapshot takes bigger chunks (bench.bulk: 1M rows in 200k chunks took 1.6-2.1x
# the bulk copy); changes and several tables' snapshot batches (collected whole) stay smaller
BATCH_ROWS = 100_000
SNAPSHOT_ROWS = 500_000


def source_options(log: str) -> dict[str, Option]:
    """The options of a table source whose change log is `log` (named in the docs)."""
    return {
        o.name: o
        for o in [
            Option(
                "table",
                doc="table to read, 'name' or 'schema.name' (or give query); several tables of"
                " one schema as a comma list and/or patterns ('orders, customer*'; * or % any"
                " text, ? one character): each table's rows go to stream <stream>_<table>",
            ),
            Option(
                "query",
                doc="incremental/bulk modes: a SELECT whose rows are read instead of a table",
            ),
            Option(
                "mode",
                "enum",
                "cdc",
                choices=("cdc", "incremental", "bulk"),
                doc=f"'cdc': snapshot, then every insert/update/delete from the {log};"
                " 'incremental': poll for new rows by incrementing.column / timestamp.column;"
                " 'bulk': copy the whole table every poll",
            ),
            Option(
                "snapshot",
                "enum",
                "initial",
                choices=("initial", "never"),
                doc="cdc: read the existing rows first ('initial') or only changes ('never')",
            ),
            Option("incrementing.column", doc="incremental: a strictly increasing column"),
            Option(
                "timestamp.column",
                doc="incremental: a last-modified timestamp column (with incrementing.column,"
                " ties are broken by it)",
            ),
            Option(
                "poll.interval.ms",
                "int",
                doc="how often to look for new data; default 100 (cdc), 5000 (incremental, bulk)",
            ),
            Option(
                "batch.rows",
                "int",
                doc="at most about this many rows per micro-batch; default"
                f" {SNAPSHOT_ROWS} for a cdc snapshot's chunk of one table, {BATCH_ROWS} for"
                " changes, polled rows and a snapshot batch of several tables",
            ),
            Option(
                "signal.table",
                doc="cdc of several tables: a table (id, type, data text columns, as"
                " Debezium's) whose rows of type 'execute-snapshot' and data"
                ' \'{"data-collections": ["t", ...]}\' read those tables again while the'
                " changes flow, as ALTER CONNECTOR ... SNAPSHOT TABLE does",
            ),
            Option(
                "schema.change",
                "enum",
                "evolve",
                choices=("evolve", "fail", "ignore"),
                doc="cdc: when the table gains columns, 'evolve' adds them to the stream (and"
                " sinks to their targets), 'fail' stops the connector naming the change,"
                " 'ignore' leaves them out; dropped columns arrive as NULL ('fail' stops)",
            ),
        ]
    }


def check_source_options(opts: dict[str, Any], where: str) -> None:
    check_bounds(opts, where)
    if opts.get("batch.rows") is not None and int(opts["batch.rows"]) < 1:
        raise PlanError(f"{where}: batch.rows must be 1 or more, not {opts['batch.rows']}")
    mode = opts["mode"]
    if not opts.get("table") and not opts.get("query"):
        raise PlanError(
            f"{where}: give table = 'name' (or query = 'SELECT ...' for incremental/bulk)"
        )
    if opts.get("table") and opts.get("query"):
        raise PlanError(f"{where}: give table or query, not both")
    if mode == "cdc" and opts.get("query"):
        raise PlanError(f"{where}: mode = 'cdc' reads a table, not a query")
    if opts.get("signal.table") and (mode != "cdc" or not multitable.patterns(opts.get("table"))):
        raise PlanError(
            f"{where}: signal.table asks for snapshots of tables of a cdc source of several:"
            " give mode = 'cdc' and a table list or pattern"
        )
    if mode == "incremental" and not (
        opts.get("incrementing.column") or opts.get("timestamp.column")
    ):
        raise PlanError(
            f"{where}: mode = 'incremental' needs incrementing.column and/or timestamp.column"
        )


def table_place(
    opts: dict[str, Any], schema_key: str, split: Callable, where: str
) -> dict[str, Any]:
    """The TableConfig fields saying what is read: schema, table and (several tables) patterns.
    `split('s.t', default schema)` -> (schema, table)."""
    text, default = opts.get("table"), opts[schema_key]
    items = multitable.patterns(text)
    if not text:
        return {"schema": default, "table": None}
    if not items:
        schema, table = split(text, default)
        return {"schema": schema, "table": table}
    places = [split(item, default) for item in items]
    schemas = sorted({schema for schema, _t in places})
    if len(schemas) > 1:
        raise PlanError(
            f"{where}: the tables of table = '{text}' must be in one schema, not"
            f" {', '.join(schemas)} (one connector per schema)"
        )
    return {"schema": schemas[0], "table": None, "patterns": tuple(t for _s, t in places)}


def config_fields(opts: dict[str, Any]) -> dict[str, Any]:
    """The TableConfig fields every table source takes from its options (less connection,
    schema and table, which each database names its own way)."""
    mode = opts["mode"]
    return {
        "query": opts.get("query"),
        "mode": mode,
        "snapshot": opts["snapshot"],
        "heartbeat_ms": opts.get("heartbeat.interval.ms") or 30_000,
        "incrementing": opts.get("incrementing.column"),
        "timestamp": opts.get("timestamp.column"),
        "batch_rows": opts.get("batch.rows") or BATCH_ROWS,
        "snapshot_rows": opts.get("batch.rows") or SNAPSHOT_ROWS,
        "poll_ms": opts.get("poll.interval.ms") or (100 if mode == "cdc" else 5000),
        "tasks": opts["tasks.max"],
        "schema_change": opts["schema.change"],
        "tolerance": opts.get("errors.tolerance") or "none",
        "signal_table": opts.get("signal.table"),
    }


def count_sql(cfg, tables: list[str]) -> str:
    """One statement counting the rows of `tables` of a source (a row per table)."""
    return " UNION ALL ".join(f"SELECT count(*) FROM {cfg.for_table(t).relation()}" for t in tables)
