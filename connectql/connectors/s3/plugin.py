"""The `s3` connector type: its declared options, the source's plan (schema given or inferred
from the first object at CREATE) and the Spark data source `connectql_s3`."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from connectql.connectors.base import Found, Plugin, ReaderSpec
from connectql.connectors.common import SOURCE_COMMON
from connectql.connectors.options import Option
from connectql.connectors.s3 import records
from connectql.connectors.s3.records import Format
from connectql.connectors.s3.source import CORRUPT_COLUMN, SOURCE_COLUMN, S3StreamReader, Settings
from connectql.connectors.s3.store import Matcher, list_objects, place_of
from connectql.errors import PlanError, ValidationError

FORMAT = "connectql_s3"

STORE_OPTIONS = {
    o.name: o
    for o in [
        Option(
            "endpoint",
            doc="URL of an S3-compatible server, e.g. 'http://127.0.0.1:8333'; absent: AWS S3",
        ),
        Option("region", doc="the bucket's region, e.g. 'us-east-1'; absent: AWS's default"),
        Option("bucket", required=True, doc="the bucket"),
        Option(
            "access.key",
            doc="access key id; with secret.key (absent: the standard AWS credential chain)",
        ),
        Option("secret.key", secret=True, doc="secret access key (a secret: never shown)"),
    ]
}

SOURCE_OPTIONS = {
    **SOURCE_COMMON,
    **STORE_OPTIONS,
    **{
        o.name: o
        for o in [
            Option("prefix", default="", doc="read only keys that start with this, e.g. 'in/'"),
            Option(
                "pattern",
                doc="read only keys matching this glob on the whole key (e.g. 'in/*.jsonl.gz'),"
                " or with pattern.type = 'regex' a regular expression found in the key",
            ),
            Option(
                "pattern.type",
                "enum",
                "glob",
                choices=("glob", "regex"),
                doc="how pattern is read: 'glob' or 'regex'",
            ),
            Option(
                "format",
                "enum",
                "jsonl",
                choices=records.FORMATS,
                doc="object format: jsonl (one JSON object per line), csv, parquet or avro;"
                " jsonl and csv objects ending in .gz or .zst are gzip or zstd compressed",
            ),
            Option(
                "schema",
                doc="Spark DDL of the records, e.g. 'id BIGINT, name STRING';"
                " absent: inferred from the first object at CREATE and fixed then",
            ),
            Option("csv.header", "bool", True, doc="csv: the first line holds column names"),
            Option("csv.delimiter", default=",", doc="csv: the field delimiter"),
            Option(
                "poll.interval.ms",
                "int",
                5000,
                doc="how often to list the bucket for new objects when nothing new was found",
            ),
            Option(
                "records.per.batch",
                "int",
                100_000,
                doc="at most this many records per micro-batch (a batch may end inside an"
                " object: the offset keeps the record reached)",
            ),
        ]
    },
}


def settings_of(opts: dict[str, Any]) -> Settings:
    """The reader's settings from validated options."""
    if opts["records.per.batch"] < 1 or opts["poll.interval.ms"] < 0:
        raise ValidationError(
            "s3 source: records.per.batch must be at least 1 and poll.interval.ms at least 0"
        )
    if len(opts["csv.delimiter"]) != 1:
        raise ValidationError(
            f"s3 source: csv.delimiter must be one character, not {opts['csv.delimiter']!r}"
        )
    return Settings(
        place=place_of(opts),
        matcher=Matcher(opts.get("prefix") or "", opts.get("pattern"), opts["pattern.type"]),
        format=Format(opts["format"], bool(opts["csv.header"]), opts["csv.delimiter"]),
        per_batch=opts["records.per.batch"],
        poll_ms=opts["poll.interval.ms"],
        tasks=opts["tasks.max"],
        tolerant=opts["errors.tolerance"] == "all",
    )


# Spark's options are strings: the validated options travel as these keys
_PASSED = [n for n in SOURCE_OPTIONS if n not in SOURCE_COMMON or n in ("tasks.max",)]


def _spark_options(opts: dict[str, Any]) -> dict[str, str]:
    passed = {k: str(opts[k]) for k in _PASSED if opts.get(k) is not None}
    passed["errors.tolerance"] = opts["errors.tolerance"]
    return passed


def _from_spark(options) -> dict[str, Any]:
    """Spark's string options back to typed values (the option spec's coercion)."""
    from connectql.connectors.options import coerce

    given = {str(k).lower(): v for k, v in options.items()}
    found: dict[str, Any] = {}
    for name, spec in SOURCE_OPTIONS.items():
        raw = given.get(name)
        found[name] = coerce(spec, raw, "s3") if raw is not None else spec.default
    return found


def plan_source(opts: dict[str, Any]) -> ReaderSpec:
    settings = settings_of(opts)  # a bad option fails here, at CREATE
    schema = opts.get("schema")
    return ReaderSpec(
        FORMAT,
        _spark_options(opts),
        schema=f"{schema}, `{SOURCE_COLUMN}` STRING" if schema else None,
        lag_field="done",
        secret_options=("secret.key", "access.key"),
        corrupt_column=CORRUPT_COLUMN if settings.tolerant else None,
        discover=None if schema else lambda: [Found(None, infer_ddl(settings))],
        endpoint=settings.place.endpoint,
    )


def infer_ddl(s: Settings) -> str:
    """The Spark DDL of the first object's records (and __source), or a PlanError."""
    fs = s.place.filesystem()
    try:
        listed = list_objects(fs, s.place, s.matcher)
    except OSError as e:
        raise PlanError(f"s3 source: cannot list {s.place.where()}: {e}") from None
    if not listed:
        raise PlanError(
            f"s3 source: no object under prefix '{s.matcher.prefix}' in {s.place.where()}"
            " to infer the schema from; give it with schema = '...'"
        )
    first = listed[0]
    handle, _ = records.open_object(fs, s.place.path(first.key), s.format)
    with handle:
        try:
            arrow = records.infer(handle, s.format)
        except Exception as e:
            raise PlanError(
                f"s3 source: cannot infer the schema of {s.place.url(first.key)} as"
                f" {s.format.name}: {str(e).splitlines()[0]}; give it with schema = '...'"
            ) from None
    struct = from_arrow_schema(_spark_friendly(arrow))
    columns = [f"`{f.name}` {f.dataType.simpleString()}" for f in struct.fields]
    return ", ".join([*columns, f"`{SOURCE_COLUMN}` STRING"])


def _spark_friendly(schema: pa.Schema) -> pa.Schema:
    """Arrow types Spark takes: large strings as strings, timestamps in microseconds UTC."""

    def fix(t: pa.DataType) -> pa.DataType:
        if pa.types.is_large_string(t):
            return pa.string()
        if pa.types.is_timestamp(t):
            return pa.timestamp("us", tz="UTC")
        return t

    return pa.schema([pa.field(f.name, fix(f.type)) for f in schema])


class S3DataSource(DataSource):
    """`spark.readStream.format("connectql_s3")` with the s3 source's options."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def streamReader(self, schema: StructType) -> S3StreamReader:  # noqa: N802 (Spark's name)
        return S3StreamReader(settings_of(_from_spark(self.options)), schema)


PLUGIN = Plugin(
    type="s3",
    doc="Objects in an S3-compatible store (AWS S3, SeaweedFS, MinIO): jsonl, csv, parquet or"
    " avro. The source reads objects in key order and resumes inside an object after a crash.",
    source_options=SOURCE_OPTIONS,
    plan_source=plan_source,
)
