"""JSON values as the toolkit reads and writes them: a sample's Spark DDL (infer_ddl), a
value on one line, and json.dumps' default for what Arrow gives (json_value)."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal

import pyarrow.json as pajson

from connectql.toolkit.ddl import spark_ddl, spark_types


def json_value(value):
    """json.dumps' default for the values Arrow gives: ISO dates and times, decimals as their
    text, bytes as base64."""
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def infer_ddl(values: Sequence[bytes | None]) -> str:
    """Spark DDL of json message values (a sample; those that are no JSON object are passed
    over), as Spark types."""
    body = b"\n".join(one_line(v) for v in values if v and is_object(v))
    if not body:
        raise ValueError("no message to infer the schema from")
    return spark_ddl(spark_types(pajson.read_json(io.BytesIO(body)).schema))


def is_object(value: bytes) -> bool:
    try:
        return isinstance(json.loads(value), dict)
    except ValueError:
        return False


def one_line(value: bytes) -> bytes:
    """A JSON text on one line (newlines between tokens are whitespace; inside strings JSON
    has none)."""
    return value.replace(b"\r\n", b" ").replace(b"\n", b" ")
