"""What the OpenAPI document says of each route beyond its models: summary, success status and
model, and the parameters and bodies FastAPI cannot see (the handlers read the raw request, as
a body may be SQL text or JSON)."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter

from connectql.api import models
from connectql.api.routes import EXPAND
from connectql.connectors import registry

_NAME = {
    "name": "name",
    "in": "path",
    "required": True,
    "schema": {"type": "string"},
    "description": "the connector's name",
}

_TASK = {
    "name": "task",
    "in": "path",
    "required": True,
    "schema": {"type": "integer", "minimum": 0},
    "description": "the task's number (a partition of the connector's query)",
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


def _type() -> dict:
    return {
        "name": "type",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "enum": plugin_names()},
        "description": "a connector type and kind; class names such as PostgresSinkConnector"
        " and aliases (mariadb, postgresql) are taken too",
    }


def _text_or_json(text_example: str, model, example: dict) -> dict:
    return {
        "requestBody": {
            "required": True,
            "content": {
                "text/plain": {"schema": {"type": "string"}, "example": text_example},
                "application/json": models.body_schema(model, example),
            },
        }
    }


_SQL_BODY = _text_or_json(
    "SHOW CONNECTORS",
    models.SqlScript,
    {"sql": "SHOW CONNECTORS; SELECT count(*) FROM numbers"},
)
_CREATE_BODY = _text_or_json(
    "CREATE SOURCE CONNECTOR gen FROM datagen INTO numbers WITH ('rows.per.second' = 10)",
    models.NewConnector,
    {"name": "out", "config": {"connector.class": "file-sink", "topics": "numbers", "path": "out"}},
)
_EXPAND = {
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
}
_CONFIG_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": TypeAdapter(models.ConfigMap).json_schema(),
                "example": {"rows.per.second": 10},
            }
        },
    }
}
_VALIDATE_BODY = _CONFIG_BODY
_OFFSETS_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": models.body_schema(
                models.OffsetsReset,
                {"offsets": [{"partition": {"connector": "gen"}, "offset": None}]},
            )
        },
    }
}
_SNAPSHOT_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": models.body_schema(models.SnapshotAsk, {"tables": ["orders"]})
        },
    }
}
_RESTART = {
    "parameters": [
        {
            "name": flag,
            "in": "query",
            "required": False,
            "schema": {"type": "boolean"},
            "description": why,
        }
        for flag, why in (
            ("includeTasks", "taken and ignored: a connector's tasks restart with it"),
            ("onlyFailed", "restart only a connector that failed"),
        )
    ]
}

# handler -> (summary, success status, success model (None: Prometheus text), extra fields)
OPERATIONS: dict[str, tuple[str, int, Any, dict]] = {
    "list_connectors": (
        "Connector names; ?expand=status,info for each one's status and info",
        200,
        list[str] | dict[str, dict[str, Any]],
        _EXPAND,
    ),
    "create_connector": (
        "Create a connector from a CREATE statement or Kafka Connect's {name, config}",
        201,
        models.ConnectorInfo,
        _CREATE_BODY,
    ),
    "get_connector": ("A connector, its config and tasks", 200, models.ConnectorInfo, {}),
    "delete_connector": ("Drop a connector (and what it made upstream)", 200, models.Message, {}),
    "get_config": ("A connector's config, secrets redacted", 200, dict[str, Any], {}),
    "get_status": (
        "A connector's state, tasks, counts and last error",
        200,
        models.ConnectorStatus,
        {},
    ),
    "pause": ("Pause a connector; its offsets are kept", 202, models.ActionDone, {}),
    "resume": ("Resume a paused connector from its checkpoint", 202, models.ActionDone, {}),
    "restart": ("Restart a connector from its checkpoint", 202, models.ActionDone, _RESTART),
    "snapshot_tables": (
        "Read tables of a cdc source of several tables again while its changes flow"
        " (ALTER CONNECTOR ... SNAPSHOT TABLE)",
        202,
        models.ActionDone,
        _SNAPSHOT_BODY,
    ),
    "get_offsets": ("A connector's committed and latest offsets", 200, models.Offsets, {}),
    "reset_offsets": (
        "Forget a paused, failed or finished connector's offsets (RESET ... OFFSETS)",
        200,
        models.Message,
        {},
    ),
    "root": ("Version info, as Kafka Connect's GET /", 200, models.Version, {}),
    "put_config": (
        "Create the connector, or set the options that differ (ALTER CONNECTOR); 201 when created",
        200,
        models.ConnectorInfo,
        _CONFIG_BODY,
    ),
    "patch_config": (
        "Set some options (ALTER CONNECTOR)",
        200,
        models.ConnectorInfo,
        _CONFIG_BODY,
    ),
    "get_tasks": (
        "A connector's tasks: the partitions of its query",
        200,
        list[models.TaskInfo],
        {},
    ),
    "get_task_status": ("A task's state: its connector's", 200, models.TaskState, {}),
    "restart_task": ("Restart a task: its connector's query", 202, models.ActionDone, {}),
    "stop": ("Stop a connector (PAUSE: its offsets are kept)", 202, models.ActionDone, {}),
    "get_topics": ("The stream a connector reads or writes", 200, dict[str, models.Topics], {}),
    "reset_topics": (
        "Nothing to reset: a connector's streams are its statement's",
        200,
        models.Message,
        {},
    ),
    "patch_offsets": (
        "Reset a connector's offsets (every offset null); setting a value is refused",
        200,
        models.Message,
        _OFFSETS_BODY,
    ),
    "plugin_config": ("A type's declared options", 200, list[dict[str, Any]], {}),
    "list_plugins": ("Installed connector types, one entry per kind", 200, list[models.Plugin], {}),
    "validate_config": (
        "Check a config against a type's declared options",
        200,
        models.Validation,
        _VALIDATE_BODY,
    ),
    "sql": (
        "Run a script; each statement's result (the first failure stops it)",
        200,
        models.SqlResults,
        _SQL_BODY,
    ),
    "streams": ("The streams and their schemas", 200, list[models.Stream], {}),
    "health": ("The worker is up; connectors by state", 200, models.Health, {}),
    "metrics": ("Prometheus metrics per connector", 200, None, {}),
}

ERRORS = {
    400: "bad request: the message names what is wrong",
    401: "a token is needed",
    404: "no such connector",
    405: "method not allowed",
    409: "conflict with the connector's state",
    411: "the body came without a Content-Length (chunked bodies are not read)",
    413: "body too large",
}


def openapi_extra(path: str, extra: dict) -> dict:
    """The operation's parameters and body as FastAPI cannot infer them."""
    params = [_NAME] if "{name}" in path else []
    params += [_type()] if "{type}" in path else []
    params += [_TASK] if "{task}" in path else []
    params += extra.get("parameters", [])
    return {**extra, "parameters": params}
