"""SHOW and DESCRIBE: catalog objects and plugins as tables, secrets always redacted."""

from __future__ import annotations

import json

from connectql.catalog.redact import redact
from connectql.connectors import registry
from connectql.connectors.relational import declared
from connectql.errors import CatalogError
from connectql.grammar import ast
from connectql.worker import settings
from connectql.worker.results import Result
from connectql.worker.retainer import effective_options


def show(worker, s: ast.Show) -> Result:
    cat = worker.catalog
    if s.what == "connectors":
        where, params = (" WHERE name LIKE ?", [s.like]) if s.like else ("", [])
        cols, rows = cat.query(
            "SELECT name, kind, type, stream, state, rows_total, lag,"
            f" last_error FROM connectors{where} ORDER BY name",
            params,
        )
        return Result(columns=cols, rows=rows, title="connectors")
    if s.what == "streams":
        rows = [
            (st.name, st.schema or "(none yet)", _writers(worker, st.name), st.path)
            for st in cat.streams()
        ]
        return Result(columns=["name", "schema", "connectors", "path"], rows=rows, title="streams")
    if s.what == "plugins":
        rows = [
            (
                p.type,
                ", ".join(p.kinds) or "-",
                p.origin,
                "yes" if p.installed else "no",
                p.delivery or "-",
                p.problem or "",
                p.doc,
            )
            for p in registry.listing()
        ]
        return Result(
            columns=["type", "kinds", "origin", "installed", "delivery", "problem", "doc"],
            rows=rows,
            title="connector plugins",
        )
    if s.what == "settings":
        return Result(
            columns=["key", "value", "type", "default", "doc"],
            rows=settings.rows(cat.settings()),
            title="worker settings",
        )
    return Result(columns=["name"], rows=[(n,) for n in worker.secrets.names()], title="secrets")


def _writers(worker, stream: str) -> str:
    return ", ".join(e.name for e in worker.catalog.connectors() if stream in e.streams)


def describe(worker, s: ast.Describe) -> Result:
    return {"connector": _connector, "stream": _stream, "plugin": _plugin}[s.what](worker, s.name)


def _connector(worker, name: str) -> Result:
    e = worker.catalog.get_connector(name)
    _, rows = worker.catalog.query(
        "SELECT state, desired_state, rows_total, rows_per_sec, last_batch_at, lag, lag_bytes,"
        " last_error, created_at, updated_at FROM connectors WHERE name = ?",
        [name],
    )
    keys = [
        "state",
        "desired_state",
        "rows_total",
        "rows_per_sec",
        "last_batch_at",
        "lag",
        "lag_bytes",
        "last_error",
        "created_at",
        "updated_at",
    ]
    props = [
        ("name", e.name),
        ("kind", e.kind),
        ("type", e.type),
        ("stream", ", ".join(e.streams)),
        *([("tables", ", ".join(e.tables))] if e.tables else []),
        *[(f"{_part(e)} {t} stopped", error) for t, error in e.tables_failed.items()],
        *zip(keys, rows[0], strict=True),
        ("checkpoint", worker.checkpoint_of(name)),
        ("runs as", _runs_as(worker, name)),
        *_offsets(worker, name),
    ]
    if e.select_sql:
        props.append(("transform", e.select_sql))
    props += [(f"option {k}", _show_value(v)) for k, v in redact(e.options).items()]
    return Result(
        columns=["property", "value"],
        rows=[(k, _text(v)) for k, v in props],
        title=f"connector {name}",
    )


def _offsets(worker, name: str) -> list[tuple[str, str]]:
    """The source's committed and latest offsets (connector_offsets), and a partitioned
    source's position in each partition ({"at": {"topic:0": 120, ...}}: Kafka's shape)."""
    _, rows = worker.catalog.query(
        "SELECT committed_offset, latest_offset FROM connector_offsets WHERE connector = ?", [name]
    )
    if not rows:
        return []
    committed, latest = (json.loads(v) if v else None for v in rows[0])
    out = [("offset", json.dumps(committed)), ("latest offset", json.dumps(latest))]
    at = committed.get("at") if isinstance(committed, dict) else None
    if isinstance(at, dict):
        newest = (latest or {}).get("at") or {}
        out += [(f"position {k}", f"{v} (latest {newest.get(k, '?')})") for k, v in at.items()]
    return out


def _part(entry) -> str:
    """What a connector's tables_failed names: a source's tables, a sink's streams."""
    return "stream" if entry.kind == "sink" else "table"


def _runs_as(worker, name: str) -> str:
    """How the connector runs in this worker now: chained to its source, or its own query."""
    engine = worker.engine
    if name in engine.rides:
        return "chained: it writes the batches of its stream's source (SET sink.chaining)"
    return "its own Spark query" if engine.is_active(name) else "not running in this worker"


def _complex(type_json: dict) -> str:
    """An array, map or struct type as Spark writes it in DDL: map<string,string>."""
    from pyspark.sql.types import _parse_datatype_json_value

    return _parse_datatype_json_value(type_json).simpleString()


def _stream(worker, name: str) -> Result:
    st = worker.catalog.get_stream(name)
    fields = json.loads(st.schema_json)["fields"] if st.schema_json else []
    columns = [
        (
            f"column {f['name']}",
            (f["type"] if isinstance(f["type"], str) else _complex(f["type"]))
            + ("" if f.get("nullable", True) else " NOT NULL")
            + declared.shown(f.get("metadata")),
        )
        for f in fields
    ]
    stats = worker.retainer.measure(st)
    settings = worker.catalog.settings()
    retention = [
        (f"option {k}", f"{v}" + ("" if st.retention_options.get(k) else " (worker default)"))
        for k, v in effective_options(st, settings).items()
        if v
    ]
    readers = [
        (
            f"sink {sink}",
            f"{r['records_behind']} records ({r['files_behind']} files) behind"
            + ("; holds retention back" if r["holds_retention"] else ""),
        )
        for sink, r in stats["readers"].items()
    ]
    props = [
        ("name", st.name),
        ("path", st.path),
        ("key", st.key),
        ("connectors", _writers(worker, name) or "none"),
        *columns,
        *retention,
        *[(k, stats[k]) for k in ("records", "files", "bytes", "oldest_record", "newest_record")],
        *readers,
    ]
    return Result(
        columns=["property", "value"],
        rows=[(k, _text(v)) for k, v in props],
        title=f"stream {name}",
    )


def _plugin(worker, name: str) -> Result:
    plugin = registry.lookup(name)
    rows = []
    for kind in plugin.kinds:
        for o in plugin.options_for(kind).values():
            rows.append(
                (
                    kind,
                    o.name,
                    o.describe_type(),
                    _text(o.default),
                    "yes" if o.required else "no",
                    "yes" if o.secret else "no",
                    o.doc,
                )
            )
    if not rows:
        raise CatalogError(f"plugin {name} declares no options")
    title = f"plugin {plugin.type} ({plugin.origin}): {plugin.doc}"
    if plugin.delivery:
        title += f" Sink delivery: {plugin.delivery}."
    return Result(
        columns=["kind", "option", "type", "default", "required", "secret", "doc"],
        rows=rows,
        title=title,
    )


def _show_value(v):
    return v if isinstance(v, str) else json.dumps(v)


def _text(v) -> str:
    return "" if v is None else str(v)
