"""The iceberg source: an Apache Iceberg table followed through pyiceberg as Spark's Iceberg
streaming reader does, its offset the table's snapshot. The first micro-batch reads the table
as its current snapshot holds it (`starting.position = 'earliest'`, the default; 'latest' skips
it); each later one reads the rows that the APPEND snapshots committed since added (pyiceberg's
incremental append scan). Snapshots that delete or overwrite (an upsert, a compaction) add no
rows to read: the source follows appends, so every appended row enters the stream exactly once.

The offset is {"snapshot": id, "records": n}, n the table's rows at that snapshot (its summary's
total-records): the lag is how many rows the table holds beyond what was read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from connectql.config import Option
from connectql.connectors.iceberg.catalog import CATALOG_OPTIONS, calls, catalog_of
from connectql.connectors.lake import starting_option
from connectql.toolkit import Source, ValidationError

SOURCE_OPTIONS = (
    *CATALOG_OPTIONS,
    Option("table", required=True, doc="namespace.name of the table to follow"),
    starting_option("snapshots"),
)
WHO = "iceberg source"
# an offset's snapshot: None before the first batch of 'earliest' (the next one reads the
# table whole), EMPTY where the table had no snapshot yet (the next reads every append)
EMPTY = -1


class IcebergSource(Source):
    options = SOURCE_OPTIONS
    lag_field = "records"

    def __init__(self, options: dict[str, Any]):
        super().__init__(options)
        self.name = options["table"]
        self._start: dict | None = None

    def _table(self):
        from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

        try:
            return catalog_of(self.options, WHO).load_table(self.name)
        except (NoSuchTableError, NoSuchNamespaceError):
            where = self.options["catalog.uri"]
            raise ValidationError(
                f"{WHO}: there is no table {self.name} in the catalog at {where}"
            ) from None

    def check(self) -> None:
        with calls(self.options, WHO):
            self._table()

    def endpoint(self) -> str | None:
        return self.options["catalog.uri"]

    def schema(self) -> pa.Schema:
        with calls(self.options, WHO):
            return self._table().schema().as_arrow()

    def initial_offset(self) -> dict:
        if self._start is None:
            latest = self.options.get("starting.position") == "latest"
            self._start = self._current() if latest else {"snapshot": None, "records": 0}
        return self._start

    def latest_offset(self, start: dict) -> dict:
        found = self._current()
        return start if found["snapshot"] == EMPTY else found

    def _current(self) -> dict:
        with calls(self.options, WHO):
            snapshot = self._table().current_snapshot()
        if snapshot is None:
            return {"snapshot": EMPTY, "records": 0}
        total = (snapshot.summary.additional_properties if snapshot.summary else {}).get(
            "total-records", 0
        )
        return {"snapshot": snapshot.snapshot_id, "records": int(total)}

    def end_offset(self, start: dict, latest: dict, max_records: int) -> dict:
        """Whole snapshots, oldest first, while their appended rows stay within max_records
        (one at least); the first batch of 'earliest' is the table whole, not cut."""
        if start["snapshot"] is None or latest["snapshot"] == start["snapshot"]:
            return latest
        with calls(self.options, WHO):
            table = self._table()
        later = []  # the snapshots after start, up to latest, newest first
        for snapshot in ancestors_of(table, latest["snapshot"]):
            if snapshot.snapshot_id == start["snapshot"]:
                break
            later.append(snapshot)
        taken, previous = 0, start
        for snapshot in reversed(later):
            summary = snapshot.summary.additional_properties if snapshot.summary else {}
            taken += int(summary.get("added-records", 0)) if _appends(snapshot) else 0
            if taken > max_records and previous is not start:
                return previous
            previous = {
                "snapshot": snapshot.snapshot_id,
                "records": int(summary.get("total-records", 0)),
            }
        return latest

    def partitions(self, start: dict, end: dict) -> list[Any]:
        if end["snapshot"] in (None, EMPTY) or end["snapshot"] == start["snapshot"]:
            return []
        return [{"after": start["snapshot"], "upto": end["snapshot"]}]

    def read(self, partition: Any) -> Iterator[pa.RecordBatch]:
        # read whole inside (pyiceberg's pool is held while it works), yielded after
        with calls(self.options, WHO):
            table = self._table()
            if partition["after"] is None:  # the table as the snapshot holds it
                scan = table.scan(snapshot_id=partition["upto"])
            else:
                after = partition["after"]
                scan = table.incremental_append_scan(
                    from_snapshot_id_exclusive=None if after == EMPTY else after,
                    to_snapshot_id_inclusive=partition["upto"],
                )
            rows = scan.to_arrow()
        yield from rows.to_batches()


def ancestors_of(table, snapshot_id: int):
    """The snapshot and its ancestors, newest first."""
    from pyiceberg.table.snapshots import ancestors_of as walk

    return walk(table.snapshot_by_id(snapshot_id), table.metadata)


def _appends(snapshot) -> bool:
    return snapshot.summary is not None and snapshot.summary.operation.value == "append"
