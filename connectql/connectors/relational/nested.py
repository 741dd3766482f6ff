"""Nested columns (maps, structs, lists of them) written to a database table as JSON: the
text of each value, the column declared jsonb (PostgreSQL creates jsonb, MySQL JSON), so that
a broker source's __headers or a json message's nested fields reach a table unchanged."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.types as pat

from connectql.connectors.relational.declared import KEY
from connectql.toolkit.jsontext import json_value

JSONB = {KEY.encode(): json.dumps({"postgres": "jsonb"}).encode()}  # a declared type's metadata


def is_nested(t: pa.DataType) -> bool:
    """A map or struct, or a list holding one (a list of scalars is an array column)."""
    if pat.is_map(t) or pat.is_struct(t):
        return True
    return (pat.is_list(t) or pat.is_large_list(t)) and is_nested(t.value_type)


def as_written(schema: pa.Schema | None) -> pa.Schema | None:
    """The schema a table is written with: each nested field a string declared jsonb."""
    if schema is None or not any(is_nested(f.type) for f in schema):
        return schema
    return pa.schema([_written(f) for f in schema])


def _written(f: pa.Field) -> pa.Field:
    if not is_nested(f.type):
        return f
    return pa.field(f.name, pa.string(), f.nullable, {**(f.metadata or {}), **JSONB})


def written(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch with each nested column as its JSON text."""
    if not any(is_nested(f.type) for f in batch.schema):
        return batch
    columns = [
        _json_column(col, f.type) if is_nested(f.type) else col
        for f, col in zip(batch.schema, batch.columns, strict=True)
    ]
    return pa.RecordBatch.from_arrays(columns, schema=as_written(batch.schema))


def _json_column(col: pa.Array, t: pa.DataType) -> pa.Array:
    """A nested column as JSON texts; a column of empty maps or lists (a broker's messages
    without headers) at once, without a Python call per row."""
    if not pat.is_struct(t):
        offsets = col.offsets  # a map's lengths: list_value_length takes lists alone
        empty = pc.equal(pc.subtract(offsets[1:], offsets[:-1]), 0)
        if pc.all(pc.or_kleene(empty, pc.is_null(col))).as_py() is not False:
            text = pa.scalar("{}" if pat.is_map(t) else "[]")
            return pc.if_else(pc.is_null(col), pa.scalar(None, pa.string()), text)
    return pa.array([_json(v, t) for v in col.to_pylist()], pa.string())


def _json(value, t: pa.DataType) -> str | None:
    return (
        None
        if value is None
        else json.dumps(_plain(value, t), default=json_value, ensure_ascii=False)
    )


def _plain(value, t: pa.DataType):
    """A value as JSON holds it: a map as an object (its keys as text)."""
    if value is None:
        return None
    if pat.is_map(t):
        return {str(k): _plain(v, t.item_type) for k, v in value}
    if pat.is_struct(t):
        return {f.name: _plain(value[f.name], f.type) for f in t}
    if pat.is_list(t) or pat.is_large_list(t):
        return [_plain(v, t.value_type) for v in value]
    return value
