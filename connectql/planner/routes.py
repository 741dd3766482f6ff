"""The plan of a sink of several streams (`streams = 'shop_*'`): which streams it reads, and the
table each goes into (`table` with ${stream} / ${table})."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from pyspark.sql.types import StructType

from connectql.connectors.base import ReaderSpec
from connectql.connectors.multitable import matching, patterns
from connectql.connectors.relational.routed import ROUTES_OPTION, _each
from connectql.connectors.streamsread import FORMAT, SCHEMA, STREAMS_OPTION
from connectql.errors import PlanError


def chosen_streams(entry, options: dict[str, Any], ctx, where: str) -> list[str]:
    """The streams a sink of several streams reads: those recorded at CREATE, else what
    `streams` (a comma list and/or patterns) matches now among the streams that have a schema."""
    if entry.tables:
        return list(entry.tables)
    if entry.stream:
        raise PlanError(f"{where}: give FROM stream or streams = '...', not both")
    if entry.select_sql:
        raise PlanError(f"{where}: streams = '...' takes no AS SELECT (give one stream)")
    given = str(options["streams"])
    items = patterns(given) or (given.strip(),)
    own = options.get("errors.deadletter.stream")
    known = [name for name, s in ctx.streams.items() if s.schema and name != own]
    return matching(known, items, "the streams")


def target_table(template: str, stream: str, table: str) -> str:
    """The target table of one stream: `template` with ${stream} and ${table} filled in."""
    return template.replace("${stream}", stream).replace("${table}", table)


def routed_specs(plugin, resolved: dict[str, Any], names: list[str], ctx, where: str):
    """(reader, writer) of a sink of several streams: one WriterSpec per stream, as a
    one-stream sink of it would have, packed into one writer that routes each stream's rows."""
    specs = []
    for name in names:
        stream = ctx.streams.get(name)
        if stream is None or not stream.schema:
            raise PlanError(f"{where}: stream '{name}' does not exist any more (or has no schema)")
        table = target_table(str(resolved["table"]), name, ctx.source_tables.get(name, name))
        specs.append((stream, plugin.plan_sink({**resolved, "table": table}, stream)))
    tables = [json.loads(w.options["config"])["table"] for _, w in specs]
    twice = sorted({t for t in tables if tables.count(t) > 1})
    if twice:
        raise PlanError(
            f"{where}: several streams would go into table {', '.join(twice)}: give table a"
            " ${table} or ${stream} so that each stream has its own"
        )
    routes = [
        {"stream": s.name, "config": w.options["config"], "schema": json.loads(s.schema_json)}
        for s, w in specs
    ]
    first = specs[0][1]
    options = {k: v for k, v in first.options.items() if k != "config"}
    reader = ReaderSpec(
        FORMAT,
        {STREAMS_OPTION: json.dumps({s.name: s.path for s, _ in specs})}
        | ({"tasks": str(resolved["tasks.max"])} if resolved.get("tasks.max") else {}),
        schema=", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in SCHEMA.fields),
    )

    def check(_struct) -> None:  # each target as its one-stream sink would check it
        _each(lambda sw: sw[1].check(StructType.fromJson(json.loads(sw[0].schema_json))), specs)

    writer = replace(first, options={**options, ROUTES_OPTION: json.dumps(routes)}, check=check)
    return reader, replace(writer, unused=())
