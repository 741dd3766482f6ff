"""What a database connector's declaration shares (PostgreSQL, MySQL): its connection, source
and sink options, and how a table source is planned; each database gives only what differs."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from connectql.connectors.base import Plugin, ReaderSpec, WriterSpec
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


def table_plugin(
    fmt: str,
    place: tuple[str, Callable],
    connection_config: Callable,
    sink_module: str,
    **declared: Any,
) -> Plugin:
    """The Plugin of a database: `declared` gives its type, doc, options, plan_source and the
    like; its sink is planned by table_sink_planner and delivers exactly once."""
    plan_sink = table_sink_planner(fmt, place, connection_config, sink_module)
    return Plugin(plan_sink=plan_sink, delivery="exactly-once", **declared)


def table_sink_planner(
    fmt: str, place: tuple[str, Callable], connection_config: Callable, sink_module: str
) -> Callable[..., WriterSpec]:
    """The plan_sink of a table sink of format `fmt`: (options, stream) -> the WriterSpec into
    the table its options name (`place` as for plan_table_source); `connection_config(opts)`
    gives the connection, and `sink_module`, imported only when a sink is planned, the
    `prepare_target` that readies the target at CREATE (sink.writer_spec)."""

    def plan_sink(opts: dict[str, Any], stream=None) -> WriterSpec:
        prepare = importlib.import_module(sink_module).prepare_target
        key, split = place
        target = split(opts["table"], opts[key])
        return writer_spec(fmt, opts, stream, connection_config(opts), target, prepare)

    return plan_sink
