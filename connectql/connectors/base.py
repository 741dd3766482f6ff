"""The contract between a connector and the planner: what a plugin declares and returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from connectql.config import Option


@dataclass(frozen=True)
class Found:
    """What a source found it reads at CREATE: a table (None: the source's one table or
    query), its rows' Spark DDL and its key columns."""

    table: str | None
    ddl: str
    key: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReaderSpec:
    """How Spark reads: `spark.readStream.format(format).options(options).schema(schema).load(path)`."""

    format: str
    options: dict[str, str] = field(default_factory=dict)
    path: str | None = None
    schema: str | None = None  # Spark DDL; None = inferred from the data when the plan starts
    lag_field: str | None = None  # numeric key of the offset dict whose latest - end is the lag
    lag_bytes_field: str | None = None  # the same, counting bytes: connectors.lag_bytes
    # the size of bounded work (a cdc snapshot's tables, a generator's rows), asked once by
    # whoever shows progress; None: not known
    count_rows: Callable[[], int | None] | None = field(default=None, compare=False)
    secret_options: tuple[str, ...] = ()  # option names whose values must never be shown
    corrupt_column: str | None = None  # column holding the raw text of a record that did not parse
    # Spark skips the files it cannot read (ignoreCorruptFiles); each becomes a dead letter
    skips_unreadable: bool = False
    key: tuple[str, ...] = ()  # columns identifying a row (a table's primary key)
    # Called at CREATE when `schema` is None and the source knows its own schema (database
    # tables): what it reads, one Found per table of a multi-table source; raises PlanError
    # naming what is wrong.
    discover: Callable[[], list[Found]] | None = field(default=None, compare=False)
    endpoint: str | None = None  # host:port the reads wait on (named when a batch hangs)
    # one table's rows can travel packed (multitable.packed_one): a Spark row per chunk of rows
    packs: bool = False
    # a source of several tables that takes tables added while it runs (ALTER ... SET table)
    adds_tables: bool = False


@dataclass(frozen=True)
class WriterSpec:
    """How Spark writes: `df.writeStream.format(format).options(options).start(path)`."""

    format: str
    options: dict[str, str] = field(default_factory=dict)
    path: str | None = None
    secret_options: tuple[str, ...] = ()
    # Called once, at CREATE, with the StructType of the rows the sink will get: prepares the
    # target (e.g. creates its table) or raises PlanError naming what is wrong.
    check: Callable[[Any], None] | None = field(default=None, compare=False)
    # columns of the input the writer never reads: dropped before it, so Spark does not read
    # them from the stream at all (e.g. an upsert's __source)
    unused: tuple[str, ...] = ()
    endpoint: str | None = None  # host:port the writes wait on (named when a batch hangs)
    interval_ms: int | None = None  # the sink's own micro-batch pace, unless trigger.interval


@dataclass(frozen=True)
class Plugin:
    """One connector type. A type that is known but not yet built has installed=False."""

    type: str
    doc: str
    source_options: dict[str, Option] | None = None  # None: cannot be a source
    sink_options: dict[str, Option] | None = None  # None: cannot be a sink
    plan_source: Callable[[dict[str, Any], str], ReaderSpec] | None = None  # (options, name)
    # (options, StreamEntry, the connector's name)
    plan_sink: Callable[[dict[str, Any], Any, str], WriterSpec] | None = None
    # DROP CONNECTOR's cleanup in the external system, (resolved options, connector name,
    # 'source' or 'sink') -> what it did, or None
    on_drop: Callable[[dict[str, Any], str, str], str | None] | None = None
    delivery: str = ""  # what a sink promises: 'exactly-once', 'idempotent' or 'at-least-once'
    # a sink of several streams: the options naming each stream's target, with the sink's own
    # mark for the stream's name in them ('' for none), e.g. {'file.name.template': '{stream}'}
    target_options: dict[str, str] = field(default_factory=dict)
    installed: bool = True
    aliases: tuple[str, ...] = ()
    origin: str = "built-in"  # or the package that provides it: 'name version'
    problem: str | None = None  # why a plugin that was found cannot be used (installed=False)

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(
            k
            for k, o in (("source", self.source_options), ("sink", self.sink_options))
            if o is not None
        )

    def options_for(self, kind: str) -> dict[str, Option]:
        return (self.source_options if kind == "source" else self.sink_options) or {}
