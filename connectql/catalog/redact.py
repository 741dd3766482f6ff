"""Redaction of secret option values on every way out of the catalog."""

from __future__ import annotations

from typing import Any

from connectql.connectors.options import is_secret_key
from connectql.grammar.ast import SecretRef

MASK = "****"


def redact_value(key: str, value: Any) -> Any:
    if isinstance(value, SecretRef):
        return f"SECRET {value.name}"
    if isinstance(value, str) and value.startswith("${"):
        return value  # a reference (${env:X}, ${file:P}), not the secret itself
    return MASK if is_secret_key(key) else value


def redact(options: dict[str, Any]) -> dict[str, Any]:
    return {k: redact_value(k, v) for k, v in options.items()}


def scrub(text: str, secrets) -> str:
    """Remove every known secret value from free text (error messages, logs)."""
    for secret in secrets:
        if secret and len(str(secret)) >= 3:
            text = text.replace(str(secret), MASK)
    return text
