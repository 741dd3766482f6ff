"""A toolkit Connector as the planner's Plugin: its options with the common ones, and readers
and writers on the toolkit's Spark data source."""

from __future__ import annotations

import functools
import json
import threading
from typing import Any

from connectql.config import Option
from connectql.connectors.base import Found, Plugin, ReaderSpec, WriterSpec
from connectql.connectors.common import SINK_COMMON, SOURCE_COMMON
from connectql.errors import ConnectQLError, PlanError, ValidationError
from connectql.toolkit.connector import Connector
from connectql.toolkit.envelope import DEAD_LETTER_COLUMN

MAX_RECORDS = Option(
    "batch.max.records",
    "int",
    doc="at most this many records per micro-batch (a toolkit source's read limit, where the"
    " source can cut its offsets); absent: the source's own limit (datagen's rows.per.batch),"
    " else everything available",
)

MAX_BYTES = Option(
    "batch.max.bytes",
    "int",
    doc="at most about this many bytes (of the records as read, in Arrow) per micro-batch,"
    " beside batch.max.records (the smaller holds): the bytes of a record are learned from the"
    " batches read before, and a new connector's first batch reads at most 100 records",
)


def plugin_of(connector: Connector, origin: str = "built-in") -> Plugin:
    """The Plugin of a toolkit connector (which must have no problems())."""
    source, sink = connector.source, connector.sink
    return Plugin(
        type=connector.type,
        doc=connector.doc,
        source_options=_source_options(source) if source else None,
        sink_options=_sink_options(sink) if sink else None,
        plan_source=(lambda opts, name="": plan_source(connector, opts, name)) if source else None,
        plan_sink=(
            lambda opts, stream=None, name="": plan_sink(
                connector, _named(opts, stream), stream, name
            )
        )
        if sink
        else None,
        delivery=sink.delivery if sink else "",
        target_options=dict(sink.target_options) if sink else {},
        origin=origin,
        on_drop=lambda opts, name, kind: _dropped(connector, opts, name, kind),
    )


STREAMS = Option(
    "streams",
    doc="several streams instead of FROM stream, each written as by a sink of its own: a comma"
    " list and/or patterns ('shop_*'; * or % any text, ? one character), and streams created"
    " later that match; in the other options ${stream} is the stream's name and ${table} the"
    " source table it carries (e.g. table = 'out_${table}'); one query for them all",
)


OWNED = ("connector", "stream", STREAMS.name)  # options the planner reads itself


def reserved(connector: Connector) -> list[str]:
    """The options a connector declares that connectql owns (`stream`, ...): declared again,
    every CREATE would meet them twice. (A common option such as tasks.max may be declared
    again, with a default of the connector's own.)"""
    found = []
    for kind, cls in (("source", connector.source), ("sink", connector.sink)):
        names = [o.name for o in getattr(cls, "options", ()) if o.name in OWNED]
        if names:
            found.append(
                f"its {kind} declares {', '.join(names)}, which connectql gives every {kind}"
                " (rename them)"
            )
    return found


def _sink_options(sink) -> dict[str, Option]:
    """A sink's options: the common ones, streams (when it writes several), its own."""
    return _options(SINK_COMMON, *((STREAMS,) if sink.several else ()), *sink.options)


def _source_options(source) -> dict[str, Option]:
    """A source's options: the common ones, the read limit (unless it plans its batches
    itself), its own."""
    limit = () if source.plans_batches else (MAX_RECORDS, MAX_BYTES)
    return _options(SOURCE_COMMON, *limit, *source.options)


def _dropped(connector: Connector, opts: dict[str, Any], name: str, kind: str) -> str | None:
    cls = connector.source if kind == "source" else connector.sink
    if cls is None:
        return None
    found = cls(opts)
    found.connector = name  # as when it runs (toolkit/spark.py)
    return found.on_drop(name)


def _named(opts: dict[str, Any], stream) -> dict[str, Any]:
    """A sink's options with `stream` naming the stream it reads (FROM stream)."""
    return {**opts, "stream": stream.name} if stream is not None else opts


def _options(common: dict[str, Option], *declared: Option) -> dict[str, Option]:
    return {**common, **{o.name: o for o in declared}}


def _secret(specs) -> set[str]:
    return {o.name for o in specs if o.secret}


def _hidden(spark_options: dict[str, str]) -> tuple[str, ...]:
    """The Spark option keys that carry secret values (EXPLAIN masks them)."""
    from connectql.toolkit.spark import SECRET_PREFIX

    return tuple(k for k in spark_options if k.startswith(SECRET_PREFIX))


def plan_source(connector: Connector, opts: dict[str, Any], name: str = "") -> ReaderSpec:
    """The reader of a toolkit source. What it reads (tables(), schema(), key()) and how much
    (total_records()) are asked only when wanted (CREATE, EXPLAIN, a schema's evolution, a
    progress bar): a start needs no call to the external system before its query runs."""
    from connectql.toolkit.spark import MAX_BYTES_KEY, MAX_RECORDS_KEY, spark_options

    where = f"{connector.type} source" + (f" '{name}'" if name else "")
    for limit in (MAX_RECORDS.name, MAX_BYTES.name):
        if opts.get(limit) is not None and int(opts[limit]) < 1:
            raise ValidationError(f"{where}: {limit} must be 1 or more, got {opts[limit]}")
    call = _bounded(opts)
    source = call(where, connector.source, opts)
    source.connector = name  # as when it runs (toolkit/spark.py): CREATE's calls know it too
    call(where, source.check)
    if opts.get("run") == "once":
        call(where, source.available_now)
    options = spark_options(connector.source, opts, _secret(connector.source.options))
    if opts.get("batch.max.records"):
        options[MAX_RECORDS_KEY] = str(opts["batch.max.records"])
    if opts.get("batch.max.bytes"):
        options[MAX_BYTES_KEY] = str(opts["batch.max.bytes"])
    return ReaderSpec(
        "connectql_toolkit",
        options,
        discover=lambda: _found(where, source, call),
        lag_field=source.lag_field,  # the instance's: it may depend on the options
        lag_bytes_field=source.lag_bytes_field,
        count_rows=lambda: call(where, source.total_records),
        secret_options=_hidden(options),
        # one table's records that do not parse travel in this column; several tables' are
        # packed (multitable.with_tables_schemas takes the column away)
        corrupt_column=DEAD_LETTER_COLUMN if opts.get("errors.tolerance") == "all" else None,
        endpoint=call(where, source.endpoint),
        packs=True,
        adds_tables=bool(call(where, source.adds_tables)),
    )


def _found(where: str, source, call) -> list[Found]:
    """What the source reads: its tables, or its one table's schema and key."""
    from connectql.toolkit.spark import ddl

    tables = _tables(where, source, call)
    if tables:
        return tables
    schema = _call(where, ddl, call(where, source.schema))
    return [Found(None, schema, tuple(call(where, source.key)))]


def _tables(where: str, source, call) -> list[Found]:
    """A several-table source's tables as the planner takes them (none: one table)."""
    from connectql.toolkit.source import Table
    from connectql.toolkit.spark import ddl

    found = call(where, source.tables) or []
    if any(not isinstance(t, Table) for t in found):
        raise PlanError(f"{where}: tables() returns connectql.toolkit.Table values")
    names = [t.name for t in found]
    if len(set(names)) < len(names) or any(not isinstance(n, str) or not n for n in names):
        raise PlanError(f"{where}: tables() gives each table a name of its own: {names}")
    return [Found(t.name, _call(where, ddl, t.schema), tuple(t.key)) for t in found]


def plan_sink(
    connector: Connector, opts: dict[str, Any], stream=None, name: str = ""
) -> WriterSpec:
    """The writer of a toolkit sink of `stream` (its catalog entry; None: not known yet)."""
    from connectql.toolkit.spark import STREAM_KEY_KEY, described_schema, spark_options

    where = f"{connector.type} sink" + (f" '{name}'" if name else "")
    if opts.get("errors.tolerance") == "all" and not connector.sink.rejects:
        raise ValidationError(
            f"{where} refuses errors.tolerance = 'all': it rejects no record it is given, so a"
            " record it cannot write fails the batch whatever the option says"
        )
    call = _bounded(opts)
    sink = call(where, connector.sink, opts)
    sink.connector = name
    sink.stream_key = tuple(stream.key_columns) if stream is not None else ()
    options = spark_options(connector.sink, opts, _secret(connector.sink.options))
    options[STREAM_KEY_KEY] = json.dumps(list(sink.stream_key))
    return WriterSpec(
        "connectql_toolkit",
        options,
        secret_options=_hidden(options),
        check=lambda struct: call(where, sink.check, described_schema(struct)),
        unused=tuple(call(where, sink.unread_columns)),
        interval_ms=call(where, sink.flush_interval_ms),
        endpoint=call(where, sink.endpoint),
    )


def _bounded(opts: dict[str, Any]):
    """_call with the connector's call.timeout.ms."""
    limit = opts.get("call.timeout.ms")
    return functools.partial(_call, limit_ms=limit) if limit else _call


def _call(where: str, fn, *args, limit_ms: int | None = None):
    """fn(*args); an error that is not connectql's own becomes a PlanError naming `where`.
    With `limit_ms`, a call that has not returned by then fails the statement instead (a
    plugin's code that hangs must not hold the worker; its thread is left to end by itself)."""
    if not limit_ms:
        return _plain(where, fn, *args)
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["value"] = _plain(where, fn, *args)
        except BaseException as e:  # noqa: BLE001 (raised on the caller's thread)
            outcome["error"] = e

    thread = threading.Thread(target=call, name=f"connectql-call-{where}", daemon=True)
    thread.start()
    thread.join(limit_ms / 1000)
    if thread.is_alive():
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", "a call")
        raise PlanError(
            f"{where}: {name}() did not return within {limit_ms} ms (call.timeout.ms); the"
            " statement is refused and nothing was created"
        )
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _plain(where: str, fn, *args):
    from connectql.toolkit.source import Retryable

    try:
        return fn(*args)
    except ConnectQLError:
        raise
    except Retryable as e:  # the toolkit's own: its message is meant for the user as it is
        raise PlanError(f"{where}: {e}") from None
    except Exception as e:
        raise PlanError(f"{where}: {type(e).__name__}: {e}") from None
