"""Spool: how a source of a broker that cannot replay (MQTT, a classic RabbitMQ queue) makes its
reads deterministic. The driver appends what it received to a spool under the query's
checkpoint, durably (written, fsynced, renamed into place), and only then acknowledges it to the
broker; its offsets are spool positions, so `read` of a partition gives the same records every
time, and a killed worker loses nothing the broker was told it has.

    spool = Spool(Path(self.checkpoint) / "spool")
    end = spool.append([payload, ...])     # driver, in latest_offset: then acknowledge them
    for record in spool.read(start, end):  # executor, in read: the records in (start, end]
        ...
    spool.drop_through(end)                # driver, in commit: they are in the stream

A source mixes in SpooledSource for the offsets, partitions and reads of a spool, and runs a
Spooler in the driver: the broker's client hands it each message (`put`), and its thread appends
them a group at a time and only then acknowledges them (where the broker waits for that).

Records are bytes. A segment is one append: `<first position, 20 digits>.seg`, each record a
4-byte big-endian length and its bytes. Positions count records from 0 (the spool's end is the
number of records ever appended); a segment is deleted once every record in it is committed."""

from __future__ import annotations

import os
import pickle
import queue
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

_LENGTH = struct.Struct(">I")
SUFFIX = ".seg"
DROPPED = "dropped"  # the end of the last segment deleted


class Spool:
    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def _segments(self) -> list[tuple[int, Path]]:
        """(first position, path) of each segment, in order."""
        if not self.folder.is_dir():
            return []
        found = [(int(p.stem), p) for p in self.folder.glob(f"*{SUFFIX}") if p.stem.isdigit()]
        return sorted(found)

    def end(self) -> int:
        """The position after the last record appended (0: none ever)."""
        segments = self._segments()
        if not segments:
            return _read_int(self.folder / DROPPED)
        first, path = segments[-1]
        return first + _count(path.read_bytes())

    def append(self, records: Sequence[bytes]) -> int:
        """Append `records` durably (on disk when this returns); the new end."""
        start = self.end()
        if not records:
            return start
        self.folder.mkdir(parents=True, exist_ok=True)
        body = b"".join(_LENGTH.pack(len(r)) + r for r in records)
        _write_durably(self.folder / f"{start:020d}{SUFFIX}", body)
        return start + len(records)

    def read(self, start: int, end: int) -> Iterator[bytes]:
        """The records at positions start .. end - 1 (those after offset `start` up to `end`)."""
        for first, path in self._segments():
            data = path.read_bytes()
            last = first + _count(data)
            if last <= start or first >= end:
                continue
            at, position = 0, first
            while at < len(data) and position < end:
                (n,) = _LENGTH.unpack_from(data, at)
                if position >= start:
                    yield data[at + 4 : at + 4 + n]
                at, position = at + 4 + n, position + 1

    def drop_through(self, position: int) -> None:
        """Delete the segments whose records all come before `position` (committed)."""
        for first, path in self._segments():
            last = first + _count(path.read_bytes())
            if last > position:
                return
            _write_durably(self.folder / DROPPED, str(last).encode())  # the end, if none is left
            path.unlink(missing_ok=True)


def _count(data: bytes) -> int:
    at = count = 0
    while at < len(data):
        (n,) = _LENGTH.unpack_from(data, at)
        at, count = at + 4 + n, count + 1
    return count


def _read_int(path: Path) -> int:
    try:
        return int(path.read_text())
    except (FileNotFoundError, ValueError):
        return 0


def _write_durably(path: Path, data: bytes) -> None:
    """`data` in `path` whole or not at all, on disk when this returns."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ------------------------------------------------------------------ a source that spools
class SpooledSource:
    """What a Source of a broker that cannot replay shares (mix it in before Source): offsets
    are positions of a spool under the checkpoint (`spool_folder`); the subclass receives
    messages in a thread of the driver that calls `spool_messages` with them and only then
    acknowledges them to the broker; `read` gives a partition's spooled messages as rows of its
    `format` (a toolkit.messages.ValueFormat) with the message columns, and DeadLetters for
    values that do not parse. A new checkpoint has a new spool: the first offset is 0."""

    lag_field = "n"  # messages spooled and not yet read
    spool_folder = "spool"

    @property
    def spool(self) -> Spool:
        return Spool(Path(self.checkpoint) / self.spool_folder)

    def initial_offset(self) -> dict:
        return {"n": 0}

    def spooled_offset(self, start: dict) -> dict:
        """What latest_offset returns once the subclass's receiving thread runs."""
        return {"n": max(self.spool.end(), start["n"])}

    def end_offset(self, start: dict, latest: dict, max_records: int) -> dict:
        return {"n": min(latest["n"], start["n"] + max_records)}

    def partitions(self, start: dict, end: dict) -> list:
        tasks = max(1, int(self.options.get("tasks.max") or 1))
        step = max(1, -(-(end["n"] - start["n"]) // tasks))
        return [
            {"start": a, "end": min(a + step, end["n"])} for a in range(start["n"], end["n"], step)
        ]

    def commit(self, end: dict) -> None:
        self.spool.drop_through(end["n"])

    def spool_messages(self, messages: Sequence[Spooled]) -> int:
        """Append received messages durably; the spool's new end."""
        return self.spool.append([pickle.dumps(tuple(m), protocol=5) for m in messages])

    def read(self, partition: dict) -> Iterator:
        from connectql.toolkit.messages import (
            HEADERS,
            KEY,
            POSITION,
            TIMESTAMP,
            TOPIC,
            message_bytes,
            message_rows,
        )  # fmt: skip

        first = partition["start"]
        got = [Spooled(*pickle.loads(r)) for r in self.spool.read(first, partition["end"])]
        yield from message_rows(
            self.format,
            [m.value for m in got],
            where=lambda i: {"topic": got[i].topic, "n": first + i},
            meta=lambda kept: {
                TOPIC: [got[i].topic for i in kept],
                KEY: [got[i].key for i in kept],
                HEADERS: [sorted(got[i].headers.items()) if got[i].headers else None for i in kept],
                POSITION: [str(first + i) for i in kept],
                TIMESTAMP: [got[i].timestamp_us for i in kept],
            },
            keys=[message_bytes(m.key) for m in got],
            positions=[f"{first + i:020d}" for i in range(len(got))],
        )


class Spooled(NamedTuple):
    """A received message as the spool keeps it (key and header values: message-column text)."""

    topic: str
    value: bytes
    key: str | None = None
    headers: dict[str, str] | None = None
    timestamp_us: int | None = None


# ------------------------------------------------------------------ the receiving thread
GROUP = 10_000  # messages spooled (and acknowledged) together at most
QUIET_S = 0.5  # after the start, no message for this long: what the broker kept is spooled
POLL_S = 0.2


class Spooler:
    """The driver's thread that fills a SpooledSource's spool from a broker's client:

        spooler = Spooler(source, lambda m, now: Spooled(m.topic, m.payload, timestamp_us=now),
                          acknowledge=lambda group: ...)  # None: the broker waits for none
        client.on_message = spooler.put   # any thread
        spooler.start()                   # in the first latest_offset
        spooler.settled.wait(30)          # what the broker kept for the source is spooled
        spooler.check()                   # each latest_offset: raise what failed
        spooler.stop()                    # close: what was received is spooled, then it ends

    Messages are appended a group at a time (at most GROUP; `spooled(message, now_us)` makes
    each a Spooled), durably, and only then passed to `acknowledge`, so a broker that resends
    what was not acknowledged loses nothing across kill -9. `settled` is set once nothing has
    arrived for QUIET_S seconds after the start. An error of the thread, or one the client
    reports with `fail` (a lost connection), is raised by `check` from then on: the query fails
    and its restart makes a new source."""

    def __init__(
        self,
        source: SpooledSource,
        spooled: Callable[[Any, int], Spooled],
        acknowledge: Callable[[list], None] | None = None,
        name: str = "spool",
    ):
        self.source, self.spooled, self.acknowledge = source, spooled, acknowledge
        self.settled, self._stop = threading.Event(), threading.Event()
        self._received: queue.SimpleQueue = queue.SimpleQueue()
        self._failed: list[Exception] = []
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)

    def put(self, message: Any) -> None:
        """A message received (any thread)."""
        self._received.put(message)

    def fail(self, error: Exception) -> None:
        """The client cannot go on (e.g. its connection is lost): `check` raises `error`."""
        if not self._stop.is_set():
            self._failed.append(error)

    def start(self) -> None:
        self._thread.start()

    def check(self) -> None:
        if self._failed:
            raise self._failed[0]

    def stop(self, timeout: float = 10.0) -> None:
        """Spool (and acknowledge) what was received, then end the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _loop(self) -> None:
        began = time.monotonic()
        try:
            while not self._stop.is_set():
                taken = self._take(POLL_S, GROUP)
                if taken:
                    self._append(taken)
                elif time.monotonic() - began > QUIET_S:
                    self.settled.set()
            left = self._received.qsize()  # what was put before the stop, not what comes after
            while left > 0 and (taken := self._take(None, min(left, GROUP))):
                self._append(taken)
                left -= len(taken)
        except Exception as e:  # noqa: BLE001 (raised by the next check)
            self._failed.append(e)

    def _take(self, wait_s: float | None, most: int) -> list:
        """Up to `most` messages, waiting up to `wait_s` for the first (None: not at all)."""
        try:
            taken = [self._received.get(wait_s is not None, wait_s)]
        except queue.Empty:
            return []
        while len(taken) < most:
            try:
                taken.append(self._received.get_nowait())
            except queue.Empty:
                break
        return taken

    def _append(self, taken: list) -> None:
        now = time.time_ns() // 1000
        self.source.spool_messages([self.spooled(m, now) for m in taken])
        if self.acknowledge is not None:
            self.acknowledge(taken)  # only once they are on disk
