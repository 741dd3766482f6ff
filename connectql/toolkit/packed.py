"""How the rows of several tables (or one table's, cheaply) travel through one Spark query:
packed, a Spark row per chunk of one table's rows (`__table`, and the rows as Arrow IPC in its
stream's columns), so that a batch's plan does not grow with the tables' columns. The stream
writer unpacks each table's chunks into that table's stream."""

from __future__ import annotations

import json

import pyarrow as pa
from pyspark.sql.types import StructType

from connectql.toolkit.envelope import SOURCE, TABLE_COLUMN

ROWS_COLUMN = "__rows"  # a chunk of one table's rows as Arrow IPC
STREAM_COLUMN = "__stream"  # several streams read by one query (a sink's): a chunk's stream
# the reader option listing (JSON) each table's stream schema: [[table, Spark schema JSON], ...]
SCHEMAS_OPTION = "connectql.tables.schemas"
# the reader option listing (JSON) the tables stopped by a value they cannot read (catalog)
FAILED_OPTION = "connectql.tables.failed"
# the reader option listing (JSON) the tables added while it ran (found, or by ALTER)
ADDED_OPTION = "connectql.tables.added"
# the reader option giving (JSON) the tables to read again whole: {table: request number}
SNAPSHOT_OPTION = "connectql.tables.snapshot"
# the Spark schema of a several-table source: a row is one chunk of one table's rows
PACKED_DDL = f"`{TABLE_COLUMN}` STRING, `{ROWS_COLUMN}` BINARY"
# a chunk's size at most (about): one Spark row holds it whole
PACK_BYTES = 8 * 1024 * 1024
# the reader option saying that the one table of SCHEMAS_OPTION is a one-table source's, packed
# only to move its rows cheaply (its offsets, errors and dead letters stay a one-table source's)
ONE_OPTION = "connectql.tables.one"
ONE_KEY = ""  # the `__table` of a one-table source's packed rows
# the __table of a several-table source's dead letters (no table is named ''): rows whose
# __source holds each record's JSON (offset, error_class, error_message, raw_record)
DEAD_LETTERS = ""
LETTERS_ARROW = pa.schema([(SOURCE, pa.string())])


def schemas_option(parts: list[tuple[str, StructType]]) -> str:
    """SCHEMAS_OPTION's value for the tables of `parts`, (table, its stream's schema)."""
    return json.dumps([[t, s.jsonValue()] for t, s in parts])


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


def pack_letters(records: list[dict]) -> pa.RecordBatch:
    """Dead letters (dicts of offset, error_class, error_message, raw_record) as packed rows."""
    texts = [json.dumps(r, sort_keys=True, default=str) for r in records]
    rows = pa.RecordBatch.from_arrays([pa.array(texts, pa.string())], schema=LETTERS_ARROW)
    return pack(DEAD_LETTERS, rows, LETTERS_ARROW)


def by_table(rows: pa.Table) -> dict[str, pa.Table]:
    """A packed Arrow table's rows (pack) as each table's rows, in the order they came."""
    chunks: dict[str, list[pa.RecordBatch]] = {}
    tables, blobs = rows[TABLE_COLUMN].to_pylist(), rows[ROWS_COLUMN].to_pylist()
    for table, blob in zip(tables, blobs, strict=True):
        chunks.setdefault(table, []).extend(pa.ipc.open_stream(blob).read_all().to_batches())
    return {t: pa.Table.from_batches(b) for t, b in chunks.items() if b}
