"""Merging a stream's small files: their records rewritten into one Parquet file that takes
their place in the stream's log in one step (see retention.merge_groups for which files)."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from connectql.catalog.streams import replace_files
from connectql.runtime.retention import entry_times, local_path
from connectql.runtime.streamwriter import ROW_GROUP_BYTES


def _aligned(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """The table with the merged file's columns: a column an older file lacks (added by schema
    evolution) is null there, as Spark and DuckDB read it from the small file."""
    columns = [
        table.column(f.name) if f.name in table.column_names else pa.nulls(len(table), f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def write_merged(stream: Path, files: list[str], name: str) -> Path:
    """The records of `files`, in order, into `stream/name` (written aside, then moved in:
    unlisted until the log names it). Row groups of about ROW_GROUP_BYTES, as the stream
    writer makes them, so a sink's read splits a big file between tasks."""
    schema = pa.unify_schemas([pq.read_schema(f).remove_metadata() for f in files])
    tmp = stream / f".{name}.{os.getpid()}.tmp"
    pending: list[pa.Table] = []
    with pq.ParquetWriter(
        tmp, schema, coerce_timestamps="us", allow_truncated_timestamps=True
    ) as out:
        for f in files:
            pending.append(_aligned(pq.read_table(f), schema))
            if sum(t.nbytes for t in pending) >= ROW_GROUP_BYTES:
                out.write_table(pa.concat_tables(pending), row_group_size=1 << 30)
                pending = []
        if pending:
            out.write_table(pa.concat_tables(pending), row_group_size=1 << 30)
    target = stream / name
    tmp.replace(target)
    return target


def merge(stream_path: str | Path, group: list[dict], log_time: int) -> dict:
    """Merge the committed files of `group` into one; returns its log entry. A kill at any
    point leaves the log listing either the small files or the merged one: an unlisted merged
    file is swept later, as are the small ones (their mtime is set to now, so that a reader
    that listed them just before goes on reading them for sweep_orphans' grace time)."""
    stream = Path(stream_path)
    first = min(entry_times(e)[0] for e in group)
    last = max(entry_times(e)[1] for e in group)
    files = [local_path(e["path"]) for e in group]
    target = write_merged(stream, files, f"merged-{first}-{last}-{uuid.uuid4().hex[:8]}.parquet")
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
    replace_files(stream, {e["path"] for e in group}, [entry])
    return entry
