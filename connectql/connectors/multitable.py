"""Several tables in one source: which `table` values name several (a comma list or patterns),
and the reader specs that send their rows packed (toolkit/packed.py), each table's rows to a
stream of their own."""

from __future__ import annotations

import dataclasses
import fnmatch

from pyspark.sql.types import StructType

from connectql.errors import PlanError
from connectql.toolkit.packed import ONE_KEY, ONE_OPTION, PACKED_DDL, SCHEMAS_OPTION, schemas_option


def patterns(table: str | None) -> tuple[str, ...]:
    """The items of a `table` value that names several tables (a comma list, or one pattern
    with * ? or %); () when it names one table."""
    text = str(table or "")
    if not any(c in text for c in "*?%,"):
        return ()
    return tuple(t.strip() for t in text.split(",") if t.strip())


def matches(name: str, items: tuple[str, ...]) -> bool:
    """Whether `name` is one of the items or matches one of their patterns (as `matching`)."""
    return any(fnmatch.fnmatchcase(name, item.replace("%", "*")) for item in items)


def matching(names: list[str], items: tuple[str, ...], where: str) -> list[str]:
    """The names (a schema's tables) the items match (a name, or a pattern: * or % any text,
    ? one character), in the order of the items, then by name; a PlanError naming an item
    that matches none, with `where` saying where was looked."""
    found: list[str] = []
    for item in items:
        glob = item.replace("%", "*")
        hits = sorted(n for n in names if fnmatch.fnmatchcase(n, glob))
        if not hits:
            known = f" (tables there: {', '.join(sorted(names)[:10])})" if names else ""
            raise PlanError(f"table = '{item}' matches no table in {where}{known}")
        found += [n for n in hits if n not in found]
    return found


def with_tables_schemas(reader, parts: list[tuple[str, StructType]]):
    """A reader spec (planner) that reads the tables of `parts`, (table, its stream's schema)
    in reading order: the packed Spark schema, the tables' schemas in SCHEMAS_OPTION (their
    dead letters are packed too, not in a column of their own)."""
    options = {**reader.options, SCHEMAS_OPTION: schemas_option(parts)}
    return dataclasses.replace(
        reader, schema=PACKED_DDL, options=options, corrupt_column=None, packs=False
    )


def packed_one(reader, struct: StructType):
    """A one-table source's reader spec (planner) that sends its rows packed, a Spark row per
    chunk: Spark then moves a few large values per batch instead of converting every row from
    Arrow and back (the stream writer writes the chunks as they are)."""
    reader = with_tables_schemas(reader, [(ONE_KEY, struct)])
    return dataclasses.replace(reader, options={**reader.options, ONE_OPTION: "true"})
