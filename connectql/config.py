"""Declared options (name, type, default, required, secret, doc), their validation, and the
rules for secret values: the foundation that grammar, catalog, planner and connectors share.

One declaration drives validation, "did you mean", DESCRIBE PLUGIN, the HTTP validate endpoint
and the README option tables, as Kafka Connect's ConfigDef does.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Any

from connectql.errors import ValidationError

# An option value naming where its secret is: resolved only when a plan is built
REFERENCE = re.compile(r"\$\{(env|file):([^}]+)\}")
TYPES = ("string", "int", "float", "bool", "duration", "enum")

_DURATION = re.compile(
    r"^\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|secs?|seconds?|m|mins?|minutes?|h|hours?|d|days?)?\s*$",
    re.IGNORECASE,
)
_UNIT_MS = {
    "ms": 1,
    "mil": 1,
    "s": 1000,
    "sec": 1000,
    "m": 60_000,
    "min": 60_000,
    "h": 3_600_000,
    "hou": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
}


@dataclass(frozen=True)
class SecretRef:
    """An option value written `SECRET name`: resolved from the secret store when a plan is built."""

    name: str


@dataclass(frozen=True)
class Option:
    name: str
    type: str = "string"
    default: Any = None
    required: bool = False
    secret: bool = False
    doc: str = ""
    choices: tuple[str, ...] = ()

    def describe_type(self) -> str:
        return (
            f"one of {', '.join(repr(c) for c in self.choices)}"
            if self.type == "enum"
            else self.type
        )


def duration_ms(text: str) -> int:
    """'500 milliseconds', '2 s', '1 minute', '250' (ms) -> milliseconds."""
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(text)
    unit = (m.group(2) or "ms").lower()
    factor = _UNIT_MS.get(unit[:3], _UNIT_MS.get(unit[:2], _UNIT_MS.get(unit[:1])))
    return int(float(m.group(1)) * factor)


def is_reference(value: Any) -> bool:
    """Whether `value` is one ${env:NAME} or ${file:PATH} reference and nothing else."""
    return isinstance(value, str) and REFERENCE.fullmatch(value) is not None


MASK = "****"  # what a secret value shows as, wherever it leaves the catalog


def is_secret_key(key: str) -> bool:
    """Keys whose inline values are redacted on every way out."""
    k = key.lower()
    return k == "password" or k.endswith((".secret", ".key", ".password")) or k == "secret"


def coerce(option: Option, value: Any, where: str) -> Any:
    """The value converted to the option's type, or a ValidationError naming option and type."""
    if isinstance(value, SecretRef) or is_reference(value):
        return value  # resolved when the plan is built
    try:
        return _COERCE[option.type](option, value)
    except (ValueError, TypeError):
        shown = "'****'" if option.secret else repr(value)
        raise ValidationError(
            f"{where}: option '{option.name}' must be {option.describe_type()}, got {shown}"
        ) from None


def _to_bool(option: Option, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError(value)


def _to_int(option: Option, value: Any) -> int:
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise ValueError(value)
    return int(str(value).replace("_", "")) if isinstance(value, str) else int(value)


def _to_enum(option: Option, value: Any) -> str:
    text = str(value).strip().lower()
    if text not in option.choices:
        raise ValueError(value)
    return text


def _to_duration(option: Option, value: Any) -> str:
    duration_ms(value)
    return str(value)


def _to_float(option: Option, value: Any) -> float:
    if isinstance(value, bool):
        raise ValueError(value)
    return float(value)


def _to_string(option: Option, value: Any) -> str:
    return (
        value
        if isinstance(value, str)
        else str(value).lower()
        if isinstance(value, bool)
        else str(value)
    )


_COERCE = {
    "string": _to_string,
    "int": _to_int,
    "float": _to_float,
    "bool": _to_bool,
    "duration": _to_duration,
    "enum": _to_enum,
}


def validate(specs: dict[str, Option], given: dict[str, Any], where: str) -> dict[str, Any]:
    """Check `given` against `specs`: unknown keys (with a suggestion), missing required options
    (with their doc) and types. Returns the options with defaults filled in and values coerced
    (and the keys given of a family, e.g. kafka.acks of 'kafka.*', as strings)."""
    problems = option_errors(specs, given)
    if problems:
        raise ValidationError(f"{where}: {next(iter(problems.values()))[0]}")
    lowered = {k.lower(): v for k, v in given.items()}
    declared = {
        name: coerce(spec, lowered[name], where) if name in lowered else spec.default
        for name, spec in specs.items()
        if not is_family(name) and (name in lowered or spec.default is not None)
    }
    members = {k: coerce(family_of(specs, k), v, where) for k, v in given.items()
               if k.lower() not in specs and family_of(specs, k)}  # fmt: skip
    return {**declared, **members}


def is_family(name: str) -> bool:
    """An option name ending in '.*' declares a family: any key with that prefix, passed on as
    given (a client's own settings, e.g. 'kafka.*': kafka.security.protocol, ...)."""
    return name.endswith(".*")


def family_of(specs: dict[str, Option], key: str) -> Option | None:
    """The family option a key belongs to (its case kept: a client's settings are its own)."""
    return next(
        (
            o
            for n, o in specs.items()
            if is_family(n) and key.startswith(n[:-1]) and len(key) > len(n) - 1
        ),
        None,
    )


def option_errors(specs: dict[str, Option], given: dict[str, Any]) -> dict[str, list[str]]:
    """Every problem with `given`, by option name: unknown keys first (in the order given), then
    wrong types and missing required options (in declaration order). Empty when all is well."""
    lowered = {k.lower(): v for k, v in given.items()}
    known = {k.lower() for k in given if family_of(specs, k)}
    problems = {
        key: [f"unknown option '{key}'{suggest(key, specs)}"]
        for key in lowered
        if key not in specs and key not in known
    }
    for name, spec in specs.items():
        if name in lowered:
            try:
                coerce(spec, lowered[name], "")
            except ValidationError as e:
                problems[name] = [str(e).removeprefix(": ")]
        elif spec.required:
            problems[name] = [f"missing required option '{name}': {spec.doc}"]
    return problems


def suggest(word: str, candidates) -> str:
    close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""
