"""The worker's own settings (`SET key = value`, `SHOW SETTINGS`), declared like connector
options; `spark.*` keys go to Spark; any other key is refused, naming it."""

from __future__ import annotations

from typing import Any

from connectql.catalog.redact import redact_value
from connectql.connectors.common import SOURCE_COMMON
from connectql.connectors.options import Option, coerce, is_reference, suggest
from connectql.errors import ValidationError
from connectql.grammar.ast import SecretRef
from connectql.runtime.retention import (
    CHECK_INTERVAL_DEFAULT,
    CHECK_INTERVAL_KEY,
    DEFAULT_KEYS,
    STREAM_OPTIONS,
    check_value,
)


def _default_of(key: str) -> Option:
    """A worker-wide default for the connector option `key`: same name, type and default."""
    o = SOURCE_COMMON[key]
    return Option(
        key,
        o.type,
        o.default,
        doc=f"{o.doc}; for every connector that does not set {key} itself",
    )


# the supervisor's options: a worker may set them for all its connectors at once
SUPERVISOR_SETTINGS: dict[str, Option] = {
    k: _default_of(k) for k in ("errors.retry.max", "errors.retry.backoff.ms", "stall.timeout.ms")
}


def _stream_default(name: str) -> Option:
    """A worker-wide default for the stream option `name` (stream.<name>)."""
    o = STREAM_OPTIONS[name]
    doc = f"{o.doc}; for every stream that does not set {name} itself"
    return Option(DEFAULT_KEYS[name], o.type, o.default, doc=doc, choices=o.choices)


# stream retention: defaults for streams, and how often the worker enforces it
STREAM_SETTINGS: dict[str, Option] = {
    **{DEFAULT_KEYS[n]: _stream_default(n) for n in STREAM_OPTIONS},
    CHECK_INTERVAL_KEY: Option(
        CHECK_INTERVAL_KEY,
        "duration",
        CHECK_INTERVAL_DEFAULT,
        doc="how often the worker enforces stream retention and measures the streams",
    ),
}
CHAINING_KEY = "sink.chaining"
ENGINE_SETTINGS: dict[str, Option] = {
    CHAINING_KEY: Option(
        CHAINING_KEY,
        "bool",
        True,
        doc="an exactly-once sink whose stream one running source feeds writes inside that"
        " source's micro-batches (one Spark query: a change reaches the target sooner); false:"
        " each sink runs a query of its own",
    )
}
WORKER_SETTINGS: dict[str, Option] = {**SUPERVISOR_SETTINGS, **STREAM_SETTINGS, **ENGINE_SETTINGS}


def chaining(saved: dict[str, str]) -> bool:
    """Whether sinks may ride their sources (SET sink.chaining)."""
    spec = ENGINE_SETTINGS[CHAINING_KEY]
    return coerce(spec, saved.get(CHAINING_KEY, spec.default), f"SET {CHAINING_KEY}")


def check_setting(key: str, value: Any) -> str:
    """The value of `SET key = value` as stored, or a ValidationError naming the key."""
    if key.startswith("spark."):
        return str(value).lower() if isinstance(value, bool) else str(value)
    key = key.lower()
    spec = WORKER_SETTINGS.get(key)
    if spec is None:
        raise ValidationError(
            f"SET: unknown setting '{key}'{suggest(key, WORKER_SETTINGS)}; the worker's"
            f" settings are {', '.join(WORKER_SETTINGS)} (SHOW SETTINGS), and spark.* keys"
            " go to Spark"
        )
    if isinstance(value, SecretRef) or is_reference(value):
        raise ValidationError(f"SET: setting '{key}' takes a plain {spec.type}, not a reference")
    if key in STREAM_SETTINGS:  # checked like the stream option it is the default of
        name = "retention" if key == CHECK_INTERVAL_KEY else key.removeprefix("stream.")
        return check_value(name, value, f"SET {key}")
    value = coerce(spec, value, "SET")
    if spec.type == "int" and value < 0:
        raise ValidationError(f"SET: setting '{key}' must be 0 or more, got {value}")
    return str(value)


def supervision(options: dict[str, Any], saved: dict[str, str]) -> dict[str, Any]:
    """A connector's supervision options: its own, else the worker's setting, else the
    declared default."""
    lowered = {k.lower(): v for k, v in options.items()}
    return {
        key: coerce(spec, lowered.get(key, saved.get(key, spec.default)), f"option '{key}'")
        for key, spec in SUPERVISOR_SETTINGS.items()
    }


def rows(saved: dict[str, str]) -> list[tuple]:
    """SHOW SETTINGS: each declared setting and each spark.* key that is set."""
    declared = [
        (k, saved.get(k, _text(o.default)), o.type, _text(o.default), o.doc)
        for k, o in WORKER_SETTINGS.items()
    ]
    spark = [
        (k, redact_value(k, v), "string", "", "Spark setting (SET spark.*)")
        for k, v in sorted(saved.items())
        if k.startswith("spark.")
    ]
    return declared + spark


def _text(default: Any) -> str:
    return "" if default is None else str(default)
