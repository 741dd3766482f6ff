"""Redaction of secret option values on every way out of the catalog."""

from __future__ import annotations

from typing import Any

from connectql.config import MASK, is_reference, is_secret_key
from connectql.grammar import ast


def redact_value(key: str, value: Any) -> Any:
    if isinstance(value, ast.SecretRef):
        return f"SECRET {value.name}"
    if is_reference(value):
        # ${env:X} or ${file:P}, not the secret itself ('${x' may be a password); a default
        # written into the reference is a value, masked as one
        name, default = value[2:-1].partition(":-")[::2]
        return f"${{{name}:-{MASK}}}" if default and is_secret_key(key) else value
    return MASK if is_secret_key(key) else value


def redact(options: dict[str, Any]) -> dict[str, Any]:
    return {k: redact_value(k, v) for k, v in options.items()}


def scrub(text: str, secrets) -> str:
    """Remove every known secret value from free text (error messages, logs)."""
    for secret in secrets:
        if secret and len(str(secret)) >= 3:
            text = text.replace(str(secret), MASK)
    return text


def written_secrets(stmt: ast.Statement) -> list[str]:
    """The secret values written into a statement's text: CREATE SECRET's value and the inline
    values of secret keys (connector options, SET)."""
    if isinstance(stmt, ast.Explain):
        stmt = stmt.statement
    if isinstance(stmt, ast.CreateSecret):
        return [stmt.value]
    given = {stmt.key: stmt.value} if isinstance(stmt, ast.Set) else getattr(stmt, "options", {})
    out = [str(v) for k, v in given.items() if redact_value(k, v) == MASK]
    return out + [
        str(v)[2:-1].partition(":-")[2]
        for k, v in given.items()
        if is_reference(v) and redact_value(k, v) != v
    ]


def statement_text(stmt: ast.Statement) -> str:
    """The statement's own SQL text with the secret values written into it masked (also as
    quoted in SQL, with their quotes doubled)."""
    forms = {
        f for v in written_secrets(stmt) for f in (v, v.replace("'", "''"), v.replace('"', '""'))
    }
    return scrub(stmt.text, sorted(forms, key=len, reverse=True))
