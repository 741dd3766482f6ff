"""Connector: the plugin object, one connector type with its source and/or sink class.

A package makes a type usable in `CREATE ... FROM type` by declaring it in the entry-point group
`connectql.connectors` (name = the type, value = "module:OBJECT" naming a Connector).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from connectql.toolkit.sink import DELIVERIES, Sink
from connectql.toolkit.source import Source

_TYPE = re.compile(r"[a-z][a-z0-9_]*")


@dataclass(frozen=True)
class Connector:
    """`type`: the name used in FROM/TO (lower case letters, digits, _); `doc`: one line on
    what it connects; `source`, `sink`: the classes (at least one)."""

    type: str
    doc: str
    source: type[Source] | None = None
    sink: type[Sink] | None = None

    def problems(self) -> list[str]:
        """What is wrong with this declaration (empty when it can be used)."""
        found = []
        if not isinstance(self.type, str) or not _TYPE.fullmatch(self.type):
            found.append(f"type {self.type!r} is not a lower-case name")
        if self.source is None and self.sink is None:
            found.append("it declares neither a source nor a sink")
        if self.source is not None and not _subclass(self.source, Source):
            found.append(f"source {self.source!r} is not a connectql.toolkit.Source class")
        if self.sink is not None and not _subclass(self.sink, Sink):
            found.append(f"sink {self.sink!r} is not a connectql.toolkit.Sink class")
        elif self.sink is not None and self.sink.delivery not in DELIVERIES:
            found.append(
                f"sink delivery {self.sink.delivery!r} is not one of {', '.join(DELIVERIES)}"
            )
        if self.sink is not None and _subclass(self.sink, Sink):
            declared = {o.name for o in self.sink.options}
            unknown = [k for k in self.sink.target_options if k not in declared]
            if unknown:
                found.append(f"sink target_options names {', '.join(unknown)}, not its options")
        return found


def _subclass(value, base: type) -> bool:
    return isinstance(value, type) and issubclass(value, base)
