"""A source's bytes read limit (`batch.max.bytes`): the bytes per record learned from the
batches it read, turned into a record limit on the driver.

The driver plans a batch before any of its records is read, so it cannot count the batch's
bytes; the executors can. Each task that reads a partition writes what it read (records, and
bytes of the Arrow batches it handed Spark) into the checkpoint, the driver folds those into
its estimate before it plans the next batch, and a batch then reads at most the bytes limit
divided by the bytes of a record. Until a batch has been measured (a new connector), a batch
reads at most PROBE_RECORDS records. The estimate is kept in the checkpoint, so a restart
plans with it at once. The checkpoint must be on storage the executors reach (it is on one
machine, and on a cluster's shared file system)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

PROBE_RECORDS = 100  # the first batch's most records, before a record's bytes are known
DIR = "connectql-read-sizes"  # in the checkpoint: a file per partition read since the last plan
ESTIMATE = "estimate.json"


class Tally:
    """What one task read: the records and bytes of its Arrow batches (before a source's
    batches are packed, which makes many records one row)."""

    def __init__(self):
        self.records = self.bytes = 0

    def add(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            self.records += batch.num_rows
            self.bytes += batch.nbytes
            yield batch

    def write(self, checkpoint: str, partition: str) -> None:
        """Into the checkpoint, once the partition is read whole (a replayed partition writes
        the same file again)."""
        folder = Path(checkpoint, DIR)
        folder.mkdir(parents=True, exist_ok=True)
        name = hashlib.sha1(partition.encode()).hexdigest() + ".json"
        _write(folder / name, {"records": self.records, "bytes": self.bytes})


class Learned:
    """The driver's bytes per record, from the partitions read since it last planned."""

    def __init__(self, checkpoint: str, max_bytes: int):
        self.folder, self.max_bytes = Path(checkpoint, DIR), max_bytes
        kept = _read(self.folder / ESTIMATE)
        self.per_record: float | None = kept.get("per_record") if kept else None

    def most_records(self) -> int:
        """At most this many records in the next batch."""
        self._learn()
        if self.per_record is None:
            return PROBE_RECORDS
        return max(1, int(self.max_bytes // max(self.per_record, 1.0)))

    def _learn(self) -> None:
        if not self.folder.is_dir():
            return
        read = [p for p in self.folder.glob("*.json") if p.name != ESTIMATE]
        found = [f for f in (_read(p) for p in read) if f]
        records = sum(f["records"] for f in found)
        if records:  # the last batch measured, as the estimate (records change in size)
            self.per_record = sum(f["bytes"] for f in found) / records
            _write(self.folder / ESTIMATE, {"per_record": self.per_record})
        for p in read:
            p.unlink(missing_ok=True)


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # gone, or being written: the next plan reads it


def _write(path: Path, value: dict) -> None:
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(value))
    os.replace(part, path)
