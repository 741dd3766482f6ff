"""Every connector type connectql knows: the built-ins and the plugins that installed packages
declare in the entry-point group `connectql.connectors`, looked up by type name or alias.

A plugin that cannot be used (it fails to import, names no Connector, or takes a type name that
is already taken) is listed with why, and is never fatal: everything else keeps working."""

from __future__ import annotations

import importlib
from functools import cache
from importlib.metadata import EntryPoint, entry_points

from connectql.config import suggest
from connectql.connectors.base import Plugin
from connectql.errors import PlanError

GROUP = "connectql.connectors"
# Types the language accepts today that later work will build (planning rejects them clearly).
NOT_INSTALLED: dict[str, str] = {}
ALIASES = {"mariadb": "mysql", "postgresql": "postgres"}
# the built-in connectors, as "module:OBJECT" naming a connectql.toolkit.Connector (or, for
# those not yet on the toolkit, a Plugin), in the order the README lists them
BUILTINS: tuple[str, ...] = (
    "connectql.connectors.datagen:CONNECTOR",
    "connectql.connectors.files:PLUGIN",
    "connectql.connectors.postgres:PLUGIN",
    "connectql.connectors.mysql:PLUGIN",
    "connectql.connectors.s3:CONNECTOR",
    "connectql.connectors.redis:CONNECTOR",
    "connectql.connectors.nats:CONNECTOR",
    "connectql.connectors.mqtt:CONNECTOR",
    "connectql.connectors.rabbitmq:CONNECTOR",
    "connectql.connectors.kafka:CONNECTOR",
    "connectql.connectors.delta:CONNECTOR",
    "connectql.connectors.iceberg:CONNECTOR",
)


def plugins() -> dict[str, Plugin]:
    """Every usable or known type by name (a plugin refused for its name is in refused())."""
    return _found()[0]


def refused() -> list[Plugin]:
    """Plugins found but not listed under their type: their name was taken already."""
    return _found()[1]


def listing() -> list[Plugin]:
    """Every plugin to show (SHOW CONNECTOR PLUGINS), by type."""
    return sorted([*plugins().values(), *refused()], key=lambda p: (p.type, p.origin))


def builtins() -> list[Plugin]:
    """The installed plugins connectql itself ships (the README documents these)."""
    return [p for p in plugins().values() if p.installed and p.origin == "built-in"]


@cache
def _found() -> tuple[dict[str, Plugin], list[Plugin]]:
    from connectql.connectors.adapter import plugin_of

    found: dict[str, Plugin] = {}
    for spec in BUILTINS:
        value = load(spec)
        plugin = value if isinstance(value, Plugin) else plugin_of(value)
        found[plugin.type] = plugin
    refused: list[Plugin] = []
    for ep in sorted(entry_points(group=GROUP), key=lambda e: (e.name, _origin(e))):
        plugin = _from_entry_point(ep)
        taken = found.get(plugin.type) or found.get(ALIASES.get(plugin.type, ""))
        if taken is not None:
            why = f"the type name '{plugin.type}' is taken by {taken.origin}; this one is ignored"
            refused.append(_broken(plugin.type, plugin.origin, why, plugin.doc))
        else:
            found[plugin.type] = plugin
    for name, doc in NOT_INSTALLED.items():
        found.setdefault(name, Plugin(type=name, doc=doc, installed=False))
    return found, refused


def load(spec: str):
    """The object a "module:NAME" (or "module:A.B") spec names, its module imported."""
    module, _, attr = spec.partition(":")
    value = importlib.import_module(module)
    for part in attr.split("."):
        value = getattr(value, part)
    return value


def _origin(ep: EntryPoint) -> str:
    dist = ep.dist
    return f"{dist.name} {dist.version}" if dist is not None else f"module {ep.module}"


def _from_entry_point(ep: EntryPoint) -> Plugin:
    """The plugin an entry point names, or a broken one that says what is wrong with it."""
    from connectql.connectors.adapter import plugin_of, reserved
    from connectql.toolkit.connector import Connector

    origin, name = _origin(ep), ep.name.lower()
    try:
        value = ep.load()
    except Exception as e:  # any failure of someone else's import: listed, never fatal
        return _broken(name, origin, f"cannot import {ep.value}: {type(e).__name__}: {e}")
    if not isinstance(value, Connector):
        return _broken(name, origin, f"{ep.value} is a {type(value).__name__}, not a Connector")
    problems = value.problems() + reserved(value)
    if value.type != name:
        problems.append(
            f"the entry point is named '{name}' but the connector's type is {value.type!r}"
        )
    if problems:
        return _broken(name, origin, f"{ep.value}: {'; '.join(problems)}", value.doc)
    return plugin_of(value, origin)


def _broken(name: str, origin: str, problem: str, doc: str = "") -> Plugin:
    return Plugin(type=name, doc=doc or problem, installed=False, origin=origin, problem=problem)


def lookup(type_name: str, kind: str | None = None) -> Plugin:
    """The installed plugin for `type_name`, or a PlanError that lists what is known."""
    name = ALIASES.get(type_name.lower(), type_name.lower())
    known = plugins()
    plugin = known.get(name)
    if plugin is None:
        raise PlanError(
            f"unknown connector type '{type_name}'{suggest(name, known)};"
            f" known types: {', '.join(sorted(known))}"
        )
    if plugin.problem:
        raise PlanError(
            f"connector type {name} (from {plugin.origin}) cannot be used: {plugin.problem}"
        )
    if not plugin.installed:
        raise PlanError(f"connector type {name} is not installed")
    if kind and kind not in plugin.kinds:
        raise PlanError(
            f"connector type {name} cannot be a {kind} (it can be: {', '.join(plugin.kinds)})"
        )
    return plugin
