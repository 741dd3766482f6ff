"""The `file` connector: a directory of csv/json/parquet/text files as source or sink
(Spark's own file source and exactly-once file sink)."""

from __future__ import annotations

from typing import Any

from connectql.config import Option
from connectql.connectors.base import Plugin, ReaderSpec, WriterSpec
from connectql.connectors.common import SINK_COMMON, SOURCE_COMMON
from connectql.errors import ValidationError

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
                " inferred from existing files when absent (csv, json, parquet);"
                " text: 'value STRING' only",
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


TEXT_SCHEMA = "value STRING"


def _check_source(opts: dict[str, Any]) -> None:
    """Refuse what Spark's file source would silently not do."""
    if opts["tasks.max"] > 1:
        raise ValidationError(
            f"file source: tasks.max = {opts['tasks.max']} is refused: Spark's file source"
            " splits files into tasks by size itself (files.max.per.trigger bounds a batch)"
        )
    given = opts.get("schema")
    if opts["format"] == "text" and given and _plain(given) != _plain(TEXT_SCHEMA):
        raise ValidationError(
            f"file source: format = 'text' reads each line as one column, so schema must be"
            f" '{TEXT_SCHEMA}' (or absent), not '{given}'"
        )


def _plain(ddl: str) -> str:
    return " ".join(ddl.replace("`", "").split()).lower()


def plan_source(opts: dict[str, Any], name: str = "") -> ReaderSpec:
    _check_source(opts)
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
    unreadable = fmt in ("parquet", "text") and opts["errors.tolerance"] == "all"
    if unreadable:
        spark_opts["ignoreCorruptFiles"] = "true"
    if opts.get("files.max.per.trigger"):
        spark_opts["maxFilesPerTrigger"] = str(opts["files.max.per.trigger"])
    schema = TEXT_SCHEMA if fmt == "text" else opts.get("schema")
    return ReaderSpec(
        format=fmt,
        options=spark_opts,
        path=opts["path"],
        schema=schema,
        corrupt_column=corrupt,
        skips_unreadable=unreadable,
    )


def plan_sink(opts: dict[str, Any], stream=None, name: str = "") -> WriterSpec:
    if opts["errors.tolerance"] == "all":
        raise ValidationError(
            "file sink refuses errors.tolerance = 'all': it writes every row of its stream as"
            " it is (the stream's types are fixed), so it never meets a bad record"
        )
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
