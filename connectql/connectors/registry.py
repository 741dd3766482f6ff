"""Every connector type connectql knows, installed or not, looked up by type name or alias."""

from __future__ import annotations

from functools import cache

from connectql.connectors.base import Plugin
from connectql.connectors.options import suggest
from connectql.errors import PlanError

# Types the language accepts today that later work will build (planning rejects them clearly).
NOT_INSTALLED: dict[str, str] = {}
ALIASES = {"mariadb": "mysql", "postgresql": "postgres"}


@cache
def plugins() -> dict[str, Plugin]:
    from connectql.connectors import datagen, files, mysql, postgres, s3

    found = {
        p.type: p for p in (datagen.PLUGIN, files.PLUGIN, postgres.PLUGIN, mysql.PLUGIN, s3.PLUGIN)
    }
    for name, doc in NOT_INSTALLED.items():
        found.setdefault(name, Plugin(type=name, doc=doc, installed=False))
    return found


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
    if not plugin.installed:
        raise PlanError(f"connector type {name} is not installed")
    if kind and kind not in plugin.kinds:
        raise PlanError(
            f"connector type {name} cannot be a {kind} (it can be: {', '.join(plugin.kinds)})"
        )
    return plugin
