"""The worker's retention task: every few seconds, each stream's expired files leave its log
and the disk (as its retention options say), and the stream's size and its sinks' progress
are measured into the `streams` table."""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq

from connectql.catalog.store import StreamEntry
from connectql.catalog.streams import (
    committed_entries,
    prune_log,
    remove_files,
    sweep_orphans,
)
from connectql.connectors.options import duration_ms
from connectql.runtime.merge import last_changes, merge
from connectql.runtime.retention import (
    CHECK_INTERVAL_DEFAULT,
    CHECK_INTERVAL_KEY,
    DEFAULT_KEYS,
    STREAM_OPTIONS,
    Decision,
    Limits,
    Reader,
    compact_group,
    decide,
    entry_times,
    files_unread,
    last_commit,
    local_path,
    merge_groups,
    merge_time,
    reader_of,
)

log = logging.getLogger("connectql.retention")

# a sink counts as holding retention back (an event, the streams table) once it has held it
# this long, or as long as the retention itself when that is shorter
HOLD_GRACE_S = 30.0


def effective_options(stream: StreamEntry, settings: dict[str, str]) -> dict[str, str | None]:
    """The stream's retention options, the worker's defaults (SET stream.retention...) where the
    stream sets none."""
    own = stream.retention_options
    return {k: own.get(k) or settings.get(DEFAULT_KEYS[k]) for k in STREAM_OPTIONS}


def _time(ms: int | None) -> datetime | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, timezone.utc).replace(tzinfo=None)


class Retainer:
    """A thread of the worker; `worker` provides catalog and checkpoint_of(name)."""

    def __init__(self, worker):
        self.worker = worker
        self._rows: dict[str, int] = {}  # file path -> records (files never change)
        # (stream, sink) -> since when it holds retention back; those reported in an event
        self._held_since: dict[tuple[str, str], float] = {}
        self._reported: set[tuple[str, str]] = set()
        self._closed = threading.Event()
        self._pass = threading.Lock()  # one pass at a time: two would merge the same files
        # the catalog's connectors and their writers, read once per pass (not per stream:
        # a source of 1,000 tables has 1,000 streams)
        self._entries: list | None = None
        self._writer_commits: dict[str, int | None] | None = None
        self._due: set[str] = set()  # sinks whose lag to measure before the next pass
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="connectql-retention", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        self._wake.set()
        self._thread.join(timeout=60)

    def read_more(self, sink: str) -> None:
        """Sink `sink` read a batch: its lag is measured again soon, not at the next pass (a
        sink that caught up showed the lag of the last pass for as long as the interval)."""
        self._due.add(sink)
        self._wake.set()

    def _interval_s(self) -> float:
        text = self.worker.catalog.settings().get(CHECK_INTERVAL_KEY, CHECK_INTERVAL_DEFAULT)
        try:
            return max(0.1, duration_ms(text) / 1000)
        except ValueError:
            return duration_ms(CHECK_INTERVAL_DEFAULT) / 1000

    def _run(self) -> None:
        next_pass = time.monotonic() + self._interval_s()
        while not self._closed.is_set():
            self._wake.wait(max(0.0, next_pass - time.monotonic()))
            if self._closed.is_set():
                return
            if self._wake.is_set():
                self._wake.clear()
                self._measure_due()
            if time.monotonic() < next_pass:
                continue
            try:
                self.run_once()
            except Exception:  # a catalog hiccup must not end retention for the worker's life
                log.warning("a retention pass failed", exc_info=True)
            next_pass = time.monotonic() + self._interval_s()

    def _measure_due(self) -> None:
        while self._due and not self._closed.is_set():
            sink = self._due.pop()
            try:
                self.measure_lag(sink)
            except Exception:  # a stream dropped meanwhile: the next pass measures
                log.warning("measuring the lag of %s failed", sink, exc_info=True)

    def run_once(self) -> None:
        """One pass over every stream; a stream that fails is logged and the others go on."""
        with self._pass:
            self._entries, self._writer_commits = self.worker.catalog.connectors(), None
            try:
                self._pass_once()
            finally:
                self._entries = self._writer_commits = None

    def _connectors(self) -> list:
        return self._entries if self._entries is not None else self.worker.catalog.connectors()

    def _pass_once(self) -> None:
        cat = self.worker.catalog
        settings = cat.settings()
        behind: dict[str, int] = {}  # sink -> records of its streams it has not read
        measured: dict[str, dict] = {}
        for stream in cat.streams():
            if self._closed.is_set():
                break
            try:
                measured[stream.name] = self._retain(stream, effective_options(stream, settings))
            except Exception:  # e.g. dropped meanwhile; the next pass tries again
                log.warning("retention of stream %s failed", stream.name, exc_info=True)
                continue
            for sink, r in measured[stream.name]["readers"].items():
                behind[sink] = behind.get(sink, 0) + r["records_behind"]
        cat.set_streams_stats(measured)
        if self._closed.is_set():
            return
        for sink, records in behind.items():
            cat.set_measured_lag(sink, records)
        self._file_sources_lag()

    def _file_sources_lag(self) -> None:
        """A `file` source's lag: the files of its directory it has not read yet."""
        cat = self.worker.catalog
        for e in cat.connectors():
            path = Path(str(e.options.get("path", "")))
            if e.kind != "source" or e.type != "file" or not path.is_dir():
                continue  # a path given by ${env:..} or not made yet: no count
            try:
                unread = files_unread(path, self.worker.checkpoint_of(e.name))
            except OSError:  # files coming and going while listed: the next pass counts
                continue
            cat.set_measured_lag(e.name, unread)

    def _retain(self, stream: StreamEntry, options: dict) -> dict:
        """Remove what the stream's retention expires; the stream's size and its sinks'
        progress (readers: records_behind) after it."""
        entries = committed_entries(stream.path)
        read_by = self._readers(stream)
        limits = Limits.of(options)
        d = decide(entries, limits, read_by) if limits.age_ms or limits.bytes else Decision()
        if d.remove and self._entries is not None:
            read_by = self._fresh_readers(stream)
            d = decide(entries, limits, read_by)
        if d.remove:
            self._remove(stream, d)
        self._report_held(stream.name, d, limits)
        gone = {e["path"] for e in d.remove}
        kept = self._merge(stream, [e for e in entries if e["path"] not in gone], read_by, limits)
        if not self._read_by_log(stream):
            prune_log(stream.path)
        sweep_orphans(stream.path)
        return self._stats(stream.name, kept, read_by)

    def measure(self, stream: StreamEntry) -> dict:
        """The stream's size and its sinks' progress now (what the `streams` table shows as of
        the last pass), without removing anything."""
        entries = committed_entries(stream.path)
        return self._stats(stream.name, entries, self._readers(stream))

    def measure_lag(self, sink: str) -> None:
        """A sink's lag now (records of its streams it has not read), not at the next pass: a
        run-once sink that has finished would otherwise show what it lagged mid-run."""
        cat = self.worker.catalog
        entry = cat.get_connector(sink) if cat.has_connector(sink) else None
        if entry is None or entry.kind != "sink":
            return
        with self._pass:  # after a pass under way, which may have measured it mid-run
            reader = {sink: reader_of(self.worker.checkpoint_of(sink))}
            found = map(cat.find_stream, entry.streams)
            streams = [s for s in found if s is not None]
            behind = sum(
                self._stats(s.name, committed_entries(s.path), reader)["readers"][sink][
                    "records_behind"
                ]
                for s in streams
            )
            cat.set_measured_lag(sink, behind)

    def _read_by_log(self, stream: StreamEntry) -> bool:
        """Whether a sink of several streams reads the stream: it finds what is new by the
        stream's log batches (connectors/streamsread.py), so the log keeps them all."""
        return any(
            e.kind == "sink" and e.tables and stream.name in e.streams for e in self._connectors()
        )

    def _readers(self, stream: StreamEntry) -> dict[str, Reader]:
        """The progress of each sink reading the stream."""
        return {
            e.name: reader_of(self.worker.checkpoint_of(e.name))
            for e in self._connectors()
            if e.kind == "sink" and stream.name in e.streams
        }

    def _fresh_readers(self, stream: StreamEntry) -> dict[str, Reader]:
        """_readers on a fresh read of the catalog's connectors: what a pass removes or merges
        is decided again on it, since a sink or a writer created during the pass must hold its
        files back."""
        self._entries, self._writer_commits = self.worker.catalog.connectors(), None
        return self._readers(stream)

    def _writers(self) -> dict[str, int | None]:
        """Each connector's writer id (its stream files' prefix) -> its last committed batch,
        read once per pass (an older commit only keeps more files from merging)."""
        if self._writer_commits is not None:
            return self._writer_commits
        writers = {}
        for e in self._connectors():
            checkpoint = Path(self.worker.checkpoint_of(e.name))
            wid = checkpoint / "connectql-writer-id"
            if wid.exists():
                writers[wid.read_text().strip()] = last_commit(checkpoint)
        if self._entries is not None:
            self._writer_commits = writers
        return writers

    def _merge(self, stream: StreamEntry, entries: list[dict], readers, limits) -> list[dict]:
        """Merge the small files every reader has passed (under cleanup = 'compact', rewrite
        them keeping the last change per key); returns the log's entries after."""
        groups, keep = self._groups(stream, entries, readers, limits)
        if groups and self._entries is not None:
            readers = self._fresh_readers(stream)
            groups, keep = self._groups(stream, entries, readers, limits)
        for group in groups:
            if self._closed.is_set():
                break
            log_time = merge_time(group, readers)
            if log_time is None:
                continue
            entry = merge(stream.path, group, log_time, keep)
            paths = {e["path"] for e in group}
            entries = [e for e in entries if e["path"] not in paths] + [entry]
            log.info("merged %d files of stream %s into one", len(group), stream.name)
        return entries

    def _groups(self, stream: StreamEntry, entries: list[dict], readers, limits):
        """(groups of files to merge, the compaction's filter or None)."""
        writers = self._writers()
        if limits.compact and stream.key_columns:
            keep = last_changes(stream.key_columns, time.time() * 1000 - limits.tombstone_ms)
            return [g for g in [compact_group(entries, readers, writers)] if g], keep
        return merge_groups(entries, readers, writers, limits.merge_bytes), None

    def _remove(self, stream: StreamEntry, d: Decision) -> None:
        cat = self.worker.catalog
        remove_files(stream.path, {e["path"] for e in d.remove})
        for sink, files in d.lost.items():  # counted before the files go
            rows = sum(self._records(e) for e in files)
            cat.add_rows_lost(sink, rows)
            cat.log_event(
                sink,
                cat.state_of(sink),
                f"lost {rows} records ({len(files)} files) of stream {stream.name}:"
                " retention removed them before this sink read them (retention.policy = 'drop')",
            )
        for e in d.remove:
            path = local_path(e["path"])
            Path(path).unlink(missing_ok=True)
            self._rows.pop(path, None)
        log.info("retention removed %d files from stream %s", len(d.remove), stream.name)

    def _report_held(self, stream: str, d: Decision, limits: Limits) -> None:
        """An event when a sink has held a stream's retention back for a while (a sink that
        is only a batch behind does not count), and when it stops."""
        cat, now = self.worker.catalog, time.monotonic()
        grace = min(HOLD_GRACE_S, (limits.age_ms or HOLD_GRACE_S * 1000) / 1000)
        for sink in list(self._held_since):
            if sink[0] == stream and sink[1] not in d.held:
                del self._held_since[sink]
                if sink in self._reported and cat.has_connector(sink[1]):
                    cat.log_event(
                        sink[1],
                        cat.state_of(sink[1]),
                        f"no longer holds back retention of stream {stream}",
                    )
                self._reported.discard(sink)
        for name, files in d.held.items():
            since = self._held_since.setdefault((stream, name), now)
            if (stream, name) in self._reported or now - since < grace:
                continue
            self._reported.add((stream, name))
            cat.log_event(
                name,
                cat.state_of(name),
                f"holds back retention of stream {stream}: {sum(map(self._records, files))}"
                f" records ({len(files)} files) past retention are not read yet"
                f" (retention.policy = '{limits.policy}')",
            )

    def holds(self, stream: str, sink: str) -> bool:
        """Whether `sink` holds `stream`'s retention back (reported as such)."""
        return (stream, sink) in self._reported

    def _records(self, entry: dict) -> int:
        path = local_path(entry["path"])
        if path not in self._rows:
            try:
                self._rows[path] = pq.ParquetFile(path).metadata.num_rows
            except OSError:  # gone from disk: nothing to count
                return 0
        return self._rows[path]

    def _stats(self, stream: str, entries: list[dict], read_by: dict[str, Reader]) -> dict:
        times = [t for e in entries for t in entry_times(e)]
        readers = {}
        for sink, reader in read_by.items():
            unread = [e for e in entries if not reader.passed(e)]
            readers[sink] = {
                "records_behind": sum(self._records(e) for e in unread),
                "files_behind": len(unread),
                "holds_retention": (stream, sink) in self._reported,
            }
        return {
            "records": sum(self._records(e) for e in entries),
            "files": len(entries),
            "bytes": sum(e["size"] for e in entries),
            "oldest_record": _time(min(times, default=None)),
            "newest_record": _time(max(times, default=None)),
            "readers": readers,
        }
