"""Dead letters: the records a source could not parse, as rows of a dead-letter stream with the
connector, the stage, the source offset, the error and the raw record."""

from __future__ import annotations

import functools

import pyarrow as pa
from pyspark.sql import functions as F

from connectql.connectors.multitable import select_table
from connectql.runtime.streamwriter import Output

# the columns of every dead-letter stream: these text columns, then `time`
TEXT_COLUMNS = ("connector", "stage", "source_offset", "error_class", "error_message", "raw_record")
DEADLETTER_DDL = ", ".join(f"`{c}` STRING" for c in TEXT_COLUMNS) + ", `time` TIMESTAMP"
# the same as Arrow, for writers that are not Spark queries (a database sink's commit)
DEADLETTER_ARROW = pa.schema(
    [(c, pa.string()) for c in TEXT_COLUMNS] + [("time", pa.timestamp("us", tz="UTC"))]
)
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
    if plan.table_paths:  # several tables: each table's rows to its own stream
        return [
            Output(path, functools.partial(select_table, table=t))
            for t, path in plan.table_paths.items()
        ]
    if not col:
        return [Output(plan.writer.path, lambda df: df)]
    good = Output(plan.writer.path, lambda df: df.where(F.col(col).isNull()).drop(col, FILE_COLUMN))
    bad = Output(plan.deadletter_path, lambda df: _dead_letters(df, plan))
    return [good, bad]


def _dead_letters(df, plan):
    col = plan.reader.corrupt_column
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
