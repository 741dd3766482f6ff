"""The redis source: Redis Streams read by entry id. An offset holds each stream key's last entry
id read (and how many entries had been added up to it, for the lag); a partition is one key's
entries after one id up to another, which XRANGE gives the same every time (unless trimmed
meanwhile): each entry enters the connectql stream exactly once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from connectql.connectors.redis.options import SOURCE_OPTIONS, Connected, keys_of
from connectql.toolkit import DeadLetter, Retryable, Source, ValidationError
from connectql.toolkit.messages import (
    HEADERS,
    INFER_MESSAGES,
    KEY,
    POSITION,
    TIMESTAMP,
    TOPIC,
    ValueFormat,
    message_rows,
    text_of,
)

FIRST = "0-0"  # before every entry id
PAGE = 10_000  # entries per XRANGE call


class RedisSource(Connected, Source):
    """latest_offset asks XINFO STREAM of each key (its last id, its entries added); read pages
    through XRANGE (after, to] of one key."""

    options = SOURCE_OPTIONS
    lag_field = "n"  # entries added up to the offset, summed over the keys

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.keys = keys_of(options.get("key") or "")
        self.format = ValueFormat.of(options, "redis source")
        self._idle_until = 0.0

    def check(self) -> None:
        if not self.keys:
            raise ValidationError("redis source: key names no stream key")
        for key in self.keys:
            kind = self._call(self.client.type, key).decode()
            if kind not in ("stream", "none"):
                raise ValidationError(f"redis source: key '{key}' holds a {kind}, not a stream")

    def schema(self) -> str:
        sample = [v for v in self._sample() if v] if self.format.row_ddl() is None else []
        found = f"{len(sample)} messages in {', '.join(self.keys)}"
        return self.format.row_ddl_of(sample, "redis source", found)

    def _sample(self) -> list[bytes | None]:
        field = self.options["value.field"].encode()
        found: list[bytes | None] = []
        for key in self.keys:
            entries = self._call(self.client.xrange, key, "-", "+", INFER_MESSAGES - len(found))
            found += [fields.get(field) for _id, fields in entries]
            if len(found) >= INFER_MESSAGES:
                break
        return found

    # ----------------------------------------------------------------- offsets (driver)
    def initial_offset(self) -> dict:
        start = self.options["start"]
        streams = {}
        for key in self.keys:
            last, added, length = self._info(key)
            streams[key] = (
                {"id": last, "n": added}
                if start == "latest"
                else {"id": FIRST, "n": added - length}
            )
        return _offset(streams)

    def latest_offset(self, start: dict) -> dict:
        if time.monotonic() < self._idle_until:
            return start
        streams = dict(start["streams"])
        for key in self.keys:
            last, added, _length = self._info(key)
            if _newer(last, streams.get(key, {}).get("id", FIRST)):
                streams[key] = {"id": last, "n": added}
        latest = _offset(streams)
        if latest == start:
            self._idle_until = time.monotonic() + self.options["poll.interval.ms"] / 1000
        return latest

    def end_offset(self, start: dict, latest: dict, max_records: int) -> dict:
        if latest["n"] - start["n"] <= max_records:
            return latest
        streams, left = dict(start["streams"]), max_records
        for key, newest in latest["streams"].items():
            before = streams.get(key, {"id": FIRST, "n": newest["n"]})
            if left <= 0 or not _newer(newest["id"], before["id"]):
                continue
            if newest["n"] - before["n"] <= left:
                streams[key], left = newest, left - (newest["n"] - before["n"])
                continue
            page = self._call(self.client.xrange, key, "(" + before["id"], newest["id"], left)
            if page:
                streams[key] = {"id": page[-1][0].decode(), "n": before["n"] + len(page)}
                left -= len(page)
        return _offset(streams)

    def partitions(self, start: dict, end: dict) -> list[Any]:
        return [
            {"key": key, "after": start["streams"].get(key, {}).get("id", FIRST), "to": e["id"]}
            for key, e in end["streams"].items()
            if _newer(e["id"], start["streams"].get(key, {}).get("id", FIRST))
        ]

    def _info(self, key: str) -> tuple[str, int, int]:
        """(last entry id, entries ever added, entries now) of a stream; an absent one is
        empty."""
        import redis

        try:
            info = self._call(self.client.xinfo_stream, key)
        except redis.ResponseError:  # no such key (yet)
            return FIRST, 0, 0
        added = info.get("entries-added", info["length"])
        return info["last-generated-id"].decode(), int(added), int(info["length"])

    # ----------------------------------------------------------------- reading (executor)
    def read(self, partition: dict) -> Iterator[Any]:
        key, after, to = partition["key"], partition["after"], partition["to"]
        fmt = self.format.reading(self.stream_schemas.get(None))
        while _newer(to, after):
            page = self._call(self.client.xrange, key, "(" + after, to, PAGE)
            if not page:
                return
            yield from self._rows(key, page, fmt)
            after = page[-1][0].decode()

    def _rows(self, key: str, page: list, fmt: ValueFormat) -> Iterator[Any]:
        value_field = self.options["value.field"].encode()
        key_field = self.options["key.field"].encode()
        ids = [entry_id.decode() for entry_id, _fields in page]
        fields = [f for _id, f in page]
        missing = {i for i, f in enumerate(fields) if value_field not in f}
        for i in sorted(missing):
            yield DeadLetter(
                _raw(fields[i]),
                f"entry {ids[i]} of {key} has no field '{value_field.decode()}' (value.field)",
                {"key": key, "id": ids[i]},
                "MISSING_VALUE",
            )
        kept = [i for i in range(len(page)) if i not in missing]
        entries = [fields[i] for i in kept]
        yield from message_rows(
            fmt,
            [f[value_field] for f in entries],
            where=lambda j: {"key": key, "id": ids[kept[j]]},
            meta=lambda rows: {
                KEY: [text_of(entries[j].get(key_field)) for j in rows],
                HEADERS: [_headers(entries[j], value_field, key_field) for j in rows],
                TOPIC: [key] * len(rows),
                POSITION: [ids[kept[j]] for j in rows],
                TIMESTAMP: [int(ids[kept[j]].partition("-")[0]) * 1000 for j in rows],
            },
            keys=[f.get(key_field) for f in entries],
            positions=[_sortable(ids[i]) for i in kept],
        )

    def _call(self, method, *args):
        """A call to the server; one that cannot reach it is Retryable (the toolkit retries)."""
        import redis

        try:
            return method(*args)
        except (redis.ConnectionError, redis.TimeoutError) as e:
            self._client = None
            raise Retryable(f"redis source: cannot reach {self.endpoint()}: {e}") from None


def _offset(streams: dict[str, dict]) -> dict:
    return {"streams": streams, "n": sum(s["n"] for s in streams.values())}


def _newer(a: str, b: str) -> bool:
    """Whether entry id `a` comes after `b`."""
    return _id(a) > _id(b)


def _id(entry: str) -> tuple[int, int]:
    ms, _, seq = entry.partition("-")
    return int(ms), int(seq or 0)


def _headers(fields: dict, *left_out: bytes) -> list[tuple[str, str]] | None:
    pairs = [(text_of(k), text_of(v)) for k, v in fields.items() if k not in left_out]
    return pairs or None


def _raw(fields: dict) -> str:
    return " ".join(f"{text_of(k)}={text_of(v)}" for k, v in fields.items())


def _sortable(entry_id: str) -> str:
    """An entry id as text that sorts as the ids do (a debezium event's __pos)."""
    ms, _, seq = entry_id.partition("-")
    return f"{int(ms):015d}-{int(seq or 0):010d}"
