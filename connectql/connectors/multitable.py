"""Several tables in one source: which `table` values name several (a comma list or patterns),
and how their rows travel through one Spark query: packed, a Spark row per chunk of one table's
rows (`__table`, and the rows as Arrow IPC in its stream's columns), so that a batch's plan does
not grow with the tables' columns. Each table's rows go to a stream of their own."""

from __future__ import annotations

import dataclasses
import fnmatch
import json

import pyarrow as pa
from pyspark.sql.types import StructType

from connectql.errors import PlanError
from connectql.toolkit.envelope import TABLE_COLUMN

ROWS_COLUMN = "__rows"  # a chunk of one table's rows as Arrow IPC
# the reader option listing (JSON) each table's stream schema: [[table, Spark schema JSON], ...]
SCHEMAS_OPTION = "connectql.tables.schemas"
# the Spark schema of a several-table source: a row is one chunk of one table's rows
PACKED_DDL = f"`{TABLE_COLUMN}` STRING, `{ROWS_COLUMN}` BINARY"
# a chunk's size at most (about): one Spark row holds it whole
PACK_BYTES = 8 * 1024 * 1024


# the reader option listing (JSON) the tables stopped by a value they cannot read (catalog)
FAILED_OPTION = "connectql.tables.failed"
# the reader option saying that the one table of SCHEMAS_OPTION is a one-table source's, packed
# only to move its rows cheaply (its offsets, errors and dead letters stay a one-table source's)
ONE_OPTION = "connectql.tables.one"
ONE_KEY = ""  # the `__table` of a one-table source's packed rows


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


def with_tables_schemas(reader, parts: list[tuple[str, StructType]]):
    """A reader spec (planner) that reads the tables of `parts`, (table, its stream's schema)
    in reading order: the packed Spark schema, the tables' schemas in SCHEMAS_OPTION."""
    tables = json.dumps([[t, s.jsonValue()] for t, s in parts])
    options = {**reader.options, SCHEMAS_OPTION: tables}
    return dataclasses.replace(reader, schema=PACKED_DDL, options=options)


def packed_one(reader, struct: StructType):
    """A one-table source's reader spec (planner) that sends its rows packed, a Spark row per
    chunk: Spark then moves a few large values per batch instead of converting every row from
    Arrow and back (the stream writer writes the chunks as they are)."""
    reader = with_tables_schemas(reader, [(ONE_KEY, struct)])
    return dataclasses.replace(reader, options={**reader.options, ONE_OPTION: "true"})


def option_schemas(options: dict[str, str]) -> dict[str, StructType] | None:
    """Each table's stream schema from a reader's options, in order; None: one table."""
    text = options.get(SCHEMAS_OPTION)
    if not text:
        return None
    return {t: StructType.fromJson(s) for t, s in json.loads(text)}


def ipc_bytes(rows: pa.Table | pa.RecordBatch) -> bytes:
    """Rows as one Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as w:
        w.write(rows)
    return sink.getvalue().to_pybytes()


def pack(table: str, batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """One table's rows (its own column names) as rows of PACKED_DDL: chunks of at most
    about PACK_BYTES, each in the columns and types of `target` (its stream's)."""
    batch = pa.RecordBatch.from_arrays([batch.column(f.name) for f in target], schema=target)
    per = max(1, batch.num_rows * PACK_BYTES // max(1, batch.nbytes))
    blobs = [ipc_bytes(batch.slice(i, per)) for i in range(0, batch.num_rows, per)]
    return pa.RecordBatch.from_arrays(
        [pa.array([table] * len(blobs), pa.string()), pa.array(blobs, pa.binary())],
        names=[TABLE_COLUMN, ROWS_COLUMN],
    )


def by_table(rows: pa.Table) -> dict[str, pa.Table]:
    """A packed Arrow table's rows (pack) as each table's rows, in the order they came."""
    chunks: dict[str, list[pa.RecordBatch]] = {}
    tables, blobs = rows[TABLE_COLUMN].to_pylist(), rows[ROWS_COLUMN].to_pylist()
    for table, blob in zip(tables, blobs, strict=True):
        chunks.setdefault(table, []).extend(pa.ipc.open_stream(blob).read_all().to_batches())
    return {t: pa.Table.from_batches(b) for t, b in chunks.items() if b}
