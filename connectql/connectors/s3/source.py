"""The s3 source on the connector toolkit: objects in key order, each read from the record its
offset entry has reached, so a replayed or resumed batch reads exactly the same records."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from connectql.connectors.s3 import offsets, records
from connectql.connectors.s3 import options as declared
from connectql.connectors.s3.store import (
    Listed,
    etag_of,
    head_etag,
    list_objects,
    require_bucket,
)
from connectql.errors import PermanentError, PlanError
from connectql.toolkit import SOURCE, DeadLetter, Retryable, Source
from connectql.toolkit.ddl import spark_ddl

RAW_KEPT = 64 << 10  # bytes of an object that does not decode kept in its dead letter


class ObjectChanged(PermanentError):
    """An object was replaced while a batch that reads it was in flight."""


class S3Source(Source):
    """latest_offset lists the objects and counts the records of new ones (cached by ETag in the
    driver's source process); read opens each object of its partition, checks its ETag and
    reads the partition's records."""

    options = tuple(declared.SOURCE_OPTIONS.values())
    lag_field = "done"  # objects not yet read to the end
    lag_bytes_field = "bytes"  # their bytes

    def __init__(self, opts: dict[str, Any]):
        super().__init__(opts)
        self.s = declared.source_settings(opts)
        self._fs = None
        self._versions: dict[Listed, str] = {}  # listed object -> ETag
        self._totals: dict[tuple[str, str], int] = {}  # (key, ETag) -> records
        self._idle_until = 0.0
        self._inferred_arrow: pa.Schema | None = None

    def __getstate__(self):  # what goes to Spark's workers: no client, no caches
        return {**self.__dict__, "_fs": None, "_versions": {}, "_totals": {}}

    @property
    def fs(self):
        if self._fs is None:
            self._fs = self.s.place.filesystem()
        return self._fs

    def check(self) -> None:
        self._listing()  # an unreachable server or refused keys fail CREATE
        require_bucket(self.fs, self.s.place, "s3 source")

    def schema(self) -> str:
        given = self.options.get("schema")
        return f"{given}, `{SOURCE}` STRING" if given else self._inferred()

    def _inferred(self) -> str:
        return spark_ddl(self._arrow()) + f", `{SOURCE}` STRING"

    def _arrow(self) -> pa.Schema:
        """The records' types: the schema given, or inferred from the first object (once per
        process; Spark's workers infer the same from the same object, and the toolkit casts
        their batches to the stream's schema)."""
        if self.s.arrow is not None:
            return self.s.arrow
        if self._inferred_arrow is None:
            listed = self._listing()
            if not listed:
                raise PlanError(
                    f"s3 source: no object under prefix '{self.s.matcher.prefix}' in"
                    f" {self.s.place.where()} to infer the schema from; give it with"
                    " schema = '...'"
                )
            self._inferred_arrow = declared.infer_arrow(self.fs, self.s, listed[0].key)
        return self._inferred_arrow

    def initial_offset(self) -> dict:
        return offsets.EMPTY

    def latest_offset(self, start: dict) -> dict:
        if time.monotonic() < self._idle_until:
            return start  # nothing was new at the last look: wait poll.interval.ms
        listing = self._listing()
        keys = {obj.key for obj in listing}
        latest = offsets.advance(start, list(self._seen(start, listing)), None, keys)
        if latest == start:
            self._idle_until = time.monotonic() + self.s.poll_ms / 1000
        return latest

    def end_offset(self, start: dict, latest: dict, max_records: int) -> dict:
        found = [
            offsets.Seen(k, e["etag"], e["size"], e["total"])
            for k, e in latest["objects"].items()
            if offsets.unfinished(start, k, e["etag"])
        ]
        return offsets.advance(start, found, max_records, set(latest["objects"]))

    def _listing(self) -> list[Listed]:
        try:
            return list_objects(self.fs, self.s.place, self.s.matcher)
        except OSError as e:
            raise Retryable(f"s3 source: cannot list {self.s.place.where()}: {e}") from None

    def _seen(self, start: dict, listed: list[Listed]) -> Iterator[offsets.Seen]:
        """The listed objects with records left after `start`, counted when first seen."""
        for obj in listed:
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
                self._totals[(obj.key, etag)] = records.count(handle, self.s.format).total
        return self._totals[(obj.key, etag)]

    def partitions(self, start: dict, end: dict) -> list[list[list]]:
        found = offsets.ranges(start, end)
        return [
            [[r.key, r.etag, r.first, r.last] for r in g]
            for g in offsets.split(found, self.s.tasks)
        ]

    def read(self, partition: list[list]) -> Iterator[Any]:
        for key, etag, first, last in partition:
            yield from self._read_range(key, etag, first, last)

    def _read_range(self, key: str, etag: str, first: int, last: int) -> Iterator[Any]:
        place = self.s.place
        handle, meta = records.open_object(self.fs, place.path(key), self.s.format)
        with handle:
            _check_version(place, key, etag, meta)
            for chunk in records.chunks(handle, self.s.format, self._arrow(), first, last):
                yield records.with_source(chunk, place.bucket, key)
                for bad in chunk.bad:
                    yield self._dead_letter(key, bad)

    def _dead_letter(self, key: str, bad: records.Bad) -> DeadLetter:
        """A record that does not parse, or an object's rest that does not decode (then with
        the start of the object's stored bytes, as far as RAW_KEPT goes)."""
        place = self.s.place
        where = {"bucket": place.bucket, "key": key, "record": bad.record}
        if bad.line is not None:
            where["line"] = bad.line
        if bad.rest:
            with self.fs.open_input_stream(place.path(key), compression=None) as stored:
                raw = stored.read(RAW_KEPT)
            return DeadLetter(raw, f"{place.url(key)}: {bad.error}", where, "UNREADABLE_OBJECT")
        return DeadLetter(bad.raw, f"not a valid {self.s.format.name} record: {bad.error}", where)


def _check_version(place, key: str, etag: str, meta: dict) -> None:
    found = etag_of(meta)
    if found != etag:
        raise ObjectChanged(
            f"s3 source: {place.url(key)} was replaced (ETag {found}, expected {etag}) while a"
            " batch reading it was in flight; the batch cannot be read again as it was"
        )
