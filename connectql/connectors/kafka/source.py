"""The kafka source: topic-partitions read by offset, as Spark's own Kafka source does (assigned,
not a consumer group). An offset holds each topic-partition's next offset to read ("topic:0":
120) and their sum (`records`, for the lag and the read limit); a partition of work is one
topic-partition's records from one offset up to another, which a fetch gives the same every
time (unless retention removed some meanwhile): each record enters the connectql stream exactly
once. Topics matching `topic.pattern`, and partitions added to a topic, are picked up while
running, read from their first offset."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from connectql.config import Option
from connectql.connectors.kafka.client import CONNECTION, TIMEOUT_S, failed, settings, topics, where
from connectql.toolkit import Retryable, Source, ValidationError
from connectql.toolkit.messages import (
    HEADERS,
    INFER_MESSAGES,
    KEY,
    PARTITION,
    POSITION,
    TIMESTAMP,
    TOPIC,
    ValueFormat,
    format_options,
    message_rows,
    text_of,
)

FETCH = 10_000  # records per consume call
STALL_S = 30.0  # a partition that gives nothing this long short of its end: Retryable
PROBE_S = 2.0  # the longest wait for the record before a high watermark (see _end)

SOURCE_OPTIONS = (
    *CONNECTION,
    Option("topic", doc="the topic to read, or a comma list of topics (or topic.pattern)"),
    Option(
        "topic.pattern",
        doc="a regular expression: every topic whose whole name matches, those created later"
        " too (instead of topic)",
    ),
    Option(
        "starting.offsets",
        default="earliest",
        doc="where a new connector starts: 'earliest', 'latest', or a time (epoch milliseconds"
        " or ISO 8601, e.g. '2026-12-01T00:00:00Z': each partition's first record at or after"
        " it); partitions found later start at their earliest",
    ),
    *format_options("source"),
    Option(
        "key",
        doc="the stream's key: columns that identify a row, a comma list (default: with format"
        " = 'debezium', the fields of the records' keys; else none)",
    ),
    Option(
        "commit.offsets",
        "bool",
        False,
        doc="also commit each batch's positions to the consumer group group.id once the batch"
        " is in the stream, for Kafka's own lag tools (the checkpoint stays where the source"
        " resumes from)",
    ),
    Option(
        "group.id",
        doc="the consumer group commit.offsets commits to (default: connectql-<connector>)",
    ),
    Option(
        "poll.interval.ms",
        "int",
        200,
        doc="when a look found no new record, wait this long before looking again",
    ),
)


class KafkaSource(Source):
    """latest_offset asks each partition's high watermark; read assigns one partition at its
    start offset and consumes up to its end."""

    options = SOURCE_OPTIONS
    lag_field = "records"  # the sum of the partitions' offsets: a difference counts records

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.format = ValueFormat.of(options, "kafka source")
        self._idle_until = 0.0
        self._ends: dict[tuple[str, int, int], int] = {}  # (topic, partition, hw) -> end
        self._consumer = None
        self._sampled: tuple[list, list] | None = None

    def endpoint(self) -> str:
        return where(self.options)

    def check(self) -> None:
        named, pattern = self.options.get("topic"), self.options.get("topic.pattern")
        if bool(named) == bool(pattern):
            raise ValidationError("kafka source: give one of topic and topic.pattern")
        if pattern:
            try:
                re.compile(pattern)
            except re.error as e:
                raise ValidationError(f"kafka source: topic.pattern is no regex: {e}") from None
        _start_time(self.options["starting.offsets"])
        held = topics(self.options, "kafka source")
        missing = [t for t in _names(named) if t not in held] if named else []
        if missing:
            raise ValidationError(
                f"kafka source: no topic {', '.join(repr(t) for t in missing)} on"
                f" {where(self.options)} (topics there: {', '.join(sorted(held)) or 'none'})"
            )

    def schema(self) -> str:
        values, keys = self._sample() if self.format.row_ddl() is None else ([], [])
        found = f"{len(values)} records of {self._named()}"
        return self.format.row_ddl_of(values, "kafka source", found, keys)

    def key(self) -> tuple[str, ...]:
        given = self.options.get("key")
        return self.format.key_of([] if given else self._sample()[1], given)

    def _named(self) -> str:
        return self.options.get("topic") or f"topics matching {self.options['topic.pattern']!r}"

    def _sample(self) -> tuple[list[bytes | None], list[bytes | None]]:
        """The values and keys of the first records (up to INFER_MESSAGES), asked once."""
        if self._sampled is None:
            start, found = self.initial_offset(), []
            for part in self.partitions(start, self.latest_offset(start)):
                found += self._records(part, INFER_MESSAGES - len(found))
                if len(found) >= INFER_MESSAGES:
                    break
            self._sampled = [m.value() for m in found], [m.key() for m in found]
        return self._sampled

    # ----------------------------------------------------------------- offsets (driver)
    def initial_offset(self) -> dict:
        begin = self.options["starting.offsets"]
        at = {}
        for (topic, part), (low, high) in self._watermarks(probe=begin != "earliest").items():
            at[f"{topic}:{part}"] = low if begin == "earliest" else high
        if begin not in ("earliest", "latest"):
            at.update(self._at_time(_start_time(begin), at))
        return _offset(at)

    def latest_offset(self, start: dict) -> dict:
        if time.monotonic() < self._idle_until:
            return start
        at = dict(start["at"])
        for (topic, part), (low, high) in self._watermarks().items():
            key = f"{topic}:{part}"
            at[key] = max(at.get(key, low), high)
        latest = _offset(at)
        if latest == start:
            self._idle_until = time.monotonic() + self.options["poll.interval.ms"] / 1000
        return latest

    def end_offset(self, start: dict, latest: dict, max_records: int) -> dict:
        want = {k: v - start["at"].get(k, v) for k, v in latest["at"].items()}
        if sum(want.values()) <= max_records:
            return latest
        take = dict.fromkeys(want, 0)
        left, open_ = max_records, [k for k, n in want.items() if n > 0]
        while left > 0 and open_:
            share = max(1, left // len(open_))
            for k in list(open_):
                n = min(share, want[k] - take[k], left)
                take[k] += n
                left -= n
                if take[k] == want[k]:
                    open_.remove(k)
                if left == 0:
                    break
        return _offset({k: start["at"].get(k, v) + take[k] for k, v in latest["at"].items()})

    def partitions(self, start: dict, end: dict) -> list[Any]:
        work = []
        for key, to in sorted(end["at"].items()):
            first = start["at"].get(key, self._low(key))
            if to > first:
                topic, part = key.rsplit(":", 1)
                work.append({"topic": topic, "partition": int(part), "from": first, "to": to})
        return work

    def _low(self, key: str) -> int:
        topic, part = key.rsplit(":", 1)
        return self._watermarks([topic], probe=False).get((topic, int(part)), (0, 0))[0]

    def _watermarks(
        self, only: list[str] | None = None, probe: bool = True
    ) -> dict[tuple[str, int], tuple[int, int]]:
        """(low, end) of each partition of the topics read (the end: one past the last record;
        without `probe`, the high watermark as the broker gives it)."""
        from confluent_kafka import KafkaException, TopicPartition

        consumer = self._driver_consumer()
        marks = {}
        try:
            for topic, count in self._topics(only).items():
                for part in range(count):
                    low, high = consumer.get_watermark_offsets(
                        TopicPartition(topic, part), timeout=TIMEOUT_S
                    )
                    end = self._end(topic, part, low, high) if probe else high
                    marks[(topic, part)] = (low, end)
        except KafkaException as e:
            raise failed("kafka source", self.options, e) from None
        return marks

    def _topics(self, only: list[str] | None) -> dict[str, int]:
        held = topics(self.options, "kafka source", self._driver_consumer())
        if only is not None:
            return {t: n for t, n in held.items() if t in only}
        if self.options.get("topic"):
            return {t: held[t] for t in _names(self.options["topic"]) if t in held}
        pattern = re.compile(self.options["topic.pattern"])
        return {t: n for t, n in sorted(held.items()) if pattern.fullmatch(t)}

    def _end(self, topic: str, part: int, low: int, high: int) -> int:
        """One past the partition's last record. The high watermark, except on a broker that
        reports the first offset of the last record batch plus one (Tansu 0.6): the records
        fetched from the one before it show where that batch really ends."""
        from confluent_kafka import TopicPartition

        if high <= low:
            return high
        if (topic, part, high) not in self._ends:
            consumer = self._driver_consumer()
            consumer.assign([TopicPartition(topic, part, high - 1)])
            end, deadline = high, time.monotonic() + PROBE_S
            while time.monotonic() < deadline:
                got = [m for m in consumer.consume(FETCH, timeout=0.05) if not m.error()]
                if got:
                    end = max(end, got[-1].offset() + 1)
                    deadline = time.monotonic() + 0.2  # more of the batch may follow
            consumer.unassign()
            self._ends[(topic, part, high)] = end
        return self._ends[(topic, part, high)]

    def _at_time(self, ms: int, at: dict) -> dict:
        """Each partition's first offset at or after epoch millisecond `ms` (its end if none)."""
        from confluent_kafka import TopicPartition

        asked = [TopicPartition(*_split(k), ms) for k in at]
        found = self._driver_consumer().offsets_for_times(asked, timeout=TIMEOUT_S)
        return {f"{tp.topic}:{tp.partition}": tp.offset for tp in found if tp.offset >= 0}

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_consumer": None, "_ends": {}, "_sampled": None}  # driver's

    def _driver_consumer(self):
        if self._consumer is None:
            self._consumer = _consumer(self.options, self.connector)
        return self._consumer

    def commit(self, end: dict) -> None:
        if not self.options["commit.offsets"]:
            return
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        group = self.options.get("group.id") or f"connectql-{self.connector}"
        consumer = Consumer(settings(self.options, **{"group.id": group}))
        try:
            offsets = [TopicPartition(*_split(k), v) for k, v in end["at"].items()]
            consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as e:
            raise failed("kafka source", self.options, e) from None
        finally:
            consumer.close()

    def on_drop(self, connector: str) -> str | None:
        if not self.options["commit.offsets"]:
            return None
        from connectql.connectors.kafka.client import admin

        group = self.options.get("group.id") or f"connectql-{connector}"
        client = admin(self.options)
        client.delete_consumer_groups([group], request_timeout=TIMEOUT_S)[group].result()
        return f"deleted the consumer group {group}"

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None

    # ----------------------------------------------------------------- reading (executor)
    def read(self, partition: dict) -> Iterator[Any]:
        fmt = self.format.reading(self.stream_schemas.get(None))
        for page in self._pages(partition, partition["to"] - partition["from"]):
            yield from self._rows(page, fmt)

    def _records(self, partition: dict, most: int) -> list:
        return [m for page in self._pages(partition, most) for m in page]

    def _pages(self, partition: dict, most: int) -> Iterator[list]:
        """The partition's records from its start, short of its end, at most `most`, a consume
        call's worth at a time."""
        from confluent_kafka import TopicPartition

        topic, part, to = partition["topic"], partition["partition"], partition["to"]
        consumer = _consumer(self.options, self.connector)
        try:
            consumer.assign([TopicPartition(topic, part, partition["from"])])
            given, last = 0, time.monotonic()
            while given < most:
                got = consumer.consume(min(FETCH, most - given), timeout=1.0)
                page = self._good(got, to)
                if page:
                    given += len(page)
                    last = time.monotonic()
                    yield page
                if len(page) < len(got) or (page and page[-1].offset() >= to - 1):
                    return  # past the end
                position = consumer.position([TopicPartition(topic, part)])[0].offset
                if position >= to:
                    return
                if time.monotonic() - last > STALL_S:
                    raise Retryable(
                        f"kafka source: {topic} partition {part} gave no record for"
                        f" {STALL_S:.0f} s short of offset {to} (at {position})"
                    )
        finally:
            consumer.close()

    def _good(self, got: list, to: int) -> list:
        """The records before offset `to` (an error raised, a partition's end passed over)."""
        from confluent_kafka import KafkaError, KafkaException

        if any(m.error() for m in got):
            errors = [m.error() for m in got if m.error()]
            real = [e for e in errors if e.code() != KafkaError._PARTITION_EOF]
            if real:
                raise failed("kafka source", self.options, KafkaException(real[0]))
            got = [m for m in got if not m.error()]
        if got and got[-1].offset() >= to:
            return [m for m in got if m.offset() < to]
        return got

    def _rows(self, page: list, fmt: ValueFormat) -> Iterator[Any]:
        keys, values, offsets = [], [], []
        for m in page:
            keys.append(m.key())
            values.append(m.value())
            offsets.append(m.offset())
        topic, part = page[0].topic(), page[0].partition()
        yield from message_rows(
            fmt,
            values,
            where=lambda i: {"topic": topic, "partition": part, "offset": offsets[i]},
            meta=lambda kept: {
                KEY: [text_of(keys[i]) for i in kept],
                HEADERS: [_headers(page[i].headers()) for i in kept],
                TOPIC: [topic] * len(kept),
                PARTITION: [part] * len(kept),
                POSITION: [str(offsets[i]) for i in kept],
                TIMESTAMP: [_micros(page[i].timestamp()) for i in kept],
            },
            keys=keys,
            positions=[f"{o:020d}" for o in offsets],  # a key's changes: one partition
        )


def _consumer(options: dict[str, Any], connector: str):
    from confluent_kafka import Consumer

    return Consumer(
        settings(
            options,
            **{
                "group.id": f"connectql-{connector or 'reader'}",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
                "enable.partition.eof": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            },
        )
    )


def _offset(at: dict[str, int]) -> dict:
    return {"records": sum(at.values()), "at": dict(sorted(at.items()))}


def _split(key: str) -> tuple[str, int]:
    topic, part = key.rsplit(":", 1)
    return topic, int(part)


def _names(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def _start_time(text: str) -> int | None:
    """starting.offsets as epoch milliseconds (None: earliest or latest)."""
    if text in ("earliest", "latest"):
        return None
    if text.isdigit():
        return int(text)
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        raise ValidationError(
            f"kafka source: starting.offsets must be 'earliest', 'latest', epoch milliseconds or"
            f" an ISO 8601 time, got {text!r}"
        ) from None


def _headers(given) -> list | None:
    return sorted(dict((k, text_of(v)) for k, v in given).items()) if given else None


def _micros(stamp: tuple[int, int]) -> int | None:
    kind, ms = stamp
    return ms * 1000 if kind and ms >= 0 else None
