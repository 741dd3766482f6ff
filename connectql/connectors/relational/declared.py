"""A source column's declared database type, carried with the stream's schema: a table source
writes it as the column's Spark DDL COMMENT (so it lives in the field's metadata, the catalog's
schema and every plan's DDL), and a database sink's auto.create reads it back."""

from __future__ import annotations

import json
from dataclasses import dataclass

KEY = "comment"  # the StructField metadata key Spark gives a DDL COMMENT


@dataclass(frozen=True)
class Declared:
    """`kind` ('postgres' or 'mysql'), the type as the source database prints it, and an
    enum's labels (PostgreSQL: the type is a name the target may lack)."""

    kind: str
    type: str
    labels: tuple[str, ...] = ()


def comment(kind: str, type_: str, labels: tuple[str, ...] = ()) -> str:
    """The DDL COMMENT clause that carries a declared type, e.g. ` COMMENT '{"postgres": "uuid"}'`."""
    body = {kind: type_, **({"labels": list(labels)} if labels else {})}
    return " COMMENT " + ddl_string(json.dumps(body, ensure_ascii=False))


def ddl_string(text: str) -> str:
    """`text` as a Spark SQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def of(field) -> Declared | None:
    """The declared type a StructField carries; None when it carries none (a computed column,
    a stream not written by a table source)."""
    return parse((field.metadata or {}).get(KEY))


def shown(metadata: dict | None) -> str:
    """A field's declared type as DESCRIBE STREAM shows it after the Spark type: ' (postgres
    uuid)'; '' without one."""
    d = parse((metadata or {}).get(KEY))
    return f" ({d.kind} {d.type})" if d else ""


def parse(text: str | None) -> Declared | None:
    """The declared type in a field's comment text; None when it holds none."""
    try:
        body = json.loads(text) if text else None
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    kinds = [k for k in body if k != "labels"]
    if len(kinds) != 1 or not isinstance(body[kinds[0]], str):
        return None
    return Declared(kinds[0], body[kinds[0]], tuple(body.get("labels") or ()))


def field_ddl(field) -> str:
    """A StructField as Spark DDL, its comment (declared type) kept."""
    text = f"`{field.name}` {type_ddl(field.dataType)}"
    note = (field.metadata or {}).get(KEY)
    return text + (" COMMENT " + ddl_string(note) if note else "")


def type_ddl(dtype) -> str:
    """A Spark type as DDL, a struct's field names as they are (simpleString().upper() made
    STRUCT<a: INT> read STRUCT<A: INT>, and a json reader then found no field A)."""
    from pyspark.sql.types import ArrayType, MapType, StructType

    if isinstance(dtype, StructType):
        inner = ", ".join(f"`{f.name.replace('`', '``')}`: {type_ddl(f.dataType)}" for f in dtype)
        return f"STRUCT<{inner}>"
    if isinstance(dtype, ArrayType):
        return f"ARRAY<{type_ddl(dtype.elementType)}>"
    if isinstance(dtype, MapType):
        return f"MAP<{type_ddl(dtype.keyType)}, {type_ddl(dtype.valueType)}>"
    return dtype.simpleString().upper()
