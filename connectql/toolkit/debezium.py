"""Debezium's JSON change events as a change stream's rows (a broker source's format =
'debezium'): each event's row image (`after`, or for a delete `before`, else the message key)
with the change columns __op ('c', 'u', 'd', 'r'), __ts_ms, __pos (the message's position) and
__source (the event's source block, JSON), so that an upsert sink applies them as it applies a
database source's changes.

Events with Kafka Connect's schema envelope ({"schema": ..., "payload": ...}) and without it are
both read; a tombstone (a null value after a delete) is no change and makes no row. Values are
converted by the envelope's semantic types when it has them: io.debezium.time.Date (days),
Timestamp (ms), MicroTimestamp (us), NanoTimestamp (ns), ZonedTimestamp (ISO text) and
org.apache.kafka.connect.data.Decimal (base64 of the unscaled bytes, its scale a parameter).
Without the envelope an integer in a TIMESTAMP column is read as milliseconds below 10^13, else
microseconds below 10^16, else nanoseconds; a DATE column's integer as days; a DECIMAL column's
text as the number it spells."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.types as pat

from connectql.toolkit.envelope import OP, POS, SOURCE, TS_MS
from connectql.toolkit.jsontext import infer_ddl, json_value

CHANGE_SCHEMA = pa.schema(
    [(OP, pa.string()), (TS_MS, pa.int64()), (POS, pa.string()), (SOURCE, pa.string())]
)
CHANGE_DDL = f"`{OP}` STRING, `{TS_MS}` BIGINT, `{POS}` STRING, `{SOURCE}` STRING"
OPS = ("c", "u", "d", "r")
EPOCH = datetime(1970, 1, 1)
UNITS = {  # semantic type -> (unit, divisor to seconds)
    "io.debezium.time.Timestamp": 1_000,
    "io.debezium.time.MicroTimestamp": 1_000_000,
    "io.debezium.time.NanoTimestamp": 1_000_000_000,
}
DECIMAL = "org.apache.kafka.connect.data.Decimal"


class NotAnEvent(ValueError):
    """A message that is no Debezium change event (or one connectql cannot apply)."""


def payload(value: bytes | None) -> tuple[dict | None, dict | None]:
    """(payload, its envelope's schema) of a message value; (None, None) for a tombstone."""
    if value is None:
        return None, None
    try:
        body = json.loads(value)
    except ValueError as e:
        raise NotAnEvent(f"not JSON: {e}") from None
    if isinstance(body, dict) and "payload" in body and "schema" in body:
        return body["payload"], body["schema"]
    if not isinstance(body, dict):
        raise NotAnEvent("not a JSON object")
    return body, None


def event(value: bytes | None, key: bytes | None) -> tuple[dict, str, int | None, Any, dict] | None:
    """(row image, op, ts_ms, source block, the image's field schemas by name) of an event;
    None for a tombstone."""
    body, schema = payload(value)
    if body is None:
        return None
    op = body.get("op")
    if op not in OPS:
        raise NotAnEvent(f"op {op!r} is not one of {', '.join(OPS)} (a change connectql applies)")
    image = body.get("before") if op == "d" else body.get("after")
    fields = _image_fields(schema, "before" if op == "d" else "after")
    if image is None and op == "d":
        image, fields = _key_image(key)
    if not isinstance(image, dict):
        raise NotAnEvent(f"op '{op}' without its row image")
    return image, op, body.get("ts_ms"), body.get("source"), fields


def rows(values: Sequence[bytes | None], keys: Sequence[bytes | None], positions: Sequence[str],
         schema: pa.Schema) -> tuple[pa.RecordBatch, list[tuple[int, str | None]]]:  # fmt: skip
    """The events as rows of `schema` (the row's columns, then CHANGE_SCHEMA), and those
    without a row: (index, why), why None for a tombstone."""
    columns = [f for f in schema if f.name not in CHANGE_SCHEMA.names]
    out: list[list] = [[] for _ in schema]
    dropped: list[tuple[int, str | None]] = []
    for i, value in enumerate(values):
        try:
            found = event(value, keys[i])
            if found is None:
                dropped.append((i, None))
                continue
            image, op, ts_ms, source, fields = found
            row = [_value(image.get(f.name), f.type, fields.get(f.name)) for f in columns]
            row += [op, ts_ms if isinstance(ts_ms, int) else None, positions[i], _text(source)]
            for column, v in zip(out, _checked(row, schema), strict=True):
                column.append(v)
        except (NotAnEvent, ValueError, TypeError, ArithmeticError, pa.ArrowException) as e:
            dropped.append((i, str(e) or type(e).__name__))
    arrays = [pa.array(c, f.type) for c, f in zip(out, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema), dropped


def events(rows: pa.Table | pa.RecordBatch, left_out: list[str]) -> list[bytes]:
    """Each row as a Debezium change event without the schema envelope (a sink's format =
    'debezium'): the row (less `left_out`, the change and message columns) as `after`, or as
    `before` of a delete; `op` from __op (a row without one: 'c'), `ts_ms` from __ts_ms (else
    now), `source` from __source (else {"connector": "connectql"})."""
    names = rows.schema.names
    kept = [n for n in names if n not in left_out]
    images = rows.select(kept).to_pylist()
    ops = rows.column(OP).to_pylist() if OP in names else ["c"] * rows.num_rows
    stamps = rows.column(TS_MS).to_pylist() if TS_MS in names else [None] * rows.num_rows
    sources = rows.column(SOURCE).to_pylist() if SOURCE in names else [None] * rows.num_rows
    now = int(datetime.now(timezone.utc).timestamp() * 1000)
    out = []
    for image, op, ts, source in zip(images, ops, stamps, sources, strict=True):
        op = op or "c"
        body = {
            "before": image if op == "d" else None,
            "after": None if op == "d" else image,
            "source": _source(source),
            "op": op,
            "ts_ms": ts if ts is not None else now,
        }
        out.append(json.dumps(body, default=json_value, ensure_ascii=False).encode())
    return out


def _source(text: str | None) -> Any:
    try:
        found = json.loads(text) if text else None
    except ValueError:
        found = None
    return found if isinstance(found, dict) else {"connector": "connectql"}


def _checked(row: list, schema: pa.Schema) -> list:
    """The row's values, each proven to fit its column (a wrong type raises here, for this row
    alone, rather than in the column's array)."""
    for v, f in zip(row, schema, strict=True):
        pa.array([v], f.type)
    return row


def image_ddl(
    sample: Sequence[bytes | None], keys: Sequence[bytes | None]
) -> tuple[str, tuple[str, ...]]:
    """Spark DDL of the row images of sampled events (from the envelope's schema when an event
    has one, else inferred from the images' JSON) and the key's columns (from the keys)."""
    images, ddl = [], None
    for value in sample:
        try:
            body, schema = payload(value)
        except NotAnEvent:
            continue
        if body is None:
            continue
        if schema is not None and ddl is None:
            ddl = envelope_ddl(schema)
        image = body.get("after") or body.get("before")
        if isinstance(image, dict):
            images.append(json.dumps(image).encode())
    if ddl is None:
        if not images:
            raise ValueError("no Debezium change event with a row image")
        ddl = infer_ddl(images)
    return ddl, key_columns(keys)


def envelope_ddl(schema: dict) -> str:
    """Spark DDL of the `after` (else `before`) struct of an event's value schema."""
    fields = _image_fields(schema, "after") or _image_fields(schema, "before")
    if not fields:
        raise ValueError("the event's schema has no row image")
    return ", ".join(f"`{n}` {_spark_type(f)}" for n, f in fields.items())


def _spark_type(f: dict) -> str:
    name, kind = f.get("name"), f.get("type")
    if name == "io.debezium.time.Date":
        return "DATE"
    if name in UNITS:
        return "TIMESTAMP_NTZ"
    if name == "io.debezium.time.ZonedTimestamp":
        return "TIMESTAMP"
    if name == DECIMAL:
        params = f.get("parameters") or {}
        scale = int(params.get("scale", 0))
        precision = int(params.get("connect.decimal.precision", 38))
        return f"DECIMAL({precision},{scale})" if precision <= 38 else "STRING"
    if kind == "array":
        return f"ARRAY<{_spark_type(f.get('items') or {})}>"
    return {"int8": "TINYINT", "int16": "SMALLINT", "int32": "INT", "int64": "BIGINT",
            "float32": "FLOAT", "float64": "DOUBLE", "boolean": "BOOLEAN",
            "bytes": "BINARY"}.get(kind, "STRING")  # fmt: skip


def _image_fields(schema: dict | None, which: str) -> dict[str, dict]:
    if not schema:
        return {}
    for f in schema.get("fields") or ():
        if f.get("field") == which:
            return {c["field"]: c for c in f.get("fields") or ()}
    return {}


def _key_image(key: bytes | None) -> tuple[dict | None, dict]:
    """A delete without its before image: the row's key columns from the message key."""
    try:
        body, schema = payload(key)
    except NotAnEvent:
        return None, {}
    fields = {c["field"]: c for c in (schema or {}).get("fields") or ()}
    return body, fields


def key_columns(keys: Sequence[bytes | None]) -> tuple[str, ...]:
    """The key's columns: the fields of the first message key that is a JSON object."""
    for key in keys:
        try:
            body, _schema = payload(key)
        except NotAnEvent:
            continue
        if body:
            return tuple(body)
    return ()


def _value(v: Any, t: pa.DataType, field: dict | None) -> Any:
    if v is None:
        return None
    name = (field or {}).get("name")
    if pat.is_timestamp(t):
        return _timestamp(v, name, t.tz is not None)
    if pat.is_date(t):
        return EPOCH.date() + timedelta(days=v) if isinstance(v, int) else date.fromisoformat(v)
    if pat.is_decimal(t):
        return _decimal(v, name, (field or {}).get("parameters") or {}, t.scale)
    if pat.is_binary(t) and isinstance(v, str):
        return base64.b64decode(v)
    if pat.is_string(t) and not isinstance(v, str):
        return _text(v)
    return v


def _timestamp(v: Any, name: str | None, zoned: bool) -> datetime:
    if isinstance(v, str):
        found = datetime.fromisoformat(v.replace("Z", "+00:00"))
    else:
        per_s = UNITS.get(name) or (
            1_000 if abs(v) < 10**13 else 1_000_000 if abs(v) < 10**16 else 10**9
        )
        found = EPOCH + timedelta(microseconds=v * 1_000_000 // per_s)
    if found.tzinfo is not None and not zoned:
        return found.astimezone(timezone.utc).replace(tzinfo=None)
    if found.tzinfo is None and zoned:
        return found.replace(tzinfo=timezone.utc)
    return found


def _decimal(v: Any, name: str | None, params: dict, scale: int) -> Decimal:
    if name == DECIMAL or (isinstance(v, str) and not _is_number(v)):
        unscaled = int.from_bytes(base64.b64decode(v), "big", signed=True)
        return Decimal(unscaled).scaleb(-int(params.get("scale", scale)))
    return Decimal(str(v))


def _is_number(text: str) -> bool:
    try:
        Decimal(text)
        return True
    except ArithmeticError:
        return False


def _text(v: Any) -> str | None:
    return None if v is None else v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
