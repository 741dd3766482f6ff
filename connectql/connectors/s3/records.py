"""Records of one object (jsonl, csv, parquet, avro; jsonl and csv gzip/zstd by suffix) as Arrow
batches from record N on, with the records that do not parse set apart, and record counts."""

from __future__ import annotations

import csv
import functools
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

FORMATS = ("jsonl", "csv", "parquet", "avro")
COMPRESSION = {".gz": "gzip", ".gzip": "gzip", ".zst": "zstd", ".zstd": "zstd"}
CHUNK_BYTES = 4 << 20  # compressed-or-not bytes read at a time from an object
BLOCK_RECORDS = 65_536  # the most records parsed into one batch


@dataclass
class Bad:
    """A record that does not parse: its number (0-based), line (1-based, text formats), its
    raw bytes and why. Where an object stops decoding (not gzip, truncated, not parquet or
    avro), its unreadable rest is one Bad record after the last readable one, `rest` set and
    no raw bytes (the reader adds the object's own)."""

    record: int
    line: int | None
    raw: bytes
    error: str
    rest: bool = False


@dataclass
class Chunk:
    """Records [first, first + rows) of an object: the good ones as a batch in the schema, with
    their record numbers, and the bad ones."""

    batch: pa.RecordBatch
    numbers: pa.Array  # int64, the record number of each row of `batch`
    bad: list[Bad] = field(default_factory=list)


@dataclass(frozen=True)
class Format:
    """How the records of an object are read: `name` one of FORMATS; csv's header and delimiter."""

    name: str
    header: bool = True
    delimiter: str = ","

    def compression(self, key: str) -> str | None:
        if self.name not in ("jsonl", "csv"):
            return None
        return next((c for s, c in COMPRESSION.items() if key.lower().endswith(s)), None)


class RecordError(ValueError):
    """A record that does not parse, with errors.tolerance = 'none'."""


# what a codec or a file reader raises on bytes that do not decode
UNDECODABLE = (OSError, ValueError, EOFError, pa.ArrowInvalid)


@dataclass(frozen=True)
class Count:
    """The records of an object: `readable` of them, and `broken`, why the rest of the object
    does not decode (one more record, a dead letter), or None."""

    readable: int
    broken: str | None = None

    @property
    def total(self) -> int:
        return self.readable + (self.broken is not None)


def _undecodable(fmt: Format, e: Exception) -> str:
    what = f"{fmt.name} object" if fmt.name in ("parquet", "avro", "csv") else "compressed object"
    return f"not a readable {what}: {_reason(e)}"


def _rest(number: int, fmt: Format, schema: pa.Schema, e: Exception) -> Chunk:
    """The unreadable rest of an object, from record `number` on, as one bad record."""
    bad = Bad(number, None, b"", _undecodable(fmt, e), rest=True)
    return Chunk(pa.RecordBatch.from_pylist([], schema=schema), pa.array([], pa.int64()), [bad])


def open_object(fs, path: str, fmt: Format) -> tuple[pa.NativeFile, dict]:
    """The object opened for reading its records, and its response headers (with the ETag):
    parquet and avro as a random-access file, the others as a (decompressed) stream."""
    if fmt.name in ("parquet", "avro"):
        found = fs.open_input_file(path)
        return found, found.metadata()
    raw = fs.open_input_stream(path, compression=None)  # not pyarrow's guess from the suffix
    metadata = raw.metadata()
    codec = fmt.compression(path)
    return (pa.CompressedInputStream(raw, codec) if codec else raw), metadata


# ---------------------------------------------------------------------------------------------
# text formats: a record is a non-blank line (csv: after the header line)
# ---------------------------------------------------------------------------------------------


def _lines(stream) -> Iterator[list[bytes]]:
    """The stream's lines (without line ends), a chunk at a time."""
    rest = b""
    while True:
        data = stream.read(CHUNK_BYTES)
        if not data:
            break
        lines = (rest + data).split(b"\n")
        rest = lines.pop()
        yield lines
    if rest:
        yield [rest]


def _numbered(stream, skip_header: bool) -> Iterator[tuple[list[bytes], list[int], bytes | None]]:
    """Blocks of (records, their line numbers, the header line or None)."""
    line, header = 0, None
    for lines in _lines(stream):
        records, numbers = [], []
        for text in lines:
            line += 1
            if skip_header and header is None:
                header = _text_header(text)
                continue
            if text.strip():
                records.append(text)
                numbers.append(line)
        for at in range(0, len(records), BLOCK_RECORDS):
            yield records[at : at + BLOCK_RECORDS], numbers[at : at + BLOCK_RECORDS], header


def _text_header(line: bytes) -> bytes:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("its first line is no csv header (not text)") from None
    return line


def count_text(stream, fmt: Format) -> Count:
    skip, number = fmt.name == "csv" and fmt.header, 0
    try:
        for records, _, _ in _numbered(stream, skip):
            number += len(records)
    except UNDECODABLE as e:
        return Count(number, _undecodable(fmt, e))
    return Count(number)


def _parse_jsonl(lines: list[bytes], schema: pa.Schema, _header) -> pa.RecordBatch:
    options = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
    table = pajson.read_json(io.BytesIO(b"\n".join(lines)), parse_options=options)
    return _conform(table, schema)


def _parse_csv(lines: list[bytes], schema: pa.Schema, header: bytes | None, fmt: Format):
    if header is not None and not set(_header_names(header, fmt.delimiter)) & set(schema.names):
        raise ValueError(f"the header line names none of the columns ({', '.join(schema.names)})")
    names = None if header is not None else schema.names
    body = b"\n".join(lines if header is None else [header, *lines])
    table = pacsv.read_csv(
        io.BytesIO(body),
        read_options=pacsv.ReadOptions(column_names=names, block_size=max(len(body), 1) + 1),
        parse_options=pacsv.ParseOptions(delimiter=fmt.delimiter),
        convert_options=pacsv.ConvertOptions(
            column_types=schema, include_columns=schema.names, include_missing_columns=True
        ),
    )
    if table.num_rows != len(lines):
        raise ValueError(f"{table.num_rows} rows in {len(lines)} lines")
    return _conform(table, schema)


@functools.lru_cache(maxsize=64)
def _header_names(header: bytes, delimiter: str) -> tuple[str, ...]:
    """The column names a csv header line gives (none when it is no csv header at all)."""
    try:
        return tuple(next(csv.reader([header.decode("utf-8")], delimiter=delimiter), ()))
    except (csv.Error, UnicodeDecodeError):
        return ()


def _conform(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    """One batch in exactly the schema (Spark refuses anything else)."""
    return _one(table.select(schema.names).cast(schema), schema)


def _one(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    batches = table.combine_chunks().to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=schema)


def _text_chunks(stream, fmt: Format, schema: pa.Schema, start: int, end: int) -> Iterator[Chunk]:
    parse = (
        _parse_jsonl if fmt.name == "jsonl" else (lambda lines, s, h: _parse_csv(lines, s, h, fmt))
    )
    number = 0  # record number of the block's first record
    blocks = _numbered(stream, fmt.name == "csv" and fmt.header)
    while number < end:
        try:
            records, lines, header = next(blocks)
        except StopIteration:
            return
        except UNDECODABLE as e:
            if start <= number:
                yield _rest(number, fmt, schema, e)
            return
        lo, hi = max(start - number, 0), min(end - number, len(records))
        if lo < hi:
            yield _parsed(parse, records[lo:hi], lines[lo:hi], number + lo, schema, header)
        number += len(records)


def _parsed(parse, records, lines, first, schema, header) -> Chunk:
    """The block parsed at once; when that fails, record by record to set the bad ones apart."""
    try:
        batch = parse(records, schema, header)
        return Chunk(batch, pa.array(range(first, first + len(records)), pa.int64()))
    except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError):
        pass
    good, numbers, bad = [], [], []
    for i, (text, line) in enumerate(zip(records, lines, strict=True)):
        try:
            good.append(parse([text], schema, header))
            numbers.append(first + i)
        except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError) as e:
            bad.append(Bad(first + i, line, text, _reason(e)))
    batch = pa.Table.from_batches(good, schema) if good else schema.empty_table()
    return Chunk(_one(batch, schema), pa.array(numbers, pa.int64()), bad)


def _reason(e: Exception) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return text[:300]


# ---------------------------------------------------------------------------------------------
# parquet and avro: a record is a row
# ---------------------------------------------------------------------------------------------


def _parquet_or_rest(handle, schema, start, end) -> Iterator[Chunk]:
    try:
        found = pq.ParquetFile(handle)
    except UNDECODABLE as e:  # no parquet at all: the whole object is record 0
        if start == 0 < end:
            yield _rest(0, Format("parquet"), schema, e)
        return
    yield from _parquet_chunks(found, schema, start, end)


def _parquet_chunks(found: pq.ParquetFile, schema, start, end) -> Iterator[Chunk]:
    first = 0
    for group in range(found.num_row_groups):
        rows = found.metadata.row_group(group).num_rows
        lo, hi = max(start - first, 0), min(end - first, rows)
        if lo < hi:
            table = found.read_row_group(group, columns=_present(found, schema))
            table = _with_missing(table, schema).slice(lo, hi - lo)
            numbers = pa.array(range(first + lo, first + hi), pa.int64())
            yield Chunk(_conform(table, schema), numbers)
        first += rows
        if first >= end:
            return


def _present(found: pq.ParquetFile, schema: pa.Schema) -> list[str]:
    return [n for n in schema.names if n in found.schema_arrow.names]


def _with_missing(table: pa.Table, schema: pa.Schema) -> pa.Table:
    for f in schema:
        if f.name not in table.column_names:
            table = table.append_column(f.name, pa.nulls(table.num_rows, f.type))
    return table


def _avro_blocks(stream) -> Iterator[list[dict]]:
    """The object's records a block at a time, each block decoded whole before it is given (so
    counting and reading stop at the same record when a block does not decode)."""
    for block in fastavro.block_reader(stream):
        yield list(block)


def count_avro(stream) -> Count:
    number = 0
    try:
        for block in _avro_blocks(stream):
            number += len(block)
    except UNDECODABLE as e:
        return Count(number, _undecodable(Format("avro"), e))
    return Count(number)


def _avro_chunks(stream, schema, start, end) -> Iterator[Chunk]:
    number, blocks = 0, _avro_blocks(stream)
    while number < end:
        try:
            block = next(blocks)
        except StopIteration:
            return
        except UNDECODABLE as e:
            if start <= number:
                yield _rest(number, Format("avro"), schema, e)
            return
        lo, hi = max(start - number, 0), min(end - number, len(block))
        for at in range(lo, hi, BLOCK_RECORDS):
            rows = block[at : min(at + BLOCK_RECORDS, hi)]
            yield _avro_chunk(rows, number + at, schema)
        number += len(block)


def _avro_chunk(rows: list[dict], first: int, schema: pa.Schema) -> Chunk:
    batch = pa.RecordBatch.from_pylist(
        [{n: r.get(n) for n in schema.names} for r in rows], schema=schema
    )
    return Chunk(batch, pa.array(range(first, first + len(rows)), pa.int64()))


# ---------------------------------------------------------------------------------------------
# the ways in
# ---------------------------------------------------------------------------------------------


def count(handle, fmt: Format) -> Count:
    """How many records the opened object holds (the same numbering `chunks` uses)."""
    if fmt.name == "parquet":
        try:
            return Count(pq.ParquetFile(handle).metadata.num_rows)
        except UNDECODABLE as e:
            return Count(0, _undecodable(fmt, e))
    return count_avro(handle) if fmt.name == "avro" else count_text(handle, fmt)


def chunks(handle, fmt: Format, schema: pa.Schema, start: int, end: int) -> Iterator[Chunk]:
    """Records [start, end) of the object opened with open_object; its unreadable rest, if
    any, as one bad record (numbered as `count` counts it)."""
    if fmt.name == "parquet":
        return _parquet_or_rest(handle, schema, start, end)
    if fmt.name == "avro":
        return _avro_chunks(handle, schema, start, end)
    return _text_chunks(handle, fmt, schema, start, end)


def sources(numbers: pa.Array, bucket: str, key: str) -> pa.Array:
    """`__source` of these records: JSON of bucket, key and record number."""
    head = json.dumps({"bucket": bucket, "key": key})[:-1] + ', "record": '
    text = pc.binary_join_element_wise(head, pc.cast(numbers, pa.string()), "}", "")
    return text.cast(pa.string())


def with_source(chunk: Chunk, bucket: str, key: str) -> pa.RecordBatch:
    """The chunk's good rows with `__source`."""
    return chunk.batch.append_column("__source", sources(chunk.numbers, bucket, key))


INFER_RECORDS = 1000  # records of the first object a schema is inferred from


def infer(handle, fmt: Format) -> pa.Schema:
    """The Arrow schema of the opened object's first records."""
    if fmt.name == "parquet":
        return pq.ParquetFile(handle).schema_arrow
    if fmt.name == "avro":
        rows = [r for _, r in zip(range(INFER_RECORDS), fastavro.reader(handle), strict=False)]
        return pa.Table.from_pylist(rows).schema
    blocks = _numbered(handle, fmt.name == "csv" and fmt.header)
    lines, _, header = next(blocks, ([], [], None))
    body = b"\n".join(lines[:INFER_RECORDS])
    if fmt.name == "jsonl":
        return pajson.read_json(io.BytesIO(body)).schema
    names = None if header is not None else [f"c{i}" for i in range(body.count(b",") + 1)]
    text = body if header is None else header + b"\n" + body
    options = pacsv.ReadOptions(column_names=names)
    parse = pacsv.ParseOptions(delimiter=fmt.delimiter)
    return pacsv.read_csv(io.BytesIO(text), read_options=options, parse_options=parse).schema
