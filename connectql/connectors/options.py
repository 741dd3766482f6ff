"""The option spec's old home: it lives in connectql/config.py (re-exported here), beside the
packing of a database connector's settings into Spark data source options."""

from __future__ import annotations

import json
from typing import Any

from connectql.config import (  # noqa: F401 (re-exported)
    REFERENCE,
    TYPES,
    Option,
    coerce,
    duration_ms,
    is_reference,
    is_secret_key,
    option_errors,
    suggest,
    validate,
)


def to_spark_options(body: dict[str, Any]) -> dict[str, str]:
    """A connector's settings as Spark data source options: JSON under 'config', with the
    connection's password apart under 'password' (a key Spark redacts in plans and logs)."""
    conn = dict(body.get("connection") or {})
    password = conn.pop("password", None)
    out = {"config": json.dumps({**body, "connection": conn}, sort_keys=True, default=list)}
    if password:
        out["password"] = str(password)
    return out


def from_spark_options(options: dict[str, str]) -> dict[str, Any]:
    """The settings to_spark_options packed, password put back into the connection."""
    body = json.loads(options["config"])
    if options.get("password"):
        body["connection"]["password"] = options["password"]
    return body
