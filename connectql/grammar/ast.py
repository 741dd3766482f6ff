"""Plain dataclasses for every statement of the connector language (the parser's output)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from connectql.config import SecretRef  # noqa: F401 (re-exported: the parser makes them)

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # the grammar's NAME terminal (connectql.lark)


def is_name(text) -> bool:
    """Whether `text` can stand as a name (of a connector, stream, type) in a statement."""
    return isinstance(text, str) and _NAME.fullmatch(text) is not None


# An option value as written: quoted or bare words become str; numbers int/float; true/false bool.
Value = str | int | float | bool | SecretRef


@dataclass
class Statement:
    """Base: `line` is the 1-based line where the statement starts in its script (0 = unknown)."""

    line: int = field(default=0, kw_only=True, compare=False)
    text: str = field(default="", kw_only=True, compare=False)  # the statement's own SQL text


@dataclass
class CreateSourceConnector(Statement):
    name: str
    type: str | None  # FROM type; None when given only as WITH (connector = '...')
    stream: str | None  # INTO stream; None when given only as WITH (stream = '...')
    options: dict[str, Value]
    if_not_exists: bool = False


@dataclass
class CreateSinkConnector(Statement):
    name: str
    type: str | None  # TO type
    stream: str | None  # FROM stream (or the FROM of the SELECT)
    options: dict[str, Value]
    select: str | None = None  # the AS SELECT ... text, verbatim
    if_not_exists: bool = False


@dataclass
class CreateStream(Statement):
    name: str
    options: dict[str, Value] = field(default_factory=dict)
    if_not_exists: bool = False


@dataclass
class CreateSecret(Statement):
    name: str
    value: str
    if_not_exists: bool = False


@dataclass
class Show(Statement):
    what: str  # 'connectors' | 'streams' | 'plugins' | 'secrets' | 'settings'
    like: str | None = None


@dataclass
class Describe(Statement):
    what: str  # 'connector' | 'stream' | 'plugin'
    name: str


@dataclass
class ConnectorAction(Statement):
    action: str  # 'pause' | 'resume' | 'restart' | 'reset_offsets'
    name: str


@dataclass
class AlterConnector(Statement):
    name: str
    options: dict[str, Value]


@dataclass
class SnapshotTables(Statement):
    """ALTER CONNECTOR name SNAPSHOT TABLE t [, u ...]: read those tables again, whole."""

    name: str
    tables: list[str]


@dataclass
class AlterStream(Statement):
    name: str
    options: dict[str, Value]


@dataclass
class Drop(Statement):
    what: str  # 'connector' | 'stream' | 'secret'
    name: str
    if_exists: bool = False


@dataclass
class Explain(Statement):
    statement: CreateSourceConnector | CreateSinkConnector


@dataclass
class Set(Statement):
    key: str
    value: Value


@dataclass
class Select(Statement):
    sql: str  # verbatim; validated with sqlglot (duckdb dialect) by the parser
