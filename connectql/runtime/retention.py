"""Stream retention: the stream options, what a sink has read (from its Spark checkpoint), and
which of a stream's committed files retention removes.

A record's time is when it was committed into the stream (its file's entry in the stream's
`_spark_metadata` log), like Kafka's log-append time: every record of a file is as old as the
file. Retention removes whole files only."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from connectql.catalog.streams import local_path, log_files
from connectql.config import Option, duration_ms
from connectql.errors import ValidationError
from connectql.runtime import ridelog

STREAM_OPTIONS = {
    o.name: o
    for o in (
        Option(
            "retention",
            "duration",
            doc="remove files whose records were all committed longer ago than this,"
            " e.g. '7 days'; absent: keep them",
        ),
        Option(
            "retention.bytes",
            "string",
            doc="remove the oldest files while the stream holds more than this, e.g. '10 GB';"
            " absent: no limit",
        ),
        Option(
            "retention.policy",
            "enum",
            "wait",
            doc="'wait': never remove a file a sink reading the stream has not committed;"
            " 'drop': remove it anyway (the sink loses those records and says so)",
            choices=("wait", "drop"),
        ),
        Option(
            "merge.target.bytes",
            "string",
            "128 MB",
            doc="merge files every reader has passed into files of about this size, so that"
            " queries and new sinks read few files; '0': never merge",
        ),
        Option(
            "cleanup",
            "enum",
            "delete",
            doc="'compact': past the head of the log keep only the last change per key (a"
            " stream with a key); 'delete': keep every change (retention alone removes them)",
            choices=("delete", "compact"),
        ),
        Option(
            "delete.retention",
            "duration",
            "1 day",
            doc="under cleanup = 'compact', how long a delete stays as a tombstone",
        ),
    )
}

# worker-wide defaults (SET stream.retention = '7 days'), used where a stream sets none
DEFAULT_KEYS = {name: f"stream.{name}" for name in STREAM_OPTIONS}
CHECK_INTERVAL_KEY = "stream.retention.check.interval"
CHECK_INTERVAL_DEFAULT = "10 s"

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]i?b?|b|bytes?)?\s*$", re.IGNORECASE)
_POWER = {"k": 1, "m": 2, "g": 3, "t": 4}


def size_bytes(text) -> int:
    """'10 GB', '512 MiB', '1000' (bytes) -> bytes; a KB is 1024 bytes, as in Spark's sizes."""
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(text)
    unit = (m.group(2) or "b").lower()
    return int(float(m.group(1)) * 1024 ** _POWER.get(unit[0], 0))


def check_options(given: dict, where: str) -> dict[str, str]:
    """The stream options as text, each checked; an error names the bad one."""
    out = {}
    for key, value in given.items():
        if key not in STREAM_OPTIONS:
            raise ValidationError(
                f"{where}: unknown option '{key}' (streams take: {', '.join(STREAM_OPTIONS)})"
            )
        out[key] = check_value(key, value, where)
    return out


def check_value(key: str, value, where: str) -> str:
    option = STREAM_OPTIONS[key]
    try:
        if key in ("retention", "delete.retention"):
            duration_ms(value)
        elif key in ("retention.bytes", "merge.target.bytes"):
            size_bytes(value)
        elif str(value).strip().lower() not in option.choices:
            raise ValueError(value)
    except ValueError:
        kind = {
            "retention": "a duration such as '7 days'",
            "delete.retention": "a duration such as '1 day'",
            "retention.bytes": "a size such as '10 GB'",
            "merge.target.bytes": "a size such as '128 MB'",
        }.get(key, option.describe_type())
        raise ValidationError(f"{where}: option '{key}' must be {kind}, got {value!r}") from None
    return str(value).strip().lower() if option.type == "enum" else str(value)


def check_setting(key: str, value: str) -> str:
    """A worker setting's value, checked when it is one of the stream retention settings."""
    defaults = {v: k for k, v in DEFAULT_KEYS.items()}
    if key in defaults:
        return check_value(defaults[key], value, f"SET {key}")
    if key == CHECK_INTERVAL_KEY:
        check_value("retention", value, f"SET {key}")
    return value


@dataclass(frozen=True)
class Limits:
    """A stream's retention in numbers: None means no limit."""

    age_ms: int | None = None
    bytes: int | None = None
    policy: str = "wait"
    merge_bytes: int = 0  # 0: no merging
    compact: bool = False
    tombstone_ms: int = 0

    @classmethod
    def of(cls, options: dict[str, str | None]) -> Limits:
        age, size = options.get("retention"), options.get("retention.bytes")
        merge = options.get("merge.target.bytes") or STREAM_OPTIONS["merge.target.bytes"].default
        return cls(
            duration_ms(age) if age else None,
            size_bytes(size) if size else None,
            options.get("retention.policy") or "wait",
            size_bytes(merge),
            options.get("cleanup") == "compact",
            duration_ms(
                options.get("delete.retention") or STREAM_OPTIONS["delete.retention"].default
            ),
        )


def _log_lines(folder: Path) -> list[str]:
    """The JSON lines of a Spark metadata log (latest compact file and the batches after it)."""
    lines = []
    for f in log_files(folder):
        try:
            lines += [x for x in f.read_text().splitlines()[1:] if x.strip()]
        except FileNotFoundError:  # Spark removed an old log file meanwhile
            continue
    return lines


def last_commit(checkpoint: str | Path) -> int | None:
    """The id of the last batch a query committed (None: none yet)."""
    commits = Path(checkpoint) / "commits"
    ids = [int(f.name) for f in commits.iterdir() if f.name.isdigit()] if commits.is_dir() else []
    return max(ids, default=None)


# Spark's file source takes a listed file for new only if it is younger than `maxFileAge`
# (default 7 days, which sinks keep) behind the newest file it has seen (SeenFilesMap)
SPARK_MAX_FILE_AGE_MS = 7 * 24 * 3600 * 1000
_MERGED = re.compile(r"^merged-(\d+)-(\d+)-")


def entry_times(entry: dict) -> tuple[int, int]:
    """When a file's first and last records were committed: its log time, or for a merged
    file the span in its name (its log time is set back, see merge_time)."""
    m = _MERGED.match(Path(local_path(entry["path"])).name)
    if m:
        return int(m.group(1)), int(m.group(2))
    return entry["modificationTime"], entry["modificationTime"]


@dataclass(frozen=True)
class Reader:
    """What a sink's file source has passed: the files of its committed batches, and every
    file it will never take for new (older than maxFileAge behind the newest it listed)."""

    read: frozenset[str] = frozenset()
    newest: int | None = None  # the newest file time in its source log; None: none yet
    rides: ridelog.Rides | None = None  # what its rides delivered (a chained sink)

    def passed(self, entry: dict) -> bool:
        path = local_path(entry["path"])
        if path in self.read or (self.rides is not None and self.rides.passed(path)):
            return True
        return self.newest is not None and entry["modificationTime"] < (
            self.newest - SPARK_MAX_FILE_AGE_MS
        )


def reader_of(checkpoint: str | Path) -> Reader:
    """A sink's progress from its file source's log (`sources/0`, one JSON line per file with
    its time and batchId): files of batches up to its last commit count as read, and the files
    its rides delivered (ridelog) as passed. A file's batchId there is the source's own log
    offset, which drifts from the query's batch ids (a batch that read no new file, a restart):
    the last committed batch's end offset says which it has read."""
    done = _read_upto(checkpoint)
    read, newest = set(), None
    for line in _log_lines(Path(checkpoint) / "sources" / "0"):
        entry = json.loads(line)
        newest = max(newest or 0, entry.get("timestamp", 0))
        if done is not None and entry.get("batchId", 0) <= done:
            read.add(local_path(entry["path"]))
    return Reader(frozenset(read), newest, ridelog.load(checkpoint))


def _read_upto(checkpoint: str | Path) -> int | None:
    """The file source's log offset at the end of the query's last committed batch (None:
    none)."""
    done = last_commit(checkpoint)
    return None if done is None else log_offset(checkpoint, done)


def log_offset(checkpoint: str | Path, batch_id: int) -> int:
    """The file source's log offset at the end of query batch `batch_id`, from the query's
    offset log ({"logOffset": n}); the batch id itself when that log does not say (Spark's
    file source numbers its log batches as the query's until a batch reads no new file)."""
    try:
        lines = (Path(checkpoint) / "offsets" / str(batch_id)).read_text().splitlines()
        return int(json.loads(lines[2])["logOffset"])
    except (FileNotFoundError, IndexError, KeyError, ValueError, TypeError):
        return batch_id


def batch_files(checkpoint: str | Path, batch_id: int) -> list[str]:
    """The files Spark's file source gave query batch `batch_id` (as paths in its log): those
    of its own log batches the query's batch spans (a compacted log file holds every earlier
    batch's entries too)."""
    start = log_offset(checkpoint, batch_id - 1) if batch_id > 0 else -1
    end = log_offset(checkpoint, batch_id)
    log, files = Path(checkpoint) / "sources" / "0", []
    for n in range(start + 1, end + 1):
        path = log / str(n) if (log / str(n)).exists() else log / f"{n}.compact"
        entries = [json.loads(x) for x in path.read_text().splitlines()[1:] if x.strip()]
        files += [e["path"] for e in entries if e.get("batchId", n) == n]
    return files


def files_read(checkpoint: str | Path) -> set[str]:
    """The stream files a sink has read in committed batches."""
    return set(reader_of(checkpoint).read)


def files_unread(directory: str | Path, checkpoint: str | Path) -> int:
    """How many files of a `file` source's directory its committed batches have not read
    (names starting with '_' or '.' are not data to Spark's file source)."""
    read = files_read(checkpoint)
    root = Path(directory).resolve()
    return sum(
        1
        for f in root.rglob("*")
        if f.is_file()
        and not any(part.startswith(("_", ".")) for part in f.relative_to(root).parts)
        and str(f) not in read
    )


@dataclass
class Decision:
    """What one retention pass does to a stream."""

    remove: list[dict] = field(default_factory=list)  # log entries to remove
    held: dict[str, list[dict]] = field(default_factory=dict)  # sink -> expired files it holds
    lost: dict[str, list[dict]] = field(default_factory=dict)  # sink -> removed unread files


def decide(entries: list[dict], limits: Limits, read_by: dict[str, Reader], now_ms=None):
    """Which committed files (Spark log entries) to remove: those older than the age limit,
    and the oldest while the stream is over its size limit; under 'wait' only files every
    sink in `read_by` (sink -> its progress) has passed."""
    now_ms = time.time() * 1000 if now_ms is None else now_ms
    entries = sorted(entries, key=lambda e: (entry_times(e)[1], e["path"]))
    expired = []
    total = sum(e["size"] for e in entries)
    for e in entries:
        too_old = limits.age_ms is not None and entry_times(e)[1] < now_ms - limits.age_ms
        too_big = limits.bytes is not None and total > limits.bytes
        if not (too_old or too_big):
            break  # files are in commit order: the rest are newer
        expired.append(e)
        total -= e["size"]
    d = Decision()
    for e in expired:
        unread = [s for s, r in read_by.items() if not r.passed(e)]
        if unread and limits.policy == "wait":
            for s in unread:
                d.held.setdefault(s, []).append(e)
            continue
        d.remove.append(e)
        for s in unread:
            d.lost.setdefault(s, []).append(e)
    return d


# merge no fewer files than this at a time, so a stream's newest merged file is not
# rewritten at every pass
MERGE_MIN_FILES = 10
_WRITTEN = re.compile(r"^([0-9a-f]{12})-b(\d+)-")


def settled(entry: dict, writers: dict[str, int | None]) -> bool:
    """Whether no writer can replay the batch that wrote this file: a writer (writer id ->
    its last committed batch) skips a replayed batch by finding its files' names in the log,
    so a file merged away before its writer's batch commit would be written again."""
    m = _WRITTEN.match(Path(local_path(entry["path"])).name)
    if not m or m.group(1) not in writers:  # merged, or its writer is gone
        return True
    done = writers[m.group(1)]
    return done is not None and int(m.group(2)) <= done


def ready(entries: list[dict], readers: dict[str, Reader], writers: dict[str, int | None]):
    """The files every reader has passed and no writer can replay, in commit order."""
    return [
        e
        for e in sorted(entries, key=lambda e: (entry_times(e)[1], e["path"]))
        if settled(e, writers) and all(r.passed(e) for r in readers.values())
    ]


def compact_group(
    entries: list[dict], readers: dict[str, Reader], writers: dict[str, int | None]
) -> list[dict]:
    """The files key compaction rewrites: all that are ready, once MERGE_MIN_FILES of them
    have not been compacted yet (the head of the log, not ready yet, stays as it is)."""
    group = ready(entries, readers, writers)
    fresh = [e for e in group if not _MERGED.match(Path(local_path(e["path"])).name)]
    return group if len(fresh) >= MERGE_MIN_FILES else []


def merge_groups(
    entries: list[dict], readers: dict[str, Reader], writers: dict[str, int | None], target: int
) -> list[list[dict]]:
    """Groups of small files to merge, each into one file of about `target` bytes: files
    every reader has passed and no writer can replay, in commit order; a last group smaller
    than the target only once it has MERGE_MIN_FILES files."""
    if target <= 0:
        return []
    small = [e for e in ready(entries, readers, writers) if e["size"] < target // 2]
    groups, group, size = [], [], 0
    for e in small:
        group.append(e)
        size += e["size"]
        if size >= target:
            groups.append(group)
            group, size = [], 0
    if len(group) >= MERGE_MIN_FILES:
        groups.append(group)
    return [g for g in groups if len(g) > 1]


def merge_time(group: list[dict], readers: dict[str, Reader]) -> int | None:
    """The log time of the file merging `group`: far enough back that no sink's file source
    takes it for new (each has passed every file of the group, and one that listed the group
    just before the merge has seen its newest file), so running sinks do not read the records
    again while a new sink reads them once. None: no such time (never before 0)."""
    bounds = [r.newest for r in readers.values() if r.newest is not None]
    newest = min([max(e["modificationTime"] for e in group), *bounds])
    t = newest - SPARK_MAX_FILE_AGE_MS - 1
    return t if t >= 0 else None
