"""A connector's Plan (reader, transform, writer, checkpoint, trigger) built from its catalog
entry; EXPLAIN prints it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from connectql.catalog.store import ConnectorEntry, StreamEntry, table_stream
from connectql.config import MASK, duration_ms, is_secret_key, validate
from connectql.connectors import registry
from connectql.connectors.base import ReaderSpec, WriterSpec
from connectql.errors import PlanError
from connectql.planner.resolve import resolve
from connectql.planner.routes import chosen_streams, routed_specs
from connectql.planner.transform import Transform, compile_select

STREAM_FORMAT = "parquet"  # how sinks read a stream (Spark's file source)
STREAM_WRITER = "connectql_stream"  # how sources write one (runtime/streamwriter.py)


@dataclass(frozen=True)
class Plan:
    connector: str
    kind: str
    type: str
    stream: str
    reader: ReaderSpec
    writer: WriterSpec
    checkpoint: str
    run: str  # 'continuous' | 'once'
    interval_ms: int | None  # None: as fast as data arrives
    tasks: int
    initial_state: str
    transform: Transform | None = None
    options: dict[str, Any] = field(default_factory=dict)  # validated, unresolved
    deadletter: str | None = None  # stream receiving bad records (errors.tolerance = 'all')
    deadletter_path: str | None = None
    table_paths: dict[str, str] = field(default_factory=dict)  # several tables: table -> stream
    inputs: tuple[str, ...] = ()  # a sink of several streams: the streams it reads

    @property
    def streams(self) -> list[str]:
        """The streams the connector reads or writes (less dead letters)."""
        if self.inputs:
            return list(self.inputs)
        if self.table_paths:
            return [table_stream(self.stream, t) for t in self.table_paths]
        return [self.stream]

    def describe(self) -> list[tuple[str, str]]:
        """The plan as (step, detail) rows with secret values masked, for EXPLAIN."""
        trigger = (
            "available-now (run = 'once')"
            if self.run == "once"
            else f"every {self.interval_ms} ms"
            if self.interval_ms
            else "as fast as data arrives"
        )
        rows = [
            ("connector", f"{self.connector} ({self.kind}, type {self.type})"),
            ("read", _spec_text(self.reader)),
        ]
        if self.transform:
            rows.append(
                (
                    "transform",
                    "SELECT "
                    + ", ".join(self.transform.projections)
                    + (f" WHERE {self.transform.where}" if self.transform.where else ""),
                )
            )
        if self.table_paths:
            rows.append(
                (
                    "tables",
                    ", ".join(
                        f"{t} -> {s}" for t, s in zip(self.table_paths, self.streams, strict=True)
                    ),
                )
            )
        if self.inputs:
            rows.append(("streams", ", ".join(self.inputs)))
        rows += [
            ("write", _spec_text(self.writer)),
            ("checkpoint", self.checkpoint),
            ("trigger", trigger),
            ("tasks", str(self.tasks)),
        ]
        if self.deadletter:
            rows.append(("dead letters", f"bad records to stream {self.deadletter}"))
        return rows


def _spec_text(spec: ReaderSpec | WriterSpec) -> str:
    opts = {
        k: MASK if k in spec.secret_options or is_secret_key(k) else v
        for k, v in spec.options.items()
    }
    text = f"format {spec.format}"
    if spec.path:
        text += f" at {spec.path}"
    if getattr(spec, "schema", None):
        text += f" schema ({spec.schema})"
    return text + (f" options {opts}" if opts else "")


@dataclass(frozen=True)
class PlanContext:
    home: Path
    streams: dict[str, StreamEntry]  # known streams by name
    secrets: Any  # a SecretStore
    source_tables: dict[str, str] = field(default_factory=dict)  # stream -> the table it carries

    def stream_path(self, name: str) -> str:
        return str(self.home / "streams" / name)

    def table_paths(self, stream: str, tables) -> dict[str, str]:
        """Where a multi-table source into `stream` writes each table's rows."""
        return {t: self.stream_path(table_stream(stream, t)) for t in tables}

    def checkpoint(self, connector: str) -> str:
        return checkpoint_path(self.home, connector)


def checkpoint_path(home: Path, connector: str) -> str:
    """Where the connector's Spark checkpoint lives under the worker's home."""
    return str(home / "checkpoints" / connector)


def connector_type(entry_type: str | None, options: dict[str, Any], where: str) -> str:
    """The type from FROM/TO or from WITH (connector = ...); both given must agree."""
    in_with = options.get("connector")
    if entry_type and in_with and str(in_with).lower() != entry_type.lower():
        raise PlanError(
            f"{where}: type given twice and differently: '{entry_type}' and connector = '{in_with}'"
        )
    chosen = entry_type or in_with
    if not chosen:
        raise PlanError(
            f"{where}: no connector type: write FROM type / TO type, or connector = 'type' in WITH"
        )
    return str(chosen).lower()


def target_stream(entry_stream: str | None, options: dict[str, Any], where: str) -> str:
    in_with = options.get("stream")
    if entry_stream and in_with and str(in_with) != entry_stream:
        raise PlanError(
            f"{where}: stream given twice and differently: '{entry_stream}' and"
            f" stream = '{in_with}'"
        )
    chosen = entry_stream or in_with
    if not chosen:
        raise PlanError(
            f"{where}: no stream: write INTO stream / FROM stream, or stream = 'name' in WITH"
        )
    return str(chosen)


def build_plan(entry: ConnectorEntry, ctx: PlanContext) -> Plan:
    where = f"{entry.kind} connector '{entry.name}'"
    plugin = registry.lookup(connector_type(entry.type, entry.options, where), entry.kind)
    specs = plugin.options_for(entry.kind)
    options = validate(specs, entry.options, where)
    if options.get("tasks.max") is not None and options["tasks.max"] < 1:
        raise PlanError(f"{where}: tasks.max must be 1 or more, got {options['tasks.max']}")
    resolved = resolve(options, ctx.secrets, specs, where)
    inputs = chosen_streams(entry, options, ctx, where) if options.get("streams") else []
    stream = inputs[0] if inputs else target_stream(entry.stream, entry.options, where)
    if entry.kind == "source":
        reader, transform = plugin.plan_source(resolved, entry.name), None
        writer = WriterSpec(STREAM_WRITER, path=ctx.stream_path(stream))
    elif inputs:
        (reader, writer), transform = (
            routed_specs(plugin, resolved, inputs, ctx, entry, where),
            None,
        )
    else:
        reader, transform = _stream_reader(stream, entry, ctx)
        writer = plugin.plan_sink(resolved, ctx.streams[stream], entry.name)
    interval = options.get("trigger.interval")
    deadletter = _deadletter(options, stream, where)
    return Plan(
        connector=entry.name,
        kind=entry.kind,
        type=plugin.type,
        stream=stream,
        reader=reader,
        writer=writer,
        checkpoint=ctx.checkpoint(entry.name),
        run=options["run"],
        interval_ms=duration_ms(interval) if interval else writer.interval_ms,
        tasks=options.get("tasks.max") or 1,
        initial_state=options["initial.state"],
        transform=transform,
        deadletter=deadletter,
        deadletter_path=ctx.stream_path(deadletter) if deadletter else None,
        options=options,
        table_paths=ctx.table_paths(stream, entry.tables) if entry.kind == "source" else {},
        inputs=tuple(inputs),
    )


def _deadletter(options: dict[str, Any], stream: str, where: str) -> str | None:
    name = options.get("errors.deadletter.stream")
    if options["errors.tolerance"] == "all" and not name:
        raise PlanError(
            f"{where}: errors.tolerance = 'all' needs errors.deadletter.stream,"
            " the stream that receives the bad records"
        )
    if name and name == stream:
        raise PlanError(f"{where}: the dead-letter stream must not be the connector's stream")
    if name and options["errors.tolerance"] == "none":
        raise PlanError(
            f"{where}: errors.deadletter.stream = '{name}' needs errors.tolerance = 'all';"
            " with 'none' a bad record fails the connector and nothing reaches that stream"
        )
    return name if options["errors.tolerance"] == "all" else None


def _stream_reader(stream: str, entry: ConnectorEntry, ctx: PlanContext):
    s = ctx.streams.get(stream)
    if s is None:
        raise PlanError(
            f"sink connector '{entry.name}' reads stream '{stream}', which does not"
            f" exist{_known(ctx.streams)}"
        )
    if not s.schema:
        raise PlanError(
            f"stream '{stream}' has no schema yet: create a source connector into it first"
        )
    # retention.policy = 'drop' may remove a file a sink has planned into a batch but not yet
    # committed: its replay then skips the file (those records are reported lost) instead of failing
    reader = ReaderSpec(STREAM_FORMAT, {"ignoreMissingFiles": "true"}, path=s.path, schema=s.schema)
    if not entry.select_sql:
        return reader, None
    return reader, compile_select(entry.select_sql, stream, stream_columns(s))


def stream_columns(s: StreamEntry) -> list[str]:
    import json

    return [f["name"] for f in json.loads(s.schema_json)["fields"]] if s.schema_json else []


def _known(streams: dict) -> str:
    return f" (known: {', '.join(sorted(streams))})" if streams else " (there are no streams)"
