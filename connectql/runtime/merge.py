"""Merging a stream's small files: their records rewritten into one Parquet file that takes
their place in the stream's log in one step (see retention.merge_groups for which files)."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from connectql.catalog.streams import StaleFiles, local_path, replace_files
from connectql.runtime.retention import entry_times
from connectql.runtime.streamwriter import ROW_GROUP_BYTES

Keep = Callable[[list[str]], list[pa.Array]]  # files -> the row numbers kept of each
COMPACT_MEMORY = "256MB"  # DuckDB's limit while choosing rows; past it, it spills to disk


def last_changes(key: tuple[str, ...], tombstones_before_ms: int) -> Keep:
    """Key compaction: of a change stream's records, the last change per key (by `__pos`,
    the sink's order), less deletes committed at the source before `tombstones_before_ms` (a
    delete younger than that stays, so a sink that has not caught up still deletes the row).
    Only the key and change columns are read to choose, by DuckDB within COMPACT_MEMORY (it
    spills past that), so a table bigger than memory compacts; the rows kept are then copied
    file by file, in log order (which is `__pos` order)."""
    cols = ", ".join(f'"{c}"' for c in key)

    def keep(files: list[str]) -> list[pa.Array]:
        spill = Path(files[0]).parent / f".compact.{os.getpid()}.tmp"
        con = duckdb.connect(config={"memory_limit": COMPACT_MEMORY, "temp_directory": str(spill)})
        try:
            con.register("cq_files", pa.table({"cq_file": files, "cq_f": range(len(files))}))
            chosen = con.execute(
                f"SELECT cq_f, cq_r FROM (SELECT f.cq_f, r.file_row_number AS cq_r, __op,"
                f" __ts_ms, row_number() OVER (PARTITION BY {cols} ORDER BY __pos DESC, f.cq_f"
                f" DESC, r.file_row_number DESC) AS cq_n FROM read_parquet(?, filename = true,"
                f" file_row_number = true, union_by_name = true) r JOIN cq_files f"
                f" ON r.filename = f.cq_file) WHERE cq_n = 1 AND NOT (__op = 'd' AND __ts_ms <"
                f" {int(tombstones_before_ms)}) ORDER BY cq_f, cq_r",
                [files],
            ).fetchnumpy()
        finally:
            con.close()
            shutil.rmtree(spill, ignore_errors=True)
        ends = np.searchsorted(chosen["cq_f"], np.arange(len(files) + 1))
        rows = chosen["cq_r"]
        return [pa.array(rows[ends[i] : ends[i + 1]], pa.int64()) for i in range(len(files))]

    return keep


def _aligned(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The table with the merged file's columns: a column an older file lacks (added by schema
    evolution) is null there, as Spark and DuckDB read it from the small file; one stored in
    another timestamp unit is cast to the merged one."""
    columns = [
        table.column(f.name).cast(f.type, safe=False)
        if f.name in table.column_names
        else pa.nulls(len(table), f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def in_micros(t: pa.DataType) -> pa.DataType:
    """`t` with every timestamp in microseconds, nested ones too: Spark's own files hold
    INT96 timestamps (read as nanoseconds), a Python source's microseconds, and one stream
    holds both; Spark reads either as its microsecond TIMESTAMP."""
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", t.tz)
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(in_micros(f.type)) for f in t])
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(in_micros(t.value_type)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(in_micros(t.value_type)))
    if pa.types.is_map(t):
        key, item = t.key_field, t.item_field
        return pa.map_(key.with_type(in_micros(key.type)), item.with_type(in_micros(item.type)))
    return t


def merged_schema(files: list[str]) -> pa.Schema:
    """The schema the files' records are merged into: theirs unified, timestamps in
    microseconds, and a timestamp column some file holds with a zone (UTC) zoned in all (an
    INT96 file reads without one, its values UTC all the same)."""
    schemas = [pq.read_schema(f).remove_metadata() for f in files]
    zones = {
        f.name: f.type.tz for s in schemas for f in s if pa.types.is_timestamp(f.type) and f.type.tz
    }

    def field(f: pa.Field) -> pa.Field:
        t = in_micros(f.type)
        if pa.types.is_timestamp(t) and f.name in zones:
            t = pa.timestamp("us", zones[f.name])
        return f.with_type(t)

    return pa.unify_schemas([pa.schema([field(f) for f in s]) for s in schemas])


def _tables(files: list[str], schema: pa.Schema, keep: Keep | None):
    """The files' records (those `keep` chose), a file at a time."""
    kept = keep(files) if keep is not None else [None] * len(files)
    for f, rows in zip(files, kept, strict=True):
        if rows is None or len(rows):
            table = _aligned(pq.read_table(f), schema)
            yield table if rows is None else table.take(rows)


def write_merged(stream: Path, files: list[str], name: str, keep: Keep | None = None) -> Path:
    """The records of `files` (those `keep` keeps), in order, into `stream/name` (written
    aside, then moved in: unlisted until the log names it). Row groups of about
    ROW_GROUP_BYTES, as the stream writer makes them, so a sink's read splits a big file
    between tasks."""
    schema = merged_schema(files)
    tmp = stream / f".{name}.{os.getpid()}.tmp"
    pending: list[pa.Table] = []
    with pq.ParquetWriter(
        tmp, schema, coerce_timestamps="us", allow_truncated_timestamps=True
    ) as out:
        for table in _tables(files, schema, keep):
            for batch in table.to_batches(max_chunksize=64 * 1024):
                pending.append(pa.Table.from_batches([batch], schema))
                if sum(t.nbytes for t in pending) >= ROW_GROUP_BYTES:
                    out.write_table(pa.concat_tables(pending), row_group_size=1 << 30)
                    pending = []
        if pending:
            out.write_table(pa.concat_tables(pending), row_group_size=1 << 30)
    target = stream / name
    tmp.replace(target)
    return target


def merge(
    stream_path: str | Path, group: list[dict], log_time: int, keep: Keep | None = None
) -> dict:
    """Merge the committed files of `group` into one (`keep`: only the records it keeps, see
    last_changes); returns its log entry. A kill at any
    point leaves the log listing either the small files or the merged one: an unlisted merged
    file is swept later, as are the small ones (their mtime is set to now, so that a reader
    that listed them just before goes on reading them for sweep_orphans' grace time)."""
    stream = Path(stream_path)
    first = min(entry_times(e)[0] for e in group)
    last = max(entry_times(e)[1] for e in group)
    files = [local_path(e["path"]) for e in group]
    name = f"merged-{first}-{last}-{uuid.uuid4().hex[:8]}.parquet"
    target = write_merged(stream, files, name, keep)
    now = time.time()
    for f in files:
        os.utime(f, (now, now))
    entry = {
        "path": target.resolve().as_uri(),
        "size": target.stat().st_size,
        "isDir": False,
        "modificationTime": log_time,
        "blockReplication": 1,
        "blockSize": 33554432,
        "action": "add",
    }
    try:
        replace_files(stream, {e["path"] for e in group}, [entry])
    except StaleFiles:
        target.unlink(missing_ok=True)
        raise
    return entry
