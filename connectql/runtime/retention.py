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
from urllib.parse import unquote, urlparse

from connectql.catalog.streams import log_files
from connectql.connectors.options import Option, duration_ms
from connectql.errors import ValidationError

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
        if key == "retention":
            duration_ms(value)
        elif key == "retention.bytes":
            size_bytes(value)
        elif str(value).strip().lower() not in option.choices:
            raise ValueError(value)
    except ValueError:
        kind = {
            "retention": "a duration such as '7 days'",
            "retention.bytes": "a size such as '10 GB'",
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

    @classmethod
    def of(cls, options: dict[str, str | None]) -> Limits:
        age, size = options.get("retention"), options.get("retention.bytes")
        return cls(
            duration_ms(age) if age else None,
            size_bytes(size) if size else None,
            options.get("retention.policy") or "wait",
        )


def local_path(uri: str) -> str:
    return unquote(urlparse(uri).path)


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


def files_read(checkpoint: str | Path) -> set[str]:
    """The stream files a sink has read in committed batches: its file source's log
    (`sources/0`, one JSON line per file with its batchId) up to its last commit."""
    done = last_commit(checkpoint)
    if done is None:
        return set()
    read = set()
    for line in _log_lines(Path(checkpoint) / "sources" / "0"):
        entry = json.loads(line)
        if entry.get("batchId", 0) <= done:
            read.add(local_path(entry["path"]))
    return read


@dataclass
class Decision:
    """What one retention pass does to a stream."""

    remove: list[dict] = field(default_factory=list)  # log entries to remove
    held: dict[str, list[dict]] = field(default_factory=dict)  # sink -> expired files it holds
    lost: dict[str, list[dict]] = field(default_factory=dict)  # sink -> removed unread files


def decide(entries: list[dict], limits: Limits, read_by: dict[str, set[str]], now_ms=None):
    """Which committed files (Spark log entries) to remove: those older than the age limit,
    and the oldest while the stream is over its size limit; under 'wait' only files every
    sink in `read_by` (sink -> files it has read) has read."""
    now_ms = time.time() * 1000 if now_ms is None else now_ms
    entries = sorted(entries, key=lambda e: (e["modificationTime"], e["path"]))
    expired = []
    total = sum(e["size"] for e in entries)
    for e in entries:
        too_old = limits.age_ms is not None and e["modificationTime"] < now_ms - limits.age_ms
        too_big = limits.bytes is not None and total > limits.bytes
        if not (too_old or too_big):
            break  # files are in commit order: the rest are newer
        expired.append(e)
        total -= e["size"]
    d = Decision()
    for e in expired:
        unread = [s for s, files in read_by.items() if local_path(e["path"]) not in files]
        if unread and limits.policy == "wait":
            for s in unread:
                d.held.setdefault(s, []).append(e)
            continue
        d.remove.append(e)
        for s in unread:
            d.lost.setdefault(s, []).append(e)
    return d
