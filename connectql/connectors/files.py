"""The `file` connector: a directory of csv/json/parquet/text files as source or sink
(Spark's own file source and exactly-once file sink)."""

from __future__ import annotations

from typing import Any

from connectql.connectors.base import Plugin, ReaderSpec, WriterSpec
from connectql.connectors.common import SINK_COMMON, SOURCE_COMMON
from connectql.connectors.options import Option

CORRUPT_COLUMN = "_corrupt_record"

SOURCE_OPTIONS = {
    **SOURCE_COMMON,
    **{
        o.name: o
        for o in [
            Option(
                "path",
                required=True,
                doc="directory to read; new files are picked up while running",
            ),
            Option(
                "format",
                "enum",
                "csv",
                choices=("csv", "json", "parquet", "text"),
                doc="file format: csv, json (one object per line), parquet or text (one row per line)",
            ),
            Option(
                "schema",
                doc="Spark DDL of the rows, e.g. 'id BIGINT, name STRING';"
                " inferred from existing files when absent (csv, json, parquet)",
            ),
            Option("header", "bool", True, doc="csv: the first line holds column names"),
            Option(
                "files.max.per.trigger", "int", doc="at most this many new files per micro-batch"
            ),
        ]
    },
}

SINK_OPTIONS = {
    **SINK_COMMON,
    **{
        o.name: o
        for o in [
            Option(
                "path", required=True, doc="directory to write (exactly-once: Spark's file sink)"
            ),
            Option(
                "format",
                "enum",
                "parquet",
                choices=("parquet", "json", "csv"),
                doc="file format: parquet, json (one object per line) or csv",
            ),
            Option("header", "bool", True, doc="csv: write a header line"),
        ]
    },
}


def plan_source(opts: dict[str, Any]) -> ReaderSpec:
    fmt = opts["format"]
    spark_opts: dict[str, str] = {}
    if fmt == "csv":
        # Spark turns "" into NULL unless nullValue is a marker that never occurs (NOTES.md).
        spark_opts.update(header=str(opts["header"]).lower(), nullValue="\u0000")
    corrupt = None
    if fmt in ("csv", "json"):
        if opts["errors.tolerance"] == "all":
            corrupt = CORRUPT_COLUMN
            spark_opts.update(mode="PERMISSIVE", columnNameOfCorruptRecord=CORRUPT_COLUMN)
        else:
            spark_opts["mode"] = "FAILFAST"
    if opts.get("files.max.per.trigger"):
        spark_opts["maxFilesPerTrigger"] = str(opts["files.max.per.trigger"])
    schema = "value STRING" if fmt == "text" else opts.get("schema")
    return ReaderSpec(
        format=fmt, options=spark_opts, path=opts["path"], schema=schema, corrupt_column=corrupt
    )


def plan_sink(opts: dict[str, Any], stream=None) -> WriterSpec:
    spark_opts = {"header": str(opts["header"]).lower()} if opts["format"] == "csv" else {}
    return WriterSpec(format=opts["format"], options=spark_opts, path=opts["path"])


PLUGIN = Plugin(
    type="file",
    doc="Files in a directory: csv, json lines, parquet or text. Source picks up new files;"
    " sink writes exactly-once through Spark's file sink (only files in _spark_metadata count).",
    source_options=SOURCE_OPTIONS,
    sink_options=SINK_OPTIONS,
    plan_source=plan_source,
    plan_sink=plan_sink,
    delivery="exactly-once",
)
