"""The sink's objects: rows as parquet, jsonl, csv or avro (compressed), object names from a
template, and rows cut into objects of at most file.max.records."""

from __future__ import annotations

import json
import string
from dataclasses import dataclass

import fastavro
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from connectql.errors import ValidationError
from connectql.toolkit.avro import avro_rows, record_of
from connectql.toolkit.jsontext import json_value

SINK_FORMATS = ("parquet", "jsonl", "csv", "avro")
COMPRESSIONS = ("none", "gzip", "zstd", "snappy")
PLACEHOLDERS = ("stream", "partition", "start_offset", "batch", "ext")
OFFSET_DIGITS = 20  # start offsets zero-padded: key order is offset order
_TEXT_SUFFIX = {"gzip": ".gz", "zstd": ".zst"}
_AVRO_CODEC = {"none": "null", "gzip": "deflate"}


@dataclass(frozen=True)
class ObjectFormat:
    """How the sink writes: `name` one of SINK_FORMATS, `compression` one of COMPRESSIONS."""

    name: str
    compression: str

    @property
    def ext(self) -> str:
        return (
            self.name + _TEXT_SUFFIX.get(self.compression, "")
            if self.name in ("jsonl", "csv")
            else self.name
        )

    def check(self) -> None:
        c, n = self.compression, self.name
        if n == "parquet" or (n in ("jsonl", "csv") and c != "snappy") or c in _AVRO_CODEC:
            return
        allowed = {"jsonl": "none, gzip, zstd", "csv": "none, gzip, zstd", "avro": "none, gzip"}[n]
        raise ValidationError(
            f"s3 sink: compression '{c}' is not available for {n} (it takes {allowed})"
        )

    def write(self, out, table: pa.Table) -> None:
        """The rows as one object into the output stream `out`."""
        if self.name == "parquet":
            codec = "NONE" if self.compression == "none" else self.compression.upper()
            pq.write_table(table, out, compression=codec)
        elif self.name == "avro":
            schema = avro_schema(table.schema)
            fastavro.writer(out, schema, _avro_rows(table), codec=_AVRO_CODEC[self.compression])
        else:
            stream = (
                out
                if self.compression == "none"
                else pa.CompressedOutputStream(out, self.compression)
            )
            if self.name == "csv":
                pacsv.write_csv(table, stream)
            else:
                _write_jsonl(stream, table)
            if stream is not out:
                stream.close()


def _write_jsonl(out, table: pa.Table) -> None:
    for batch in table.to_batches(max_chunksize=10_000):
        text = "".join(json.dumps(r, default=json_value) + "\n" for r in batch.to_pylist())
        out.write(text.encode())


def avro_schema(schema: pa.Schema) -> dict:
    """The objects' Avro schema: the toolkit's record of the columns (ValidationError naming a
    column of a type Avro has none for)."""
    return fastavro.parse_schema(record_of(schema, "s3 sink"))


def _avro_rows(table: pa.Table):
    for batch in table.to_batches(max_chunksize=10_000):
        yield from avro_rows(batch)


class Template:
    """An object name template: `{stream}`, `{partition}` (the writer task), `{start_offset}`
    (records the sink wrote before this object, zero-padded), `{batch}`, `{ext}`."""

    def __init__(self, text: str):
        self.text = text
        fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
        unknown = [f for f in fields if f not in PLACEHOLDERS]
        if unknown:
            raise ValidationError(
                f"s3 sink: file.name.template names {{{unknown[0]}}}; it may use"
                f" {', '.join('{' + p + '}' for p in PLACEHOLDERS)}"
            )
        if "start_offset" not in fields:
            raise ValidationError(
                "s3 sink: file.name.template must hold {start_offset}: without it two objects"
                " would get the same name"
            )

    def name(self, stream: str, partition: int, start_offset: int, batch: int, ext: str) -> str:
        offset = str(start_offset).zfill(OFFSET_DIGITS)
        return self.text.format(
            stream=stream, partition=partition, start_offset=offset, batch=batch, ext=ext
        )
