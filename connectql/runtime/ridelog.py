"""What a chained sink's rides delivered (runtime/ride.py), kept in its checkpoint: for each
source writer it rode, the last source batch whose stream files it wrote. A cache of the
target's own record (the rider's progress row, committed with the rows): it may lag that record
after a kill, never lead it, so retention read from it only keeps files longer."""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

RIDES_FILE = "connectql-rides.json"
MERGED_PREFIX = "merged-"  # runtime/merge.py's files
WRITTEN = re.compile(r"^([0-9a-f]{12})-b(\d+)-(\d+)\.parquet$")  # streamwriter's file names


@dataclass
class Rides:
    """`since`: when the sink first rode (epoch seconds): a merged stream file made after it
    holds only records the sink has delivered (see ride.own_query_filter); `done`: source
    writer id -> the last of its batches ridden."""

    since: float = field(default_factory=time.time)
    done: dict[str, int] = field(default_factory=dict)

    def ridden(self, path: str) -> bool:
        """Whether a ride delivered the stream file at `path`."""
        m = WRITTEN.match(os.path.basename(path))
        return bool(m) and int(m.group(2)) <= self.done.get(m.group(1), -1)

    def merged_since(self, path: str) -> bool:
        """Whether `path` is a file merged since the sink first rode: retention merges only
        files every reader has passed, so it holds only records the sink has delivered."""
        if not os.path.basename(path).startswith(MERGED_PREFIX):
            return False
        try:
            return os.stat(path).st_mtime >= self.since
        except FileNotFoundError:
            return False

    def passed(self, path: str) -> bool:
        """Whether the sink has delivered every record of the stream file at `path`."""
        return self.ridden(path) or self.merged_since(path)


def rider_id(sink_writer: str, source_writer: str) -> str:
    """The writer id a sink's rides on one source commit under in the target: stable for the
    pair, apart from the sink's own query's, and as short as every writer id."""
    return hashlib.sha256(f"{sink_writer}:{source_writer}".encode()).hexdigest()[:12]


def load(checkpoint: str | Path) -> Rides | None:
    """The rides of the sink whose checkpoint this is (None: it never rode)."""
    try:
        data = json.loads((Path(checkpoint) / RIDES_FILE).read_text())
    except FileNotFoundError:
        return None
    return Rides(float(data["since"]), {w: int(b) for w, b in data["done"].items()})


def save(checkpoint: str | Path, rides: Rides) -> None:
    path = Path(checkpoint) / RIDES_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{RIDES_FILE}.tmp")
    tmp.write_text(json.dumps({"since": rides.since, "done": rides.done}))
    tmp.replace(path)
