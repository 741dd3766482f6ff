"""A table without a primary key, snapshotted for cdc as it was at the source's start position,
so that no row is both in the snapshot and in the binlog after it (an append target would get
it twice, and without a key nothing can tell the copies apart).

The table is read in one transaction `WITH CONSISTENT SNAPSHOT`, whose binlog position MariaDB
gives (`binlog_snapshot_file`/`_position`); the table's changes between the start position and
that one are then undone on the rows read, as a multiset: an insert removes its row, a delete
puts its row back, an update swaps its after image for its before image. The result is the
same rows each time the range is read, so a replayed batch is identical."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.types import StructType

from connectql.connectors.mysql import binlog
from connectql.connectors.mysql.client import query
from connectql.connectors.mysql.tables import columns_of
from connectql.connectors.mysql.types import Column, arrow_schema, binlog_value
from connectql.errors import ConnectQLError, PlanError

SNAPSHOT_STATUS = "SHOW STATUS LIKE 'binlog_snapshot_%'"


def snapshot_position(conn) -> dict | None:
    """The binlog position of the connection's consistent snapshot (MariaDB); None on a server
    that does not tell it (MySQL)."""
    status = {_s(k).lower(): _s(v) for k, v in query(conn, SNAPSHOT_STATUS)}
    if "binlog_snapshot_file" not in status or not status["binlog_snapshot_file"]:
        return None
    return binlog.position(status["binlog_snapshot_file"], int(status["binlog_snapshot_position"]))


def check_supported(conn, table: str, where: str) -> None:
    """At CREATE: cdc on a table without a key needs the snapshot's binlog position."""
    if not query(conn, SNAPSHOT_STATUS):
        raise PlanError(
            f"{where}: table {table} has no primary key, and this server does not give the"
            " binlog position of a consistent snapshot (MariaDB's binlog_snapshot_position;"
            " MySQL has none), so cdc could copy a row twice: add a primary key, or use"
            " mode = 'bulk' or 'incremental'"
        )


def read_as_of(reader, conn, table, start: dict, schema: StructType, rows) -> Iterator:
    """The rows of `table` as they were at binlog position `start`. `rows(conn)` reads the
    whole table through `conn` (inside the snapshot's transaction)."""
    with conn.cursor() as cur:
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
    try:
        at = snapshot_position(conn)
        batches = list(rows(conn))
    finally:
        conn.rollback()
    if at is None:
        raise ConnectQLError(f"table {table} has no primary key and the server gave no snapshot")
    target = arrow_schema(schema)
    counts = Counter(r for b in batches for r in _tuples(b, target))
    if binlog.order(at) > binlog.order(start):
        _undo(counts, _changes(reader, conn, table, start, at, schema), table)
    out = [row for row, n in counts.items() for _ in range(n)]
    arrays = [pa.array([r[i] for r in out], f.type) for i, f in enumerate(target)]
    yield pa.RecordBatch.from_arrays(arrays, schema=target)


def _changes(reader, conn, table: str, start: dict, at: dict, schema: StructType) -> list:
    """(op, row, before row) of the table's changes in (start, at], rows in Arrow's values."""
    walker = binlog.Walker(reader.cfg, {table: columns_of(conn, reader.cfg.schema, table)}, 1)
    types = {c.name: c.column_type for c in walker.columns[table]}
    found = []
    for txn in walker.transactions(start, conn):
        if binlog.order(txn.end) > binlog.order(at):
            break
        found += [(op, values, before) for t, op, values, before in txn.changes if t == table]
    target = arrow_schema(schema)

    def rows(images: list) -> list:
        arrays = [
            pa.array([binlog_value(v.get(f.name), Column(f.name, types.get(f.name, "")), f.dataType)
                      for v in images], target.field(f.name).type)
            for f in schema.fields
        ]  # fmt: skip
        return _tuples(pa.RecordBatch.from_arrays(arrays, schema=target), target)

    after = rows([values for _op, values, _b in found])
    before = rows([b or {} for _op, _v, b in found])
    return [(op, a, b) for (op, _v, _bv), a, b in zip(found, after, before, strict=True)]


def _undo(counts: Counter, changes: list, table: str) -> None:
    for op, row, before in reversed(changes):
        if op in ("c", "u"):
            counts[row] -= 1
        if op == "u":
            counts[before] += 1
        elif op == "d":
            counts[row] += 1
    if any(n < 0 for n in counts.values()):
        raise ConnectQLError(
            f"the snapshot of table {table} (no primary key) does not match its binlog changes"
        )


def _tuples(batch: pa.RecordBatch, target: pa.Schema) -> list[tuple]:
    columns = [batch.column(n).to_pylist() for n in target.names]
    return list(zip(*columns, strict=True)) if columns else []


def _s(value) -> str:
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)
