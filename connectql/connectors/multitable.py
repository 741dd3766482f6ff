"""Several tables in one source: which `table` values name several (a comma list or patterns),
and the one Spark schema that carries them all: each table's columns as `<table>/<column>`,
a `__table` tag, then the change-data columns. Each table's rows go to a stream of their own."""

from __future__ import annotations

import fnmatch
import itertools

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import StringType, StructField, StructType

from connectql.errors import PlanError
from connectql.toolkit.envelope import META_COLUMNS, TABLE_COLUMN

SEP = "/"


# the reader option listing (JSON) the tables stopped by a value they cannot read (catalog)
FAILED_OPTION = "connectql.tables.failed"


def patterns(table: str | None) -> tuple[str, ...]:
    """The items of a `table` value that names several tables (a comma list, or one pattern
    with * ? or %); () when it names one table."""
    text = str(table or "")
    if not any(c in text for c in "*?%,"):
        return ()
    return tuple(t.strip() for t in text.split(",") if t.strip())


def matching(names: list[str], items: tuple[str, ...], where: str) -> list[str]:
    """The names (a schema's tables) the items match (a name, or a pattern: * or % any text,
    ? one character), in the order of the items, then by name; a PlanError naming an item
    that matches none, with `where` saying where was looked."""
    found: list[str] = []
    for item in items:
        glob = item.replace("%", "*")
        hits = sorted(n for n in names if fnmatch.fnmatchcase(n, glob))
        if not hits:
            known = f" (tables there: {', '.join(sorted(names)[:10])})" if names else ""
            raise PlanError(f"table = '{item}' matches no table in {where}{known}")
        found += [n for n in hits if n not in found]
    return found


def column(table: str, name: str) -> str:
    return f"{table}{SEP}{name}"


def union_schema(parts: list[tuple[str, StructType]]) -> StructType:
    """One schema for the rows of several tables: `parts` are (table, its stream's schema)."""
    meta: list[StructField] = []
    fields = [StructField(TABLE_COLUMN, StringType(), False)]
    for table, schema in parts:
        for f in schema.fields:
            if f.name in META_COLUMNS:
                meta = meta or [m for m in schema.fields if m.name in META_COLUMNS]
            else:
                fields.append(StructField(column(table, f.name), f.dataType, True, f.metadata))
    return StructType(fields + meta)


def split_union(schema: StructType) -> dict[str, StructType] | None:
    """Each table's schema (its data columns, then the change-data columns) from a union
    schema, in order; None when `schema` is one table's."""
    if TABLE_COLUMN not in schema.fieldNames():
        return None
    meta = [f for f in schema.fields if f.name in META_COLUMNS]
    tables: dict[str, list[StructField]] = {}
    for f in schema.fields:
        if SEP in f.name:
            table, name = f.name.split(SEP, 1)
            tables.setdefault(table, []).append(StructField(name, f.dataType, True, f.metadata))
    return {t: StructType(fields + meta) for t, fields in tables.items()}


def to_union(batch: pa.RecordBatch, table: str, target: pa.Schema) -> pa.RecordBatch:
    """One table's rows (its own column names) as rows of the union schema `target`."""
    n, prefix = batch.num_rows, table + SEP
    arrays = []
    for f in target:
        if f.name == TABLE_COLUMN:
            arrays.append(pa.array([table] * n, f.type))
        elif f.name.startswith(prefix):
            arrays.append(batch.column(f.name[len(prefix) :]))
        elif f.name in META_COLUMNS:
            arrays.append(batch.column(f.name))
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def select_table(df, table: str):
    """The rows of `table` from a union DataFrame, in its stream's columns."""
    from pyspark.sql import functions as F

    prefix = table + SEP
    cols = [
        F.col(f"`{c}`").alias(c[len(prefix) :]) if c.startswith(prefix) else F.col(c)
        for c in df.columns
        if c.startswith(prefix) or c in META_COLUMNS
    ]
    return df.where(F.col(TABLE_COLUMN) == table).select(*cols)


def by_table(rows: pa.Table) -> dict[str, pa.Table]:
    """A union Arrow table's rows split by table (each table's in stream order), each in its
    stream's columns: select_table for every table at once."""
    if not rows.num_rows:
        return {}
    rows = rows.take(pc.sort_indices(rows[TABLE_COLUMN]))  # a stable sort
    out, start = {}, 0
    for table, run in itertools.groupby(rows[TABLE_COLUMN].to_pylist()):
        n = sum(1 for _ in run)
        out[table] = _own_columns(rows.slice(start, n), table)
        start += n
    return out


def _own_columns(rows: pa.Table, table: str) -> pa.Table:
    prefix = table + SEP
    names = [c for c in rows.column_names if c.startswith(prefix) or c in META_COLUMNS]
    rows = rows.select(names).rename_columns([c.removeprefix(prefix) for c in names])
    return rows.cast(pa.schema([f.with_type(_plain(f.type)) for f in rows.schema]))


def _plain(t: pa.DataType) -> pa.DataType:
    """`t` with 32-bit offsets (Spark's toArrow may give large types; its files have neither)."""
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_large_list(t) or pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_plain(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_plain(f.type)) for f in t])
    if pa.types.is_map(t):
        return pa.map_(_plain(t.key_type), _plain(t.item_type))
    return t
