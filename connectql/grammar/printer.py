"""Print statements back as canonical SQL: `parse_statement(to_sql(s)) == s` for every statement."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from connectql.grammar.ast import (
    AlterConnector,
    AlterStream,
    ConnectorAction,
    CreateSecret,
    CreateSinkConnector,
    CreateSourceConnector,
    CreateStream,
    Describe,
    Drop,
    Explain,
    SecretRef,
    Select,
    Set,
    Show,
    SnapshotTables,
    Statement,
    Value,
)

__all__ = ["to_sql", "quote", "value_sql"]

# A key the grammar reads as a bare word (the WORD terminal of connectql.lark).
_BARE_KEY = re.compile(r"[A-Za-z_](?:[A-Za-z0-9_.]|-(?!-))*")


def quote(text: str) -> str:
    """A single-quoted SQL string; quotes inside are doubled."""
    return "'" + text.replace("'", "''") + "'"


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else quote(key)


def value_sql(value: Value) -> str:
    """An option value as SQL: strings quoted, numbers and booleans bare, `SECRET name`."""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"cannot write {value!r} as SQL")
        return repr(value)
    if isinstance(value, SecretRef):
        return f"SECRET {value.name}"
    return quote(value)


def _options(options: dict[str, Value]) -> str:
    return "(" + ", ".join(f"{_key(k)} = {value_sql(v)}" for k, v in options.items()) + ")"


def _words(*parts: str | None) -> str:
    return " ".join(part for part in parts if part)


def _if(flag: bool, words: str) -> str | None:
    return words if flag else None


def _source(s: CreateSourceConnector) -> str:
    return _words(
        "CREATE SOURCE CONNECTOR",
        _if(s.if_not_exists, "IF NOT EXISTS"),
        s.name,
        s.type and f"FROM {s.type}",
        s.stream and f"INTO {s.stream}",
        "WITH " + _options(s.options),
    )


def _sink(s: CreateSinkConnector) -> str:
    reads = f"AS {s.select}" if s.select is not None else s.stream and f"FROM {s.stream}"
    return _words(
        "CREATE SINK CONNECTOR",
        _if(s.if_not_exists, "IF NOT EXISTS"),
        s.name,
        s.type and f"TO {s.type}",
        reads,
        "WITH " + _options(s.options),
    )


def _stream(s: CreateStream) -> str:
    options = s.options and "WITH " + _options(s.options)
    return _words("CREATE STREAM", _if(s.if_not_exists, "IF NOT EXISTS"), s.name, options)


def _secret(s: CreateSecret) -> str:
    return _words(
        "CREATE SECRET", _if(s.if_not_exists, "IF NOT EXISTS"), s.name, "AS", quote(s.value)
    )


def _show(s: Show) -> str:
    what = "CONNECTOR PLUGINS" if s.what == "plugins" else s.what.upper()
    like = None if s.like is None else "LIKE " + quote(s.like)
    return _words("SHOW", what, like)


def _action(s: ConnectorAction) -> str:
    if s.action == "reset_offsets":
        return f"RESET CONNECTOR {s.name} OFFSETS"
    return f"{s.action.upper()} CONNECTOR {s.name}"


def _drop(s: Drop) -> str:
    return _words("DROP", s.what.upper(), _if(s.if_exists, "IF EXISTS"), s.name)


_PRINTERS: dict[type, Callable] = {
    CreateSourceConnector: _source,
    CreateSinkConnector: _sink,
    CreateStream: _stream,
    CreateSecret: _secret,
    Show: _show,
    Describe: lambda s: f"DESCRIBE {s.what.upper()} {s.name}",
    ConnectorAction: _action,
    AlterConnector: lambda s: f"ALTER CONNECTOR {s.name} SET {_options(s.options)}",
    SnapshotTables: lambda s: (
        f"ALTER CONNECTOR {s.name} SNAPSHOT TABLE {', '.join(map(_key, s.tables))}"
    ),
    AlterStream: lambda s: f"ALTER STREAM {s.name} SET {_options(s.options)}",
    Drop: _drop,
    Explain: lambda s: "EXPLAIN " + to_sql(s.statement),
    Set: lambda s: f"SET {_key(s.key)} = {value_sql(s.value)}",
    Select: lambda s: s.sql,
}


def to_sql(stmt: Statement) -> str:
    """The statement as canonical SQL (upper-case keywords, no trailing `;`)."""
    try:
        printer = _PRINTERS[type(stmt)]
    except KeyError:
        raise TypeError(f"not a statement: {stmt!r}") from None
    return printer(stmt)
