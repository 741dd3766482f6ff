"""The API's bodies as pydantic models: the OpenAPI document's schemas are generated from them,
and the JSON request bodies are read through them. Kafka Connect's shapes carry connectql's
extra fields, so most models allow extra keys."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Error(Open):
    error_code: int
    message: str


class Message(Open):
    message: str


class Task(BaseModel):
    connector: str
    task: int


class ConnectorInfo(Open):
    name: str
    config: dict[str, Any]
    tasks: list[Task]
    type: str


class TaskState(Open):
    id: int
    state: str
    worker_id: str


class ConnectorState(Open):
    state: str
    worker_id: str
    trace: str | None = None


class ConnectorStatus(Open):
    name: str
    connector: ConnectorState
    tasks: list[TaskState]
    type: str


class ActionDone(ConnectorStatus):
    message: str


class Offset(Open):
    partition: dict[str, Any]
    offset: Any = None


class Offsets(Open):
    offsets: list[Offset]


class Plugin(Open):
    class_: str = Field(alias="class")
    type: str
    version: str


class ConfigValue(Open):
    name: str
    value: Any = None
    errors: list[str]


class ConfigEntry(Open):
    definition: dict[str, Any] | None
    value: ConfigValue


class Validation(Open):
    name: str
    type: str
    error_count: int
    groups: list[str]
    configs: list[ConfigEntry]


class SqlResults(Open):
    results: list[dict[str, Any]]


class Stream(Open):
    name: str
    schema_: Any = Field(alias="schema")
    key: Any = None
    path: str | None = None


class Health(Open):
    status: str
    role: str  # active; a standby answers "standby" and the active worker's address
    epoch: int | None  # the lease's epoch (None: a worker without one, connectql run)
    worker_id: str
    home: str
    connectors: dict[str, int]
    failed: list[str]


class Version(Open):
    version: str
    commit: str
    kafka_cluster_id: str | None


class TaskInfo(Open):
    id: Task
    config: dict[str, Any]


class Topics(Open):
    topics: list[str]


# ---------------------------------------------------------------- request bodies
ConfigMap = dict[str, str | int | float | bool]  # a connector's options, as Kafka Connect sends


class SqlScript(Open):
    """POST /sql as JSON (a text body is the script itself)."""

    sql: str = Field(description="one or more statements, separated by ;")
    source: str = Field("", description="the script's file name, for messages")


class NewConnector(Open):
    """Kafka Connect's POST /connectors body (a text body is a CREATE statement)."""

    # Any, not str: a name that is not a word is refused by the statement, naming it
    name: Any = Field(
        None,
        description="the connector's name (else config's name)",
        json_schema_extra={"type": "string"},
    )
    config: dict[str, Any] = Field(
        description="connector.class (our type, e.g. postgres-sink) and the options",
        json_schema_extra={"additionalProperties": {"type": ["string", "number", "boolean"]}},
    )


class SnapshotAsk(Open):
    """POST /connectors/{name}/snapshot: tables to read again (ALTER ... SNAPSHOT TABLE)."""

    tables: list[str] = Field(
        min_length=1, description="tables the source reads, each read again whole"
    )


class OffsetToReset(Open):
    """One offset to forget: its partition, as GET .../offsets lists it; its offset null."""

    partition: Any = None
    offset: None = Field(None, description="null: connectql forgets offsets, it cannot set one")


class OffsetsReset(Open):
    """PATCH /connectors/{name}/offsets: every offset null (connectql resets, it cannot set)."""

    offsets: list[OffsetToReset] = Field(
        description='each {"partition": {...}, "offset": null}, as GET .../offsets lists them'
    )


def parsed(model: type[BaseModel], body: Any):
    """`body` read as `model`; None when it does not fit (the caller names what is wrong, in
    connectql's words)."""
    try:
        return model.model_validate(body)
    except ValidationError:
        return None


def body_schema(model: type[BaseModel], example: Any) -> dict:
    """The JSON request body of an operation, from `model`, for the OpenAPI document."""
    return {"schema": model.model_json_schema(), "example": example}
