"""Dead letters: the records a source could not parse, as rows of a dead-letter stream with the
connector, the stage, the source offset, the error and the raw record."""

from __future__ import annotations

import functools
import json
import re
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import functions as F

from connectql.errortext import short_error
from connectql.runtime.retention import batch_files
from connectql.runtime.streamwriter import Output
from connectql.toolkit.envelope import (  # noqa: F401 (re-exported)
    DEAD_LETTER_COLUMN,
    DEADLETTER_ARROW,
    DEADLETTER_DDL,
    deadletter_name,
)
from connectql.toolkit.envelope import DEADLETTER_TEXT_COLUMNS as TEXT_COLUMNS  # noqa: F401
from connectql.toolkit.packed import DEAD_LETTERS, ONE_KEY, ONE_OPTION

FILE_COLUMN = "__connectql_file"


def with_file_column(df):
    """The rows with the file each came from (the source offset of a dead letter)."""
    return df.withColumn(FILE_COLUMN, F.input_file_name())


def outputs(plan) -> list[Output]:
    """Where a source's batch goes: the good rows to its stream (a multi-table source's, each
    table's rows to the table's stream); with a corrupt-record column,
    the records that did not parse to the dead-letter stream (or, with errors.tolerance =
    'none', nowhere: the reader fails on them instead)."""
    col = plan.reader.corrupt_column
    if plan.reader.options.get(ONE_OPTION):  # one table's rows, packed
        return [Output(plan.writer.path, _same, table=ONE_KEY)]
    if plan.table_paths:  # several tables: each table's rows to its own stream
        tables = [Output(path, _same, table=t) for t, path in plan.table_paths.items()]
        unread = functools.partial(_unread_changes, connector=plan.connector)
        dead = Output(plan.deadletter_path, unread, table=DEAD_LETTERS)
        return tables + ([dead] if plan.deadletter_path else [])
    if plan.reader.skips_unreadable:
        good = Output(plan.writer.path, lambda df: df.drop(FILE_COLUMN))
        bad = Output(plan.deadletter_path, functools.partial(_unread_files, plan=plan), True)
        return [good, bad]
    if not col:
        return [Output(plan.writer.path, lambda df: df)]
    good = Output(plan.writer.path, lambda df: df.where(F.col(col).isNull()).drop(col, FILE_COLUMN))
    bad = Output(plan.deadletter_path, lambda df: _dead_letters(df, plan))
    return [good, bad]


def _unread_files(df, batch_id: int, plan):
    """A dead letter for each file of the batch that Spark skipped as unreadable: a file that
    gave no row although it holds some (or cannot be opened)."""
    seen = {r[0] for r in df.select(FILE_COLUMN).distinct().collect()}
    now = datetime.now(timezone.utc)
    rows = [
        (plan.connector, "read", json.dumps({"file": f}), "UNREADABLE_FILE", why, None, now)
        for f in batch_files(plan.checkpoint, batch_id)
        if f not in seen and (why := _unreadable(f, plan.reader))
    ]
    return df.sparkSession.createDataFrame(rows, DEADLETTER_DDL)


def _unreadable(uri: str, reader) -> str | None:
    """Why a file that gave no row is a dead letter, or None when it simply holds none."""
    local = unquote(urlparse(uri).path)
    if reader.format == "text":
        return "Spark could not read the file" if Path(local).stat().st_size else None
    try:
        found = pq.ParquetFile(local)
    except Exception as e:  # not a Parquet file at all, or a damaged one
        return f"not a readable parquet file: {short_error(str(e))}"
    if found.metadata.num_rows == 0:
        return None
    columns = ", ".join(f"{f.name} {f.type}" for f in found.schema_arrow)
    return f"its columns ({columns}) do not fit the schema ({reader.schema})"


def _same(rows: pa.Table) -> pa.Table:
    return rows


def _unread_changes(rows: pa.Table, connector: str) -> pa.Table:
    """The changes a source of several tables could not read (changerows.dead_letters: each
    one's record as JSON in __source) as dead-letter rows."""
    records = [json.loads(r) for r in rows["__source"].to_pylist()]
    now = datetime.now(timezone.utc)
    columns = {
        "connector": [connector] * len(records),
        "stage": ["read"] * len(records),
        "source_offset": [_json_text(r.get("offset")) for r in records],
        "error_class": [_json_text(r.get("error_class")) for r in records],
        "error_message": [_json_text(r.get("error_message")) for r in records],
        "raw_record": [_json_text(r.get("raw_record")) for r in records],
        "time": [now] * len(records),
    }
    return pa.Table.from_pydict(columns, schema=DEADLETTER_ARROW)


def _json_text(value) -> str | None:
    """A JSON field as Spark's get_json_object gives it: text as it is, anything else as
    compact JSON."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), default=str)


def _dead_letters(df, plan):
    col = plan.reader.corrupt_column
    if col == DEAD_LETTER_COLUMN:
        return _toolkit_dead_letters(df, plan)
    return df.where(F.col(col).isNotNull()).select(
        F.lit(plan.connector).alias("connector"),
        F.lit("read").alias("stage"),
        F.to_json(F.struct(F.col(FILE_COLUMN).alias("file"))).alias("source_offset"),
        F.lit("MALFORMED_RECORD").alias("error_class"),
        F.lit(
            f"the {plan.reader.format} record does not fit the schema ({plan.reader.schema})"
        ).alias("error_message"),
        F.col(col).alias("raw_record"),
        F.current_timestamp().alias("time"),
    )


def _toolkit_dead_letters(df, plan):
    """A toolkit source's records that did not parse: their text columns are JSON in one column
    (connectql/toolkit/spark.py)."""
    field = functools.partial(F.get_json_object, F.col(DEAD_LETTER_COLUMN))
    return df.where(F.col(DEAD_LETTER_COLUMN).isNotNull()).select(
        F.lit(plan.connector).alias("connector"),
        F.lit("read").alias("stage"),
        *[field(f"$.{c}").alias(c) for c in TEXT_COLUMNS[2:]],
        F.current_timestamp().alias("time"),
    )


def rejected_rows(path: str | None, wid: str, batch_id: int) -> int:
    """Rows the batch `batch_id` of sink writer `wid` sent to its dead-letter stream at `path`
    (relational/sink.py, toolkit/spark.py)."""
    if not path:
        return 0
    name = deadletter_name(wid, batch_id)
    # a toolkit sink's later rounds: <name>-<round>; a sink of several streams: each stream's
    # writer id (toolkit/routed.py) is `wid` and 8 hex digits
    own = re.compile(re.escape(wid) + "([0-9a-f]{8})?" + re.escape(name[len(wid) :]) + r"(-\d+)?")
    files = [f for f in Path(path).glob(f"{wid}*.parquet") if own.fullmatch(f.stem)]
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)
