"""Resolution of option values that name secrets: SECRET name, ${env:NAME}, ${file:PATH}."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from connectql.connectors.options import REFERENCE
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
        if ref not in os.environ:
            raise PlanError(
                f"option '{key}' refers to environment variable {ref}, which is not set"
            )
        return os.environ[ref]
    try:
        return Path(ref).expanduser().read_text().strip()
    except OSError as e:
        raise PlanError(
            f"option '{key}' refers to file {ref}, which cannot be read: {e.strerror}"
        ) from None


def resolve(options: dict[str, Any], secrets) -> dict[str, Any]:
    return {k: resolve_value(k, v, secrets) for k, v in options.items()}
