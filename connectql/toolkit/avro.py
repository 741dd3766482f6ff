"""Avro values without a registry: a record schema given as JSON text (or derived from Arrow
columns), its Arrow columns, and each message value as one schemaless Avro datum (fastavro)."""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Sequence
from typing import Any

import fastavro
import fastavro.schema
import pyarrow as pa

from connectql.errors import ValidationError

_UNFIT = (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, ValueError)
CONFLUENT_MAGIC = 0  # Confluent's wire format: this byte, a 4-byte schema id, then the datum
CONFLUENT_HEAD = 5
_PLAIN = {
    "boolean": pa.bool_(),
    "int": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "bytes": pa.binary(),
    "string": pa.string(),
}
# logical types read as their plain type: Spark has no time of day, and a uuid is its text
_AS_PLAIN = ("uuid", "time-millis", "time-micros")
# and those decoded as their plain numbers too, Arrow taking them as days or ms/us (faster)
_AS_NUMBERS = ("date", "timestamp-millis", "timestamp-micros", "local-timestamp-millis",
               "local-timestamp-micros")  # fmt: skip
_TIMESTAMPS = {
    "timestamp-millis": "UTC",
    "timestamp-micros": "UTC",
    "local-timestamp-millis": None,
    "local-timestamp-micros": None,
}


class AvroSchema:
    """A parsed record schema: `arrow` (its fields as Arrow columns) and the fastavro schema
    values are read and written with. Built once per process for a given text (`of`)."""

    def __init__(self, declared: dict, where: str):
        if not isinstance(declared, dict) or declared.get("type") != "record":
            raise ValidationError(f"{where}: avro.schema must be an Avro record schema")
        try:
            self.parsed = fastavro.parse_schema(_plain_logicals(declared, _AS_PLAIN))
            self.numbers = fastavro.parse_schema(_plain_logicals(declared, _AS_NUMBERS))
            expanded = fastavro.schema.expand_schema(self.parsed)["fields"]
        except Exception as e:  # fastavro's SchemaParseException, KeyError, ...
            raise ValidationError(f"{where}: avro.schema is no Avro schema: {e}") from None
        self.fields = pa.schema([_field(f, where, top=True) for f in expanded])
        self.arrow = _nullable(self.fields)  # a source's columns: a NULL message, NULLs
        self.raw = pa.struct(_nullable([_field(f, where, True, raw=True) for f in expanded]))
        self.where = where

    @staticmethod
    def of(text: str, where: str) -> AvroSchema:
        """The schema of avro.schema's text (ValidationError naming what is wrong)."""
        return _parsed(text, where)

    def decode(
        self, values: Sequence[bytes | None], header: bool
    ) -> tuple[pa.RecordBatch, list[tuple[int, str]]]:
        """The values as a batch of `arrow` (None: a row of NULLs), and (index, why) of each
        that is no datum of the schema (left out of the batch)."""
        rows, kept, bad = [], [], []
        for i, value in enumerate(values):
            try:
                rows.append(None if value is None else self._datum(value, header))
                kept.append(i)
            except Exception as e:  # whatever bytes that are no datum make fastavro raise
                bad.append((i, f"not an Avro datum of avro.schema: {_reason(e)}"))
        try:
            return _batch(rows, self.raw, self.arrow), bad
        except _UNFIT:  # a datum its column cannot hold (a decimal past its precision)
            return self._one_by_one(rows, kept, bad)

    def _one_by_one(self, rows: list, kept: list[int], bad: list) -> tuple[pa.RecordBatch, list]:
        """The rows that fit their columns as a batch, each that does not a bad value."""
        good = []
        for i, row in zip(kept, rows, strict=True):
            try:
                _batch([row], self.raw, self.arrow)
                good.append(row)
            except _UNFIT as e:
                bad.append((i, f"an Avro datum its columns cannot hold: {_reason(e)}"))
        return _batch(good, self.raw, self.arrow), sorted(bad)

    def _datum(self, value: bytes, header: bool) -> dict:
        if header:
            if len(value) < CONFLUENT_HEAD or value[0] != CONFLUENT_MAGIC:
                raise ValueError("no Confluent header (magic byte 0 and a schema id)")
            value = value[CONFLUENT_HEAD:]
        stream = io.BytesIO(value)
        datum = fastavro.schemaless_reader(stream, self.numbers, None)
        if stream.tell() != len(value):
            raise ValueError(f"{len(value) - stream.tell()} bytes left after the datum")
        return datum

    def encode(self, rows: pa.Table | pa.RecordBatch) -> list[bytes]:
        """Each row (its columns named by the schema's fields) as one Avro datum."""
        names = [n for n in self.arrow.names if n in rows.schema.names]
        out = []
        for row in avro_rows(rows.select(names)):
            stream = io.BytesIO()
            try:
                fastavro.schemaless_writer(stream, self.parsed, row)
            except (TypeError, ValueError, OverflowError) as e:  # a NULL in a field of no null
                raise ValueError(f"{self.where}: a row does not fit avro.schema: {e}") from None
            out.append(stream.getvalue())
        return out

    def check_fits(self, stream: pa.Schema) -> None:
        """That the stream's columns can be written as the schema's fields: each field a
        column of a type that fits it, or nullable (ValidationError naming the field)."""
        for field in self.fields:
            if field.name not in stream.names:
                if not field.nullable:
                    raise ValidationError(
                        f"{self.where}: avro.schema's field {field.name} is no column of the"
                        " stream (and not nullable)"
                    )
                continue
            given = stream.field(field.name).type
            if not fits(given, field.type):
                raise ValidationError(
                    f"{self.where}: column {field.name} ({given}) does not fit avro.schema's"
                    f" field {field.name} ({field.type})"
                )


@functools.lru_cache(maxsize=64)
def _parsed(text: str, where: str) -> AvroSchema:
    try:
        declared = json.loads(text)
    except ValueError as e:
        raise ValidationError(f"{where}: avro.schema is no JSON: {e}") from None
    return AvroSchema(declared, where)


def derived(schema: pa.Schema, where: str) -> AvroSchema:
    """The record schema of Arrow columns (each field nullable, default null)."""
    return AvroSchema.of(json.dumps(record_of(schema, where)), where)


def avro_rows(rows: pa.Table | pa.RecordBatch) -> list[dict]:
    """The rows as the dicts fastavro writes (a map column's lists of pairs as dicts)."""
    mapped = [f for f in rows.schema if _has_map(f.type)]
    found = rows.to_pylist()
    for row in found if mapped else ():
        for f in mapped:
            row[f.name] = _maps_as_dicts(row[f.name], f.type)
    return found


def record_of(schema: pa.Schema, where: str, name: str = "row") -> dict:
    """An Avro record schema (as JSON data) of Arrow columns: each field a union of null and
    the column's type, default null; a struct a record named after its path."""
    fields = [
        {
            "name": f.name,
            "type": ["null", _avro_type(f.type, f.name, f"{name}_{f.name}", where)],
            "default": None,
        }
        for f in schema
    ]
    return {"type": "record", "name": name, "fields": fields}


def _avro_type(t: pa.DataType, column: str, path: str, where: str) -> Any:
    """The Avro type of an Arrow type (ValidationError naming the column if it has none)."""
    simple = [
        (pa.types.is_int64, "long"),
        (pa.types.is_integer, "int"),
        (pa.types.is_float64, "double"),
        (pa.types.is_floating, "float"),
        (pa.types.is_boolean, "boolean"),
        (pa.types.is_string, "string"),
        (pa.types.is_large_string, "string"),
        (pa.types.is_binary, "bytes"),
        (pa.types.is_large_binary, "bytes"),
        (pa.types.is_date32, {"type": "int", "logicalType": "date"}),
    ]
    for test, avro in simple:
        if test(t):
            return avro
    if pa.types.is_timestamp(t):
        kind = "timestamp-micros" if t.tz else "local-timestamp-micros"
        return {"type": "long", "logicalType": kind}
    if pa.types.is_decimal(t):
        return {"type": "bytes", "logicalType": "decimal", "precision": t.precision,
                "scale": t.scale}  # fmt: skip
    inner = functools.partial(_avro_type, column=column, where=where)
    if pa.types.is_map(t) and pa.types.is_string(t.key_type):
        return {"type": "map", "values": ["null", inner(t.item_type, path=path)]}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {"type": "array", "items": ["null", inner(t.value_type, path=path)]}
    if pa.types.is_struct(t):
        return record_of(pa.schema(list(t)), where, path)
    raise ValidationError(f"{where}: column {column} of type {t} cannot be written as avro")


def _plain_logicals(schema: Any, plain: tuple[str, ...]) -> Any:
    """The schema with the logical types `plain` taken off (read as their plain type)."""
    if isinstance(schema, list):
        return [_plain_logicals(s, plain) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _plain_logicals(v, plain) for k, v in schema.items()}
    if out.get("logicalType") in plain or out.get("logicalType") in _AS_PLAIN:
        del out["logicalType"]
    return out


def _field(f: dict, what: str, top: bool = False, raw: bool = False) -> pa.Field:
    """A record's field as a column (nested: always nullable, as Spark's DDL has them); `raw`:
    timestamp-millis as Arrow milliseconds (what the plain numbers decoded are)."""
    where = f"{what}: avro.schema's field {f['name']}" if top else what
    kind, nullable = _arrow_type(f["type"], where, raw)
    return pa.field(f["name"], kind, nullable or not top)


def _arrow_type(t: Any, what: str, raw: bool = False) -> tuple[pa.DataType, bool]:
    """The Arrow type of an (expanded) Avro type, and whether it may be null."""
    if isinstance(t, list):  # a union: null and one type
        others = [u for u in t if u != "null"]
        if len(others) != 1:
            raise ValidationError(f"{what}: a union other than of null and one type: {t}")
        return _arrow_type(others[0], what, raw)[0], len(others) < len(t)
    if isinstance(t, str):
        if t not in _PLAIN:
            raise ValidationError(f"{what}: type {t!r} has no column type")
        return _PLAIN[t], False
    return _complex(t, what, raw), False


def _complex(t: dict, what: str, raw: bool) -> pa.DataType:
    kind, logical = t.get("type"), t.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        precision, scale = int(t.get("precision", 0)), int(t.get("scale", 0))
        if not 0 < precision <= 38:
            raise ValidationError(f"{what}: decimal precision {precision} is not 1 to 38")
        return pa.decimal128(precision, scale)
    if logical == "date" and kind == "int":
        return pa.date32()
    if logical in _TIMESTAMPS and kind == "long":
        unit = "ms" if raw and logical.endswith("millis") else "us"
        return pa.timestamp(unit, tz=_TIMESTAMPS[logical])
    if kind == "record":
        return pa.struct([_field(f, what, raw=raw) for f in t["fields"]])
    if kind == "array":
        return pa.list_(_arrow_type(t["items"], what, raw)[0])
    if kind == "map":
        return pa.map_(pa.string(), _arrow_type(t["values"], what, raw)[0])
    if kind == "enum":
        return pa.string()
    if kind == "fixed":
        return pa.binary()
    return _arrow_type(kind, what, raw)[0]  # {"type": "long"}, an unknown logical type on it


def fits(given: pa.DataType, wanted: pa.DataType) -> bool:
    """Whether a column of type `given` can be written as an Avro field read as `wanted`."""
    if given == wanted or pa.types.is_null(given):
        return True
    same = [pa.types.is_integer, pa.types.is_floating, pa.types.is_timestamp]
    if any(test(given) and test(wanted) for test in same):
        return not pa.types.is_integer(given) or given.bit_width <= wanted.bit_width
    if pa.types.is_integer(given) and pa.types.is_floating(wanted):
        return True
    if pa.types.is_decimal(given) and pa.types.is_decimal(wanted):
        return given.scale == wanted.scale and given.precision <= wanted.precision
    if pa.types.is_map(given) and pa.types.is_map(wanted):
        return fits(given.item_type, wanted.item_type)
    if _is_list(given) and _is_list(wanted):
        return fits(given.value_type, wanted.value_type)
    if pa.types.is_struct(given) and pa.types.is_struct(wanted):
        have = {f.name: f.type for f in given}
        return all(fits(have[f.name], f.type) if f.name in have else f.nullable for f in wanted)
    return False


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _has_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    if _is_list(t):
        return _has_map(t.value_type)
    return pa.types.is_struct(t) and any(_has_map(f.type) for f in t)


def _maps_as_dicts(value: Any, t: pa.DataType) -> Any:
    """A value as to_pylist gives it, its maps (lists of pairs) as the dicts fastavro takes."""
    if value is None:
        return None
    if pa.types.is_map(t):
        return {k: _maps_as_dicts(v, t.item_type) for k, v in value}
    if _is_list(t):
        return [_maps_as_dicts(v, t.value_type) for v in value]
    if pa.types.is_struct(t):
        return {f.name: _maps_as_dicts(value.get(f.name), f.type) for f in t}
    return value


def _batch(rows: list[dict | None], raw: pa.StructType, schema: pa.Schema) -> pa.RecordBatch:
    """The decoded records (dates and times as their numbers, `raw`) as columns of `schema`,
    in one pass of Arrow's (a None record: a row of NULLs)."""
    records = pa.array(rows, raw)
    if raw != pa.struct(list(schema)):
        records = records.cast(pa.struct(list(schema)))
    return pa.RecordBatch.from_arrays(records.flatten(), schema=schema)


def _nullable(fields) -> pa.Schema:
    """The fields with every top-level one nullable (a NULL message is a row of NULLs)."""
    return pa.schema([f.with_nullable(True) for f in fields])


def _reason(e: Exception) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:300]
