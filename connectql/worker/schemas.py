"""A stream's schema as text: a Spark struct as DDL (declared source types kept), and what
differs between a stream's schema and a new source's."""

from __future__ import annotations

import json

from connectql.connectors.relational.declared import field_ddl


def schema_ddl(struct) -> str:
    return ", ".join(field_ddl(f) for f in struct.fields)


def schema_diff(old_json: str, new) -> str:
    old = {
        f["name"]: f["type"] if isinstance(f["type"], str) else json.dumps(f["type"])
        for f in json.loads(old_json)["fields"]
    }
    new_f = {
        f.name: f.dataType.typeName()
        if f.dataType.typeName() != "decimal"
        else f.dataType.simpleString()
        for f in new.fields
    }
    parts = [
        f"only in the stream: {', '.join(sorted(set(old) - set(new_f)))}"
        if set(old) - set(new_f)
        else "",
        f"only in the new source: {', '.join(sorted(set(new_f) - set(old)))}"
        if set(new_f) - set(old)
        else "",
        "; ".join(
            f"{n} is {old[n]} in the stream but {new_f[n]} in the new source"
            for n in sorted(set(old) & set(new_f))
            if old[n] != new_f[n]
        ),
    ]
    return "; ".join(p for p in parts if p)
