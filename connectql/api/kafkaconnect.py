"""Kafka Connect's REST shapes: a `{"name", "config"}` body as a CREATE statement, and
connectors, statuses, offsets, plugins and config validation as Kafka Connect shows them."""

from __future__ import annotations

import json
from typing import Any

from connectql.api import models
from connectql.catalog.redact import MASK, redact, redact_value
from connectql.catalog.store import ConnectorEntry
from connectql.config import is_reference, is_secret_key
from connectql.connectors import registry
from connectql.connectors.options import option_errors
from connectql.errors import ConnectQLError, ValidationError
from connectql.grammar import ast
from connectql.planner.resolve import resolve_value


def statement(body: Any) -> ast.CreateSourceConnector | ast.CreateSinkConnector:
    """`{"name": ..., "config": {"connector.class": ..., ...}}` as the CREATE it stands for.
    The class names our type, as `postgres`, `postgres-sink` or `PostgresSinkConnector`; a sink
    reads the stream named by `topics` (or `stream`)."""
    given = models.parsed(models.NewConnector, body)
    if given is None:
        raise ValidationError(
            'the body must be a CREATE statement or {"name": ..., "config": {...}}'
        )
    config = {str(k): v for k, v in given.config.items()}
    name = given.name or config.pop("name", None)
    config.pop("name", None)
    if not ast.is_name(name):
        raise ValidationError(f"connector name {name!r} must be a word: letters, digits and _")
    check_values(config)
    type_, kind = plugin_class(config, "topics" in config)
    if kind == "source":
        return ast.CreateSourceConnector(name, type_, None, config)
    topics = config.pop("topics", None)
    if topics is not None:
        if "," in str(topics):
            raise ValidationError(f"a sink reads one stream; topics = '{topics}' names several")
        config["stream"] = str(topics)
    return ast.CreateSinkConnector(name, type_, None, config)


def check_values(config: dict[str, Any]) -> None:
    """ValidationError unless every value is a string, number or boolean."""
    bad = [k for k, v in config.items() if not isinstance(v, (str, int, float, bool))]
    if bad:
        raise ValidationError(f"config value of '{bad[0]}' must be a string, number or boolean")


def plugin_class(config: dict[str, Any], sink_hint: bool = False) -> tuple[str, str]:
    """(type, kind) named by (and removed from) config's connector.class."""
    cls = config.pop("connector.class", None)
    if not isinstance(cls, str) or not cls.strip():
        raise ValidationError("config needs connector.class: the connector type, e.g. 'datagen'")
    return _type_and_kind(cls, *_split(cls), sink_hint)


def _split(cls: str) -> tuple[str, str | None]:
    """'io.x.PostgresSinkConnector' -> ('postgres', 'sink'); 'datagen' -> ('datagen', None)."""
    word = cls.strip().rsplit(".", 1)[-1].lower().removesuffix("connector").rstrip("-_")
    kind = next((k for k in ("source", "sink") if word.endswith(k) and word != k), None)
    return (word.removesuffix(kind).rstrip("-_") if kind else word), kind


def _type_and_kind(cls: str, type_: str, kind: str | None, sink_hint: bool) -> tuple[str, str]:
    plugin = registry.lookup(type_, kind)
    if kind is None:
        kinds = plugin.kinds
        kind = "sink" if sink_hint and "sink" in kinds else kinds[0] if len(kinds) == 1 else None
    if kind is None:
        raise ValidationError(
            f"connector.class '{cls}' can be a source or a sink: write '{plugin.type}-source'"
            f" or '{plugin.type}-sink'"
        )
    return plugin.type, kind


def info(entry: ConnectorEntry) -> dict[str, Any]:
    """GET /connectors/{name}: the connector with its config (secrets redacted) and tasks."""
    return {
        "name": entry.name,
        "config": config(entry),
        "tasks": [{"connector": entry.name, "task": i} for i in range(entry.tasks or 1)],
        "type": entry.kind,
    }


def config(entry: ConnectorEntry, in_use: bool = False) -> dict[str, Any]:
    """GET /connectors/{name}/config: the options as written (secrets masked); `in_use`
    (?resolved=true): a non-secret ${env:...} or ${file:...} as the worker resolves it now."""
    options = redact(entry.options)
    if in_use:
        options = {k: _in_use(k, v, entry.options[k]) for k, v in options.items()}
    out = {
        "connector.class": entry.type,
        "name": entry.name,
        "stream": entry.stream,
        **{k: _text(v) for k, v in options.items()},
    }
    if entry.select_sql:
        out["transform"] = entry.select_sql
    return out


def _in_use(key: str, shown: Any, written: Any) -> Any:
    if is_secret_key(key) or not is_reference(written):
        return shown
    try:
        return resolve_value(key, written, None)
    except ConnectQLError as e:  # e.g. the variable is not set in the worker's environment
        return f"{shown} ({e})"


def _text(v: Any) -> Any:
    return v if isinstance(v, (str, int, float, bool)) or v is None else str(v)


def status(entry: ConnectorEntry, row: dict[str, Any], worker_id: str) -> dict[str, Any]:
    """GET /connectors/{name}/status: Kafka Connect's shape plus connectql's counts. A
    connector's tasks are partitions of its one query, so they share its state."""
    state = row["state"]
    connector = {"state": state, "worker_id": worker_id}
    if row.get("last_error"):
        connector["trace"] = row["last_error"]
    return {
        "name": entry.name,
        "connector": connector,
        "tasks": [
            {"id": i, "state": state, "worker_id": worker_id} for i in range(entry.tasks or 1)
        ],
        "type": entry.kind,
        **{k: v for k, v in row.items() if k not in ("state", "name")},
    }


def offsets(name: str, committed: str | None, latest: str | None) -> dict[str, Any]:
    """GET /connectors/{name}/offsets in Kafka Connect 3.6's shape: one partition, the query."""
    if committed is None and latest is None:
        return {"offsets": []}
    return {
        "offsets": [
            {
                "partition": {"connector": name},
                "offset": json.loads(committed) if committed else None,
                "latest": json.loads(latest) if latest else None,
            }
        ]
    }


def plugins() -> list[dict[str, str]]:
    """GET /connector-plugins: one entry per type and kind, as Kafka Connect lists classes."""
    return [
        {
            "class": p.type,
            "type": kind,
            "version": _version(p.origin),
            "origin": p.origin,
            "delivery": p.delivery or None,
            "doc": p.doc,
        }
        for p in sorted(registry.plugins().values(), key=lambda p: p.type)
        if p.installed
        for kind in p.kinds
    ]


def _version(origin: str) -> str:
    """A plugin's version: its package's ('name 1.2' -> '1.2'), or connectql's."""
    return origin.rsplit(" ", 1)[-1] if origin != "built-in" else "connectql"


def validate(type_name: str, body: Any) -> dict[str, Any]:
    """PUT /connector-plugins/{type}/config/validate: every declared option of the type's kind
    with its value and errors; unknown keys are reported too. Kafka Connect's shape."""
    if not isinstance(body, dict):
        raise ValidationError("the body must be a JSON object of config keys and values")
    check_values(body)
    given = {str(k).lower(): v for k, v in body.items()}
    named = given.pop("connector.class", None)
    given.pop("name", None)
    sink_hint = "topics" in given
    if sink_hint:
        given["stream"] = given.pop("topics")
    path_type, path_kind = _split(type_name)
    named_type, named_kind = _split(str(named)) if named else (path_type, path_kind)
    if registry.lookup(named_type).type != registry.lookup(path_type).type:
        raise ValidationError(
            f"connector.class '{named}' does not match the plugin in the path, '{type_name}'"
        )
    type_, kind = _type_and_kind(
        str(named or type_name), path_type, named_kind or path_kind, sink_hint
    )
    specs = registry.lookup(type_, kind).options_for(kind)
    problems = option_errors(specs, given)
    configs = [
        {
            "definition": {
                "name": o.name,
                "type": o.type.upper(),
                "required": o.required,
                "default_value": None if o.default is None else str(o.default),
                "documentation": o.doc,
                "secret": o.secret,
            },
            "value": {
                "name": o.name,
                "value": _shown(o.name, given.get(o.name, o.default), o.secret),
                "recommended_values": list(o.choices),
                "errors": problems.get(o.name, []),
                "visible": True,
            },
        }
        for o in specs.values()
    ]
    configs += [
        {"definition": None, "value": {"name": k, "value": None, "errors": problems[k]}}
        for k in problems
        if k not in specs
    ]
    return {
        "name": type_,
        "type": kind,
        "error_count": sum(len(v) for v in problems.values()),
        "groups": ["Common", type_],
        "configs": configs,
    }


def _shown(name: str, value: Any, secret: bool) -> Any:
    if value is None:
        return None
    return MASK if secret else str(redact_value(name, value))


def version() -> dict[str, Any]:
    """GET /: Kafka Connect's version info; connectql has no Kafka cluster."""
    from connectql import __version__

    return {"version": __version__, "commit": "connectql", "kafka_cluster_id": None}


def changes(entry: ConnectorEntry, body: Any, partial: bool = False) -> dict[str, Any]:
    """The options of a PUT (whole config) or PATCH (some keys) config body that differ from
    the connector's; connector.class and the stream must stay as they are."""
    if not isinstance(body, dict):
        raise ValidationError("the body must be a JSON object of config keys and values")
    config = {str(k).lower(): v for k, v in body.items()}
    if any(v is None for v in config.values()):
        raise ValidationError("a config value cannot be null: connectql has no option removal")
    check_values(config)
    config.pop("name", None)
    config.pop("initial.state", None)  # how CREATE left it; PAUSE and RESUME change it since
    cls = config.pop("connector.class", None)
    if cls is not None and _split(str(cls))[0] != _split(entry.type)[0]:
        raise ValidationError(
            f"connector '{entry.name}' is a {entry.type} connector, not {cls}: drop and re-create it"
        )
    stream = config.pop("topics", None) or config.pop("stream", None)
    if stream is not None and str(stream) != entry.stream:
        raise ValidationError(
            f"connector '{entry.name}' uses stream '{entry.stream}', not '{stream}':"
            " drop and re-create it"
        )
    if not partial and config.get("transform", entry.select_sql) != entry.select_sql:
        raise ValidationError("transform cannot be changed: drop and re-create the connector")
    config.pop("transform", None)
    return {
        k: v
        for k, v in config.items()
        if v != MASK and (k not in entry.options or str(entry.options[k]) != str(v))
    }


def tasks(entry: ConnectorEntry) -> list[dict[str, Any]]:
    """GET /connectors/{name}/tasks: a task is a partition of the connector's one query."""
    return [
        {"id": {"connector": entry.name, "task": i}, "config": config(entry)}
        for i in range(entry.tasks or 1)
    ]


def restart_flags(query: dict[str, str]) -> dict[str, bool]:
    """restart's ?includeTasks= and ?onlyFailed= (true or false; false when left out)."""
    flags = {}
    for name in ("includeTasks", "onlyFailed"):
        value = query.get(name, "false").lower()
        if value not in ("true", "false"):
            raise ValidationError(f"{name} takes true or false, not {query[name]!r}")
        flags[name] = value == "true"
    return flags


def offsets_reset(body: Any) -> None:
    """ValidationError unless the body is {"offsets": [...]} with every offset null: connectql
    forgets a connector's offsets, it cannot set them to a value."""
    offsets = body.get("offsets") if isinstance(body, dict) else None
    if isinstance(offsets, list) and any(
        isinstance(o, dict) and o.get("offset") is not None for o in offsets
    ):
        raise ValidationError(
            "connectql can only reset a connector's offsets (every offset null), not set them"
            " to a value: its checkpoint is Spark's, not Kafka Connect's offsets topic"
        )
    if models.parsed(models.OffsetsReset, body) is None:
        raise ValidationError('the body must be {"offsets": [{"partition": ..., "offset": null}]}')


def plugin_config(type_name: str) -> list[dict[str, Any]]:
    """GET /connector-plugins/{type}/config: the type's declared options, as definitions."""
    return [c["definition"] for c in validate(type_name, {})["configs"] if c["definition"]]
