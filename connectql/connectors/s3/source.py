"""The s3 source's Spark reader: objects in key order, each read from the record its offset
entry has reached, so a replayed or resumed batch reads exactly the same records."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from connectql.connectors.s3 import offsets, records
from connectql.connectors.s3.records import Bad, Format
from connectql.connectors.s3.store import Listed, Matcher, Place, etag_of, head_etag, list_objects
from connectql.errors import PermanentError

SOURCE_COLUMN = "__source"
CORRUPT_COLUMN = "_corrupt_record"


class RecordError(PermanentError):
    """A record that does not parse, with errors.tolerance = 'none'."""


class ObjectChanged(PermanentError):
    """An object was replaced while a batch that reads it was in flight."""


@dataclass(frozen=True)
class Settings:
    """What the reader needs (picklable: a copy goes to every Spark worker)."""

    place: Place
    matcher: Matcher
    format: Format
    per_batch: int
    poll_ms: int
    tasks: int
    tolerant: bool  # errors.tolerance = 'all': bad records become dead letters


@dataclass(frozen=True)
class Ranges(InputPartition):
    """The record ranges one task reads, in key order."""

    ranges: tuple[offsets.Range, ...]


class S3StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """latestOffset lists the objects and counts records of those it reaches (cached by ETag in
    this long-lived source process); read opens each object of its partition, checks its ETag
    and reads the partition's records."""

    def __init__(self, settings: Settings, schema: StructType):
        self.s = settings
        self.schema = schema
        self.arrow = to_arrow_schema(schema, timezone="UTC")
        self._fs = None
        self._versions: dict[Listed, str] = {}  # listed object -> ETag
        self._totals: dict[tuple[str, str], int] = {}  # (key, ETag) -> records
        self._frozen: list[Listed] | None = None  # available-now: the objects there at the start
        self._listed: list[Listed] = []
        self._idle_until = 0.0
        self._latest = {"done": 0, "bytes": 0}

    @property
    def fs(self):
        if self._fs is None:
            self._fs = self.s.place.filesystem()
        return self._fs

    # -- planning (the source process) --------------------------------------------------
    def initialOffset(self) -> dict:  # noqa: N802 (Spark's names)
        return offsets.EMPTY

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        return ReadMaxRows(self.s.per_batch)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._frozen = self._list()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # noqa: N802
        if self._frozen is None and time.monotonic() < self._idle_until:
            return start  # nothing was new at the last look: wait poll.interval.ms
        self._listed = self._frozen if self._frozen is not None else self._list()
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if isinstance(limit, ReadAllAvailable):
            budget = None
        end = offsets.advance(start, self._seen(start), budget)
        objects, size = offsets.pending(end, self._listed, self._versions.get)
        self._latest = {"done": end["done"] + objects, "bytes": end["bytes"] + size}
        if end == start:
            self._idle_until = time.monotonic() + self.s.poll_ms / 1000
        return end

    def reportLatestOffset(self) -> dict:  # noqa: N802
        return self._latest

    def _list(self) -> list[Listed]:
        return list_objects(self.fs, self.s.place, self.s.matcher)

    def _seen(self, start: dict) -> Iterator[offsets.Seen]:
        """The listed objects with records left after `start`, counted when first reached."""
        for obj in self._listed:
            etag = self._etag(obj)
            if offsets.unfinished(start, obj.key, etag):
                yield offsets.Seen(obj.key, etag, obj.size, self._total(obj, etag))

    def _etag(self, obj: Listed) -> str:
        if obj not in self._versions:
            self._versions[obj] = head_etag(self.fs, self.s.place, obj.key)
        return self._versions[obj]

    def _total(self, obj: Listed, etag: str) -> int:
        if (obj.key, etag) not in self._totals:
            handle, meta = records.open_object(self.fs, self.s.place.path(obj.key), self.s.format)
            with handle:
                _check_version(self.s.place, obj.key, etag, meta)
                self._totals[(obj.key, etag)] = records.count(handle, self.s.format)
        return self._totals[(obj.key, etag)]

    def partitions(self, start: dict, end: dict) -> list[Ranges]:
        found = offsets.ranges(start, end)
        return [Ranges(tuple(g)) for g in offsets.split(found, self.s.tasks)]

    def commit(self, end: dict) -> None:
        pass

    # -- reading (Spark's workers) ------------------------------------------------------
    def read(self, partition: Ranges) -> Iterator[pa.RecordBatch]:
        for r in partition.ranges:
            yield from self._read_range(r)

    def _read_range(self, r: offsets.Range) -> Iterator[pa.RecordBatch]:
        place, data = self.s.place, self.arrow.remove(self.arrow.get_field_index(SOURCE_COLUMN))
        if CORRUPT_COLUMN in data.names:
            data = data.remove(data.get_field_index(CORRUPT_COLUMN))
        handle, meta = records.open_object(self.fs, place.path(r.key), self.s.format)
        with handle:
            _check_version(place, r.key, r.etag, meta)
            for chunk in records.chunks(handle, self.s.format, data, r.first, r.last):
                if chunk.bad and not self.s.tolerant:
                    raise RecordError(_bad_message(place, r.key, chunk.bad[0], self.s.format))
                batch = records.with_source(chunk, place.bucket, r.key)
                if self.s.tolerant:
                    yield self._conform(batch.append_column(CORRUPT_COLUMN, _nulls(batch)))
                    if chunk.bad:
                        yield self._dead(chunk.bad, place.bucket, r.key)
                else:
                    yield batch

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        return batch.select(self.arrow.names).cast(self.arrow)

    def _dead(self, bad: list[Bad], bucket: str, key: str) -> pa.RecordBatch:
        """Rows of the records that did not parse: only __source and the raw record set."""
        numbers = pa.array([b.record for b in bad], pa.int64())
        empty = pa.RecordBatch.from_pylist([{}] * len(bad), self.arrow)
        columns = {
            SOURCE_COLUMN: records.sources(numbers, bucket, key),
            CORRUPT_COLUMN: pa.array([b.raw for b in bad]),
        }
        arrays = [columns.get(f.name, empty.column(f.name)) for f in self.arrow]
        return pa.RecordBatch.from_arrays(arrays, schema=self.arrow)


def _nulls(batch: pa.RecordBatch) -> pa.Array:
    return pa.nulls(batch.num_rows, pa.string())


def _check_version(place: Place, key: str, etag: str, meta: dict) -> None:
    found = etag_of(meta)
    if found != etag:
        raise ObjectChanged(
            f"s3 source: {place.url(key)} was replaced (ETag {found}, expected {etag}) while a"
            " batch reading it was in flight; the batch cannot be read again as it was"
        )


def _bad_message(place: Place, key: str, bad: Bad, fmt: Format) -> str:
    line = f" (line {bad.line})" if bad.line else ""
    raw = bad.raw if len(bad.raw) <= 120 else bad.raw[:117] + "..."
    return (
        f"s3 source: {place.url(key)} record {bad.record}{line} is not a valid {fmt.name}"
        f" record for the schema: {bad.error}; record: {raw!r}"
        " (errors.tolerance = 'all' sends such records to a dead-letter stream)"
    )
