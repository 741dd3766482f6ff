"""The s3 connector's declared options, the settings read from them, and a schema inferred from
an object's first records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from connectql.config import Option
from connectql.connectors.s3 import records
from connectql.connectors.s3.records import Format
from connectql.connectors.s3.store import Matcher, Place, place_of
from connectql.errors import PlanError, ValidationError
from connectql.toolkit import SOURCE, ddl
from connectql.toolkit.ddl import spark_types


def _declared(*options: Option) -> dict[str, Option]:
    return {o.name: o for o in options}


STORE_OPTIONS = _declared(
    Option(
        "endpoint",
        doc="URL of an S3-compatible server, e.g. 'http://127.0.0.1:8333'; absent: AWS S3",
    ),
    Option("region", doc="the bucket's region, e.g. 'us-east-1'; absent: us-east-1"),
    Option("bucket", required=True, doc="the bucket"),
    Option(
        "access.key",
        doc="access key id, with secret.key; absent: the standard AWS credential chain",
    ),
    Option("secret.key", secret=True, doc="secret access key (a secret: never shown)"),
)

SOURCE_OPTIONS = {
    **STORE_OPTIONS,
    **_declared(
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
            " absent: inferred from the first object's first 1000 records at CREATE",
        ),
        Option("csv.header", "bool", True, doc="csv: the first line holds column names"),
        Option("csv.delimiter", default=",", doc="csv: the field delimiter (one character)"),
        Option(
            "poll.interval.ms",
            "int",
            5000,
            doc="when a look found no new object, wait this long before listing the bucket again",
        ),
    ),
}


@dataclass(frozen=True)
class SourceSettings:
    """What the source needs, read once from its options."""

    place: Place
    matcher: Matcher
    format: Format
    poll_ms: int
    tasks: int
    arrow: pa.Schema | None  # the records' types (None: inferred from the first object)


def source_settings(opts: dict[str, Any]) -> SourceSettings:
    if (opts.get("poll.interval.ms") or 0) < 0:
        raise ValidationError("s3 source: poll.interval.ms must be at least 0")
    delimiter = opts.get("csv.delimiter") or ","
    if len(delimiter) != 1:
        raise ValidationError(f"s3 source: csv.delimiter must be one character, not {delimiter!r}")
    given = opts.get("schema")
    if given and SOURCE in ddl.arrow_schema(given).names:
        raise ValidationError(f"s3 source: schema must not name {SOURCE}: the source adds it")
    return SourceSettings(
        place=place_of(opts),
        matcher=Matcher(opts.get("prefix") or "", opts.get("pattern"), opts["pattern.type"]),
        format=Format(opts["format"], bool(opts["csv.header"]), delimiter),
        poll_ms=opts["poll.interval.ms"],
        tasks=opts.get("tasks.max") or 1,
        arrow=ddl.arrow_schema(given) if given else None,
    )


def infer_arrow(fs, s: SourceSettings, key: str) -> pa.Schema:
    """The Arrow schema of the object's first records, as Spark takes it."""
    handle, _ = records.open_object(fs, s.place.path(key), s.format)
    with handle:
        try:
            found = records.infer(handle, s.format)
        except Exception as e:
            raise PlanError(
                f"s3 source: cannot infer the schema of {s.place.url(key)} as"
                f" {s.format.name}: {str(e).splitlines()[0]}; give it with schema = '...'"
            ) from None
    return spark_types(found)
