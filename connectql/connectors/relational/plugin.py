"""What a database connector's declaration shares (PostgreSQL, MySQL): its connection, source
and sink options, and how a table source is planned; each database gives only what differs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from connectql.connectors.base import ReaderSpec, WriterSpec
from connectql.connectors.common import SINK_COMMON, SOURCE_COMMON
from connectql.connectors.options import Option
from connectql.connectors.relational.bounds import BOUND_OPTIONS
from connectql.connectors.relational.sink import sink_options, writer_spec
from connectql.connectors.relational.source import (
    check_source_options,
    config_fields,
    reader_spec,
    source_options,
    table_place,
)


def _named(options) -> dict[str, Option]:
    return {o.name: o for o in options}


def connection_options(port: int, *own: Option) -> dict[str, Option]:
    """host and port, the database's own (user, password, database...), the timeouts."""
    return (
        _named(
            [
                Option("host", default="localhost", doc="server host name or address"),
                Option("port", "int", port, doc="server port"),
                *own,
            ]
        )
        | BOUND_OPTIONS
    )


def password_option(who: str) -> Option:
    return Option(
        "password", secret=True, doc=f"the {who}'s password (use SECRET name or ${{env:..}})"
    )


def source_option_set(
    connection: dict[str, Option], log: str, heartbeat_doc: str, *own: Option
) -> dict[str, Option]:
    """A table source's options: the common ones, the connection, the table source's (`log`
    names the change log), the database's own cdc options and its heartbeat."""
    heartbeat = Option("heartbeat.interval.ms", "int", 30000, doc=heartbeat_doc)
    return {**SOURCE_COMMON, **connection, **source_options(log), **_named([*own, heartbeat])}


def sink_option_set(connection: dict[str, Option], qualified: str) -> dict[str, Option]:
    """A table sink's options; `qualified` names a table with its container ('schema.name')."""
    return {**SINK_COMMON, **connection, **sink_options(qualified)}


def plan_table_source(
    opts: dict[str, Any],
    fmt: str,
    place: tuple[str, Callable],
    config: Callable[..., Any],
    discover: Callable[[Any, bool, str], list],
    count: Callable[[Any, str], int],
) -> ReaderSpec:
    """The ReaderSpec of a table source of format `fmt`: `place` = (the option naming the
    tables' container, split('c.t', default) -> (container, table)); `config(**fields)` the
    database's reader config; at CREATE `discover(cfg, cdc, where)` -> [tablereader.Table] and, for
    a snapshot's progress, `count(cfg, where)`."""
    where = f"{fmt.removeprefix('connectql_')} source"
    check_source_options(opts, where)
    cfg = config(**table_place(opts, place[0], place[1], where), **config_fields(opts))
    found = lambda: discover(cfg, cfg.mode == "cdc", where)  # noqa: E731
    return reader_spec(fmt, cfg, found, where, lambda: count(cfg, where))


def plan_table_sink(
    opts: dict[str, Any], stream, fmt: str, place: tuple[str, Callable], connection, prepare
) -> WriterSpec:
    """The WriterSpec of a table sink of format `fmt` into the table its options name (`place`
    as for plan_table_source); `prepare` readies the target at CREATE (sink.writer_spec)."""
    key, split = place
    target = split(opts["table"], opts[key])
    return writer_spec(fmt, opts, stream, connection, target, prepare)
