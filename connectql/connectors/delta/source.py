"""The delta source: a Delta Lake table followed through delta-rs, its offset the table's version.
The first micro-batch reads the table as its latest version holds it (`starting.position =
'earliest'`, the default; 'latest' skips it); each later one reads the files that the versions
committed since added, version by version, as Spark's Delta streaming reader with
skipChangeCommits does: a version that also removes files (a MERGE, DELETE, UPDATE, an
OPTIMIZE compaction, an overwrite) is not an append and is skipped. The source follows appends,
so every appended row enters the stream exactly once.

The offset is {"version": v, "records": n}, n the rows of the table at v (from its files'
statistics): the lag is how many rows the table holds beyond what was read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from connectql.config import Option
from connectql.connectors.lake import S3_OPTIONS, Store, starting_option
from connectql.toolkit import Source, ValidationError

SOURCE_OPTIONS = (
    Option(
        "path",
        required=True,
        doc="the Delta table's directory: a local path, or an s3:// URL (then endpoint, region"
        " and keys reach its server)",
    ),
    starting_option("versions"),
    *S3_OPTIONS,
)
WHOLE = -1  # an offset's version before the first batch of 'earliest': it reads the table whole


class DeltaSource(Source):
    options = SOURCE_OPTIONS
    lag_field = "records"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.path = options["path"]
        self.storage = Store(options, self.path, "delta source").delta()
        self._start: dict | None = None

    def _table(self, version: int | None = None):
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(self.path, version=version, storage_options=self.storage)
        except TableNotFoundError:
            raise ValidationError(f"delta source: there is no Delta table at {self.path}") from None

    def check(self) -> None:
        self._table()

    def endpoint(self) -> str | None:
        return self.path

    def schema(self) -> pa.Schema:
        return pa.schema(self._table().schema().to_arrow())

    def initial_offset(self) -> dict:
        if self._start is None:
            latest = self.options.get("starting.position") == "latest"
            self._start = self._at(self._table()) if latest else {"version": WHOLE, "records": 0}
        return self._start

    def latest_offset(self, start: dict) -> dict:
        return self._at(self._table())

    def end_offset(self, start: dict, latest: dict, max_records: int) -> dict:
        """Whole versions, oldest first, while the rows they add stay within max_records (one
        at least); the first batch of 'earliest' is the table whole, not cut."""
        if start["version"] == WHOLE:
            return latest
        previous = start
        for version in range(start["version"] + 1, latest["version"]):
            at = self._at(self._table(version))
            if at["records"] - start["records"] > max_records and previous is not start:
                return previous
            previous = at
        return latest

    def partitions(self, start: dict, end: dict) -> list[Any]:
        if end["version"] <= start["version"]:
            return []
        if start["version"] == WHOLE:
            return [{"whole": end["version"]}]
        return [{"version": v} for v in range(start["version"] + 1, end["version"] + 1)]

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        if "whole" in partition:
            yield from self._table(partition["whole"]).to_pyarrow_dataset().to_batches()
            return
        version = partition["version"]
        now, before = self._table(version), self._table(version - 1)
        have, had = _files(now), _files(before)
        if had - have:  # it removes files: not an append
            return
        new = have - had
        dataset = now.to_pyarrow_dataset()
        added = [f for f in dataset.get_fragments() if _relative(f.path, new)]
        yield from _subset(dataset, added).to_batches()

    @staticmethod
    def _at(table) -> dict:
        counts = table.get_add_actions(flatten=True).column("num_records").to_pylist()
        return {"version": table.version(), "records": sum(n or 0 for n in counts)}


def _files(table) -> set[str]:
    """The table's data files, by their path in its log (relative to the table)."""
    return set(table.get_add_actions(flatten=True).column("path").to_pylist())


def _relative(path: str, files: set[str]) -> bool:
    """Whether a dataset fragment's path (relative, or with the table's location before it)
    is one of `files`."""
    return path in files or any(path.endswith(f"/{f}") for f in files)


def _subset(dataset, fragments):
    import pyarrow.dataset as ds

    return ds.FileSystemDataset(fragments, dataset.schema, dataset.format, dataset.filesystem)
