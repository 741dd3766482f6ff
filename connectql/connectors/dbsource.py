"""What every database table source shares (PostgreSQL, MySQL): its option declarations, their
checks, and how they become a tablereader.TableConfig and a ReaderSpec."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from connectql.connectors.base import ReaderSpec
from connectql.connectors.options import Option
from connectql.errors import PlanError


def source_options(log: str) -> dict[str, Option]:
    """The options of a table source whose change log is `log` (named in the docs)."""
    return {
        o.name: o
        for o in [
            Option("table", doc="table to read, 'name' or 'schema.name' (or give query)"),
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
                100_000,
                doc="at most about this many rows (snapshot chunk, changes) per micro-batch",
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
    mode = opts["mode"]
    if not opts.get("table") and not opts.get("query"):
        raise PlanError(
            f"{where}: give table = 'name' (or query = 'SELECT ...' for incremental/bulk)"
        )
    if opts.get("table") and opts.get("query"):
        raise PlanError(f"{where}: give table or query, not both")
    if mode == "cdc" and opts.get("query"):
        raise PlanError(f"{where}: mode = 'cdc' reads a table, not a query")
    if mode == "incremental" and not (
        opts.get("incrementing.column") or opts.get("timestamp.column")
    ):
        raise PlanError(
            f"{where}: mode = 'incremental' needs incrementing.column and/or timestamp.column"
        )


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
        "batch_rows": opts["batch.rows"],
        "poll_ms": opts.get("poll.interval.ms") or (100 if mode == "cdc" else 5000),
        "tasks": opts["tasks.max"],
        "schema_change": opts["schema.change"],
    }


def reader_spec(
    fmt: str, cfg, describe: Callable[[], Any], where: str, count: Callable[[], int]
) -> ReaderSpec:
    """A ReaderSpec whose discovery (at CREATE) runs `describe()` -> tablereader.Table and checks
    that the ordering columns exist; `count()` gives the rows of a cdc snapshot (progress)."""

    def found() -> tuple[str, tuple[str, ...]]:
        t = describe()
        missing = [c for c in cfg.ordering if c not in {n for n, _d, _s in t.columns}]
        if missing:
            raise PlanError(f"{where}: {t.qualified} has no column {', '.join(missing)}")
        return t.ddl(cfg.mode == "cdc"), t.key

    snapshot = cfg.mode == "cdc" and cfg.snapshot == "initial"
    return ReaderSpec(
        fmt,
        cfg.to_options(),
        secret_options=("password",),
        discover=found,
        count_rows=count if snapshot else None,
    )
