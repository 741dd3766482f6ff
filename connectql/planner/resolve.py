"""Resolution of option values that name secrets or settings: SECRET name, ${env:NAME},
${env:NAME:-default} (the default when NAME is unset or empty, as in the shell) and ${file:PATH}."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from connectql.config import REFERENCE, coerce, is_reference
from connectql.errors import PlanError
from connectql.grammar.ast import SecretRef


def resolve_value(key: str, value: Any, secrets) -> Any:
    if isinstance(value, SecretRef):
        return secrets.get(value.name)
    if isinstance(value, str) and "${" in value:
        return REFERENCE.sub(lambda m: _lookup(key, m.group(1), m.group(2)), value)
    return value


def _lookup(key: str, kind: str, ref: str) -> str:
    if kind == "env":
        name, has_default, default = ref.partition(":-")
        if os.environ.get(name):
            return os.environ[name]
        if has_default:
            return default
        if name not in os.environ:
            raise PlanError(
                f"option '{key}' refers to environment variable {name}, which is not set"
            )
        return os.environ[name]
    try:
        return Path(ref).expanduser().read_text().strip()
    except OSError as e:
        raise PlanError(
            f"option '{key}' refers to file {ref}, which cannot be read: {e.strerror}"
        ) from None


def resolve(options: dict[str, Any], secrets, specs=None, where: str = "") -> dict[str, Any]:
    """The options with references resolved; with `specs`, a value that was one reference is
    converted to its option's type (port = ${env:MYSQL_TCP_PORT:-3306} is an int)."""
    out = {k: resolve_value(k, v, secrets) for k, v in options.items()}
    if specs:
        for k, v in options.items():
            if is_reference(v) and k in specs:
                out[k] = coerce(specs[k], out[k], where)
    return out
