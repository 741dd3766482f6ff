"""The delta source: a Delta Lake table followed through delta-rs, its offset the table's version.
The first micro-batch reads the table as its latest version holds it (`starting.position =
'earliest'`, the default; 'latest' skips it); each later one reads the files that the versions
committed since added, version by version, as Spark's Delta streaming reader with
skipChangeCommits does: a version that also removes files (a MERGE, DELETE, UPDATE, an
OPTIMIZE compaction, an overwrite) is not an append and is skipped. The source follows appends,
so every appended row enters the stream exactly once.

With `change.feed = true` it reads the table's change data feed instead (the table needs
`delta.enableChangeDataFeed = true`), as a change stream an upsert sink applies: the first batch
the table as it is (`__op` 'r'), then each later version's inserts ('c'), updates (their
post-images, 'u') and deletes ('d'), whatever the operation (MERGE, UPDATE, DELETE included),
ordered by `__pos` (the version, then deletes before the rows a version writes).

The offset is {"version": v, "records": n}, n the rows of the table at v (from its files'
statistics): the lag is how many rows the table holds beyond what was read."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from connectql.config import Option
from connectql.connectors.lake import S3_OPTIONS, Store, starting_option
from connectql.toolkit import Source, ValidationError
from connectql.toolkit.debezium import CHANGE_SCHEMA
from connectql.toolkit.envelope import OP, POS, SOURCE, TS_MS

SOURCE_OPTIONS = (
    Option(
        "path",
        required=True,
        doc="the Delta table's directory: a local path, or an s3:// URL (then endpoint, region"
        " and keys reach its server)",
    ),
    starting_option("versions"),
    Option(
        "change.feed",
        "bool",
        False,
        doc="read the table's change data feed (it needs delta.enableChangeDataFeed = true) as a"
        " change stream: the table as it is first (__op 'r'), then each later version's inserts,"
        " updates and deletes (c, u, d), MERGE and DELETE included; false: the rows versions"
        " append",
    ),
    Option(
        "key",
        doc="change.feed: the table's key columns (a comma list), the stream's key an upsert"
        " sink applies the changes by",
    ),
    *S3_OPTIONS,
)
FEED_PROPERTY = "delta.enableChangeDataFeed"
KINDS = {"delete": ("d", 0), "insert": ("c", 1), "update_postimage": ("u", 1)}  # op, order
WHOLE = -1  # an offset's version before the first batch of 'earliest': it reads the table whole


class DeltaSource(Source):
    options = SOURCE_OPTIONS
    lag_field = "records"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.path = options["path"]
        self.storage = Store(options, self.path, "delta source").delta()
        self.feed = bool(options.get("change.feed"))
        self.keys = tuple(k.strip() for k in (options.get("key") or "").split(",") if k.strip())
        if self.keys and not self.feed:
            raise ValidationError("delta source: key is for change.feed = true")
        self._start: dict | None = None

    def _table(self, version: int | None = None):
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            return DeltaTable(self.path, version=version, storage_options=self.storage)
        except TableNotFoundError:
            raise ValidationError(f"delta source: there is no Delta table at {self.path}") from None

    def check(self) -> None:
        table = self._table()
        if self.feed and table.metadata().configuration.get(FEED_PROPERTY) != "true":
            raise ValidationError(
                f"delta source: the table at {self.path} has no change data feed: set its"
                f" property {FEED_PROPERTY} = true (deltalake: DeltaTable(path).alter"
                f".set_table_properties({{'{FEED_PROPERTY}': 'true'}}); changes from then on)"
            )
        missing = [k for k in self.keys if k not in self._columns(table)]
        if missing:
            raise ValidationError(
                f"delta source: key {', '.join(missing)} is not a column of the table at"
                f" {self.path} ({', '.join(self._columns(table))})"
            )

    @staticmethod
    def _columns(table) -> list[str]:
        return [f.name for f in pa.schema(table.schema().to_arrow())]

    def endpoint(self) -> str | None:
        return self.path

    def schema(self) -> pa.Schema:
        columns = pa.schema(self._table().schema().to_arrow())
        return pa.schema([*columns, *CHANGE_SCHEMA]) if self.feed else columns

    def key(self) -> tuple[str, ...]:
        return self.keys

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
        if start["version"] == WHOLE or self.feed:  # a feed's versions are read whole
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
            table = self._table(partition["whole"])
            batches = table.to_pyarrow_dataset().to_batches()
            yield from _snapshot(batches, table) if self.feed else batches
            return
        version = partition["version"]
        if self.feed:
            yield self._changes(version)
            return
        now, before = self._table(version), self._table(version - 1)
        have, had = _files(now), _files(before)
        if had - have:  # it removes files: not an append
            return
        new = have - had
        dataset = now.to_pyarrow_dataset()
        added = [f for f in dataset.get_fragments() if _relative(f.path, new)]
        yield from _subset(dataset, added).to_batches()

    def _changes(self, version: int) -> pa.Table:
        """The version's changes from the feed, deletes first, update pre-images left out."""
        found = pa.table(self._table().load_cdf(starting_version=version, ending_version=version))
        found = found.cast(pa.schema([_unviewed(f) for f in found.schema]))  # take has no views
        kinds = found.column("_change_type").to_pylist()
        rows = sorted((KINDS[k][1], i) for i, k in enumerate(kinds) if k in KINDS)
        found = found.take([i for _order, i in rows])
        ops = [KINDS[kinds[i]][0] for _order, i in rows]
        when = pc.cast(pc.cast(found.column("_commit_timestamp"), pa.timestamp("ms")), pa.int64())
        data = found.drop_columns(["_change_type", "_commit_version", "_commit_timestamp"])
        return _enveloped(data, version, ops, when.to_pylist())

    @staticmethod
    def _at(table) -> dict:
        counts = table.get_add_actions(flatten=True).column("num_records").to_pylist()
        return {"version": table.version(), "records": sum(n or 0 for n in counts)}


def _snapshot(batches, table) -> Iterator[pa.Table]:
    """The table's rows as a change stream's snapshot ('r') at its version."""
    version, row = table.version(), 0
    # history(1) is the newest commit's whatever version the table was loaded at
    when = next((h.get("timestamp") for h in table.history() if h.get("version") == version), None)
    for batch in batches:
        data = pa.Table.from_batches([batch])
        yield _enveloped(data, version, ["r"] * len(data), [when] * len(data), row)
        row += len(data)


def _enveloped(data: pa.Table, version: int, ops: list, when: list, first: int = 0) -> pa.Table:
    """`data` with the change columns: __pos orders by version, then row."""
    n = len(data)
    columns = {
        OP: ops,
        TS_MS: when,
        POS: [f"{version:020d}.{first + i:012d}" for i in range(n)],
        SOURCE: [json.dumps({"version": version})] * n,
    }
    for field in CHANGE_SCHEMA:
        data = data.append_column(field, pa.array(columns[field.name], field.type))
    return data


def _unviewed(field: pa.Field) -> pa.Field:
    """A string_view or binary_view field as a plain string or binary one."""
    plain = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}.get(field.type)
    return field if plain is None else field.with_type(plain)


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
