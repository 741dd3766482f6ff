"""The option spec's old home: it lives in connectql/config.py (re-exported here)."""

from __future__ import annotations

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
