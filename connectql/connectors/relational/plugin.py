"""What a database connector's declaration shares (PostgreSQL, MySQL): its connection, source
and sink options, and its Plugin (the toolkit source and sink); each database gives only what
differs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from connectql.connectors.adapter import plugin_of
from connectql.connectors.base import Plugin
from connectql.connectors.options import Option
from connectql.connectors.relational.bounds import BOUND_OPTIONS
from connectql.connectors.relational.sink import sink_options
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


def tables(database: str, place: tuple[str, Callable], connection_config: Callable) -> type:
    """The base class that gives a database's TableSource and TableSink what they share: its
    `database` name (in messages), `place` (the option naming a table's container, and
    split('c.t', default) -> (container, table)) and `connection_config(options)`."""
    attrs = {"database": database, "place": place}
    return type(
        f"{database.title()}Tables",
        (),
        {**attrs, "connection_config": staticmethod(connection_config)},
    )


def sink_option_set(connection: dict[str, Option], qualified: str) -> list[Option]:
    """A table sink's own options (the common ones come with every toolkit sink); `qualified`
    names a table with its container ('schema.name')."""
    return [*connection.values(), *sink_options(qualified).values()]


def table_plugin(source: type, sink: type, **declared: Any) -> Plugin:
    """The Plugin of a database: its source a toolkit TableSource (tablereader), its sink a
    toolkit TableSink (tablesink); `declared` gives its type, doc and aliases."""
    aliases = declared.pop("aliases", ())
    return replace(plugin_of(Connector(source=source, sink=sink, **declared)), aliases=aliases)
