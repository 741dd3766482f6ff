"""The plan of a sink of several streams (`streams = 'shop_*'`): which streams it reads, and
each one's options (${stream} / ${table} filled in, e.g. the table it goes into)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from pyspark.sql.types import StructType

from connectql.connectors.base import ReaderSpec
from connectql.connectors.multitable import matching, patterns
from connectql.connectors.streamsread import (
    FORMAT,
    HELD_OPTION,
    HOLDS_OPTION,
    SCHEMA,
    STREAMS_OPTION,
    holds_file,
)
from connectql.errors import PermanentError, PlanError
from connectql.toolkit.routed import each, filled, routed_options


def chosen_streams(entry, options: dict[str, Any], ctx, where: str) -> list[str]:
    """The streams a sink of several streams reads: those recorded at CREATE, else what
    `streams` (a comma list and/or patterns) matches now among the streams that have a schema."""
    if entry.tables:
        return list(entry.tables)
    if entry.stream:
        raise PlanError(f"{where}: give FROM stream or streams = '...', not both")
    if entry.select_sql:
        raise PlanError(f"{where}: streams = '...' takes no AS SELECT (give one stream)")
    own = options.get("errors.deadletter.stream")
    known = [name for name, s in ctx.streams.items() if s.schema and name != own]
    return matching(known, streams_items(options["streams"]), "the streams")


def streams_items(given) -> tuple[str, ...]:
    """The names and patterns of a sink's `streams` option."""
    return patterns(str(given)) or (str(given).strip(),)


def target_key(plugin, opts: dict[str, Any], stream: str) -> str:
    """What tells one stream's target from another's: its options (${stream} and ${table}
    filled in) with the marks the sink fills in itself (its target_options, e.g. the s3 sink's
    '{stream}' in file.name.template) filled in too."""
    marks = plugin.target_options
    return json.dumps(
        {
            k: v.replace(marks[k], stream) if marks.get(k) and isinstance(v, str) else v
            for k, v in opts.items()
        },
        sort_keys=True,
        default=str,
    )


def naming(plugin, specs) -> str:
    """What to give a sink of several streams so that each stream has a target of its own:
    its target_options with their marks (else its required text options, as likely names)."""
    marks = plugin.target_options or {
        o.name: "" for o in specs.values() if o.required and o.type == "string"
    }
    either = "${table} or ${stream}"
    return " or ".join(f"{k} a {m or either}" for k, m in marks.items()) or f"an option a {either}"


def routed_specs(plugin, resolved: dict[str, Any], names: list[str], ctx, entry, where: str):
    """(reader, writer) of a sink of several streams: one WriterSpec per stream, as a
    one-stream sink of it would have, packed into one writer that routes each stream's rows.
    The streams that stopped alone (the entry's tables_failed) are read by no one: held."""
    specs = plugin.options_for("sink")
    secret = {k for k, o in specs.items() if o.secret}
    held = [n for n in names if n in entry.tables_failed]
    if len(held) == len(names):
        why = "; ".join(f"{n}: {entry.tables_failed[n]}" for n in held)
        raise PermanentError(
            f"{where}: every stream stopped (RESTART CONNECTOR tries them again): {why}"
        )
    specs_of, seen = [], {}
    for name in (n for n in names if n not in held):
        stream = ctx.streams.get(name)
        if stream is None or not stream.schema:
            raise PlanError(f"{where}: stream '{name}' does not exist any more (or has no schema)")
        opts = filled(resolved, name, ctx.source_tables.get(name, name), secret)
        same = seen.setdefault(target_key(plugin, opts, name), name)
        if same != name:
            raise PlanError(
                f"{where}: streams {same} and {name} would be written alike: give"
                f" {naming(plugin, specs)} so that each stream has its own"
            )
        specs_of.append((stream, plugin.plan_sink(opts, stream)))
    paths = {n: ctx.streams[n].path for n in names if n in ctx.streams}
    reader = ReaderSpec(
        FORMAT,
        {
            STREAMS_OPTION: json.dumps(paths),
            HELD_OPTION: json.dumps(held),
            HOLDS_OPTION: holds_file(ctx.checkpoint(entry.name)),
        }
        | ({"tasks": str(resolved["tasks.max"])} if resolved.get("tasks.max") else {}),
        schema=", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in SCHEMA.fields),
    )

    def check(_struct) -> None:  # each stream's as its one-stream sink would check it
        each(lambda sw: sw[1].check(StructType.fromJson(json.loads(sw[0].schema_json))), specs_of)

    options = routed_options([(s.name, json.loads(s.schema_json), w.options) for s, w in specs_of])
    first = specs_of[0][1]
    return reader, replace(first, options=options, check=check, unused=())
