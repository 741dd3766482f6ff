"""The HTTP API described in OpenAPI 3.0, served at /openapi.json (and used to test it)."""

from __future__ import annotations

from connectql.connectors import registry
from connectql.server.routes import EXPAND, ROUTES

_ERROR = {
    "type": "object",
    "properties": {"error_code": {"type": "integer"}, "message": {"type": "string"}},
    "required": ["error_code", "message"],
}
_OBJECT = {"type": "object"}
_CONFIG = {
    "type": "object",
    "additionalProperties": {
        "oneOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]
    },
}
_NAME = {
    "name": "name",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
    "description": "the connector's name",
}


def plugin_names() -> list[str]:
    """Each installed type as `type-kind`, and bare where it has one kind only: the names that
    say which options to check (`file` alone could be a source or a sink)."""
    names = []
    for plugin in sorted(registry.plugins().values(), key=lambda p: p.type):
        if plugin.installed:
            names += [f"{plugin.type}-{kind}" for kind in plugin.kinds]
            names += [plugin.type] if len(plugin.kinds) == 1 else []
    return names


_TYPE = {
    "name": "type",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "enum": plugin_names()},
    "description": "a connector type and kind; class names such as PostgresSinkConnector and"
    " aliases (mariadb, postgresql) are taken too",
}
_SQL_BODY = {
    "required": True,
    "content": {
        "text/plain": {"schema": {"type": "string"}, "example": "SHOW CONNECTORS"},
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {"sql": {"type": "string"}, "source": {"type": "string"}},
                "required": ["sql"],
            },
            "example": {"sql": "SHOW CONNECTORS; SELECT count(*) FROM numbers"},
        },
    },
}
_CREATE_BODY = {
    "required": True,
    "content": {
        "text/plain": {
            "schema": {"type": "string"},
            "example": "CREATE SOURCE CONNECTOR gen FROM datagen INTO numbers"
            " WITH ('rows.per.second' = 10)",
        },
        "application/json": {
            "schema": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "config": _CONFIG},
                "required": ["name", "config"],
            },
            "example": {
                "name": "out",
                "config": {"connector.class": "file-sink", "topics": "numbers", "path": "out"},
            },
        },
    },
}

# handler -> (summary, extra operation fields, success status, success schema)
_OPERATIONS = {
    "list_connectors": (
        "Connector names; ?expand=status,info for each one's status and info",
        {
            "parameters": [
                {
                    "name": "expand",
                    "in": "query",
                    "required": False,
                    "description": "status and/or info: repeated, as Kafka Connect takes them"
                    " (?expand=status&expand=info), or separated by commas",
                    "style": "form",
                    "explode": True,
                    "schema": {"type": "array", "items": {"type": "string", "enum": EXPAND}},
                }
            ]
        },
        "200",
        {"oneOf": [{"type": "array", "items": {"type": "string"}}, _OBJECT]},
    ),
    "create_connector": (
        "Create a connector from a CREATE statement or Kafka Connect's {name, config}",
        {"requestBody": _CREATE_BODY},
        "201",
        _OBJECT,
    ),
    "get_connector": ("A connector, its config and tasks", {}, "200", _OBJECT),
    "delete_connector": ("Drop a connector (and what it made upstream)", {}, "200", _OBJECT),
    "get_config": ("A connector's config, secrets redacted", {}, "200", _OBJECT),
    "get_status": ("A connector's state, tasks, counts and last error", {}, "200", _OBJECT),
    "pause": ("Pause a connector; its offsets are kept", {}, "202", _OBJECT),
    "resume": ("Resume a paused connector from its checkpoint", {}, "202", _OBJECT),
    "restart": ("Restart a connector from its checkpoint", {}, "202", _OBJECT),
    "get_offsets": ("A connector's committed and latest offsets", {}, "200", _OBJECT),
    "reset_offsets": (
        "Forget a paused, failed or finished connector's offsets (RESET ... OFFSETS)",
        {},
        "200",
        _OBJECT,
    ),
    "list_plugins": (
        "Installed connector types, one entry per kind",
        {},
        "200",
        {"type": "array", "items": _OBJECT},
    ),
    "validate_config": (
        "Check a config against a type's declared options",
        {
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": _CONFIG, "example": {"rows.per.second": 10}}
                },
            }
        },
        "200",
        _OBJECT,
    ),
    "sql": (
        "Run a script; each statement's result (the first failure stops it)",
        {"requestBody": _SQL_BODY},
        "200",
        _OBJECT,
    ),
    "streams": ("The streams and their schemas", {}, "200", {"type": "array", "items": _OBJECT}),
    "health": ("The worker is up; connectors by state", {}, "200", _OBJECT),
    "metrics": ("Prometheus metrics per connector", {}, "200", None),
    "openapi": ("This description", {}, "200", _OBJECT),
}


def _operation(method: str, path: str, handler: str) -> dict:
    summary, extra, ok, schema = _OPERATIONS[handler]
    params = [p for p, token in ((_NAME, "{name}"), (_TYPE, "{type}")) if token in path]
    content = (
        {"text/plain": {"schema": {"type": "string"}}}
        if schema is None
        else {"application/json": {"schema": schema}}
    )
    responses = {ok: {"description": "done", "content": content}}
    for code, why in (
        ("400", "bad request: the message names what is wrong"),
        ("401", "a token is needed"),
        ("404", "no such connector"),
        ("405", "method not allowed"),
        ("408", "the body did not arrive in time"),
        ("409", "conflict with the connector's state"),
        ("411", "the body came without a Content-Length (chunked bodies are not read)"),
        ("413", "body too large"),
    ):
        responses[code] = {"description": why, "content": {"application/json": {"schema": _ERROR}}}
    op = {"operationId": handler, "summary": summary, "responses": responses, **extra}
    op["parameters"] = params + extra.get("parameters", [])
    return op


def _paths() -> dict:
    paths: dict[str, dict] = {}
    for method, path, handler in ROUTES:
        paths.setdefault(path, {})[method.lower()] = _operation(method, path, handler)
    return paths


SPEC = {
    "openapi": "3.0.3",
    "info": {
        "title": "connectql",
        "version": "1",
        "description": "A connectql worker: connectors as Spark streaming queries, managed with"
        " SQL or Kafka Connect's REST shapes. With a token, send Authorization: Bearer <token>.",
    },
    "paths": _paths(),
}
