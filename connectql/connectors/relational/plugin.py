"""What a database connector's declaration shares (PostgreSQL, MySQL): its connection, source
and sink options, and its Plugin (the toolkit source, the sink's planner); each database gives
only what differs."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from connectql.connectors.adapter import plugin_of
from connectql.connectors.base import Plugin, WriterSpec
from connectql.connectors.common import SINK_COMMON
from connectql.connectors.options import Option
from connectql.connectors.relational.bounds import BOUND_OPTIONS
from connectql.connectors.relational.sink import sink_options, writer_spec
from connectql.connectors.relational.source import source_options
from connectql.toolkit.connector import Connector


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
) -> list[Option]:
    """A table source's own options (the common ones come with every toolkit source): the
    connection, the table source's (`log` names the change log), the database's own cdc
    options and its heartbeat."""
    heartbeat = Option("heartbeat.interval.ms", "int", 30000, doc=heartbeat_doc)
    return [*connection.values(), *source_options(log).values(), *own, heartbeat]


def sink_option_set(connection: dict[str, Option], qualified: str) -> dict[str, Option]:
    """A table sink's options; `qualified` names a table with its container ('schema.name')."""
    return {**SINK_COMMON, **connection, **sink_options(qualified)}


def table_plugin(source: type, fmt: str, sink_module: str, **declared: Any) -> Plugin:
    """The Plugin of a database: its source a toolkit TableSource (tablereader), its sink of
    format `fmt` planned by table_sink_planner (with the source's place and connection),
    delivering exactly once; `declared` gives its type, doc, sink_options and aliases."""
    aliases = declared.pop("aliases", ())
    sink_options = declared.pop("sink_options")
    plugin = plugin_of(Connector(source=source, **declared))
    plan_sink = table_sink_planner(fmt, source.place, source.connection_config, sink_module)
    return replace(
        plugin,
        sink_options=sink_options,
        plan_sink=plan_sink,
        delivery="exactly-once",
        aliases=aliases,
    )


def table_sink_planner(
    fmt: str, place: tuple[str, Callable], connection_config: Callable, sink_module: str
) -> Callable[..., WriterSpec]:
    """The plan_sink of a table sink of format `fmt`: (options, stream) -> the WriterSpec into
    the table its options name (`place`: TableSource.place); `connection_config(opts)`
    gives the connection, and `sink_module`, imported only when a sink is planned, the
    `prepare_target` that readies the target at CREATE (sink.writer_spec)."""

    def plan_sink(opts: dict[str, Any], stream=None) -> WriterSpec:
        prepare = importlib.import_module(sink_module).prepare_target
        key, split = place
        target = split(opts["table"], opts[key])
        return writer_spec(fmt, opts, stream, connection_config(opts), target, prepare)

    return plan_sink
