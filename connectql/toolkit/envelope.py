"""The record envelope every connector and the runtime share: the change-data columns a row may
carry beside its data, the tag of a several-table source's rows, and the dead-letter columns
(and a sink's dead letters)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import pyarrow as pa

OP = "__op"  # 'r' snapshot, 'c' insert, 'u' update, 'd' delete
TS_MS = "__ts_ms"  # the source's commit time, epoch milliseconds
POS = "__pos"  # a sortable position in the source's log
SOURCE = "__source"  # JSON with the source's coordinates (log position, table, ...)
UNCHANGED = "__unchanged"  # columns an update left out (their values are not in the row)
META_COLUMNS = (OP, TS_MS, POS, SOURCE, UNCHANGED)

TABLE_COLUMN = "__table"  # which table a row of a several-table source comes from
# a toolkit source's record that did not parse: JSON with the dead-letter text columns
DEAD_LETTER_COLUMN = "__dead_letter"

# the columns of every dead-letter stream: these text columns, then `time`
DEADLETTER_TEXT_COLUMNS = (
    "connector",
    "stage",
    "source_offset",
    "error_class",
    "error_message",
    "raw_record",
)
DEADLETTER_DDL = ", ".join(f"`{c}` STRING" for c in DEADLETTER_TEXT_COLUMNS) + ", `time` TIMESTAMP"
DEADLETTER_ARROW = pa.schema(
    [(c, pa.string()) for c in DEADLETTER_TEXT_COLUMNS] + [("time", pa.timestamp("us", tz="UTC"))]
)


def deadletter_name(writer_id: str, batch_id: int) -> str:
    """The file of a sink batch's rejected rows in the dead-letter stream (one per batch, once)."""
    return f"{writer_id}-b{batch_id}-rejected"


def sink_dead_letters(connector: str, batch_id: int, rejected) -> pa.Table:
    """Dead-letter rows of a sink batch's rejected rows, (raw record, its row in the batch,
    error class, one-line message) each."""
    now = datetime.now(timezone.utc)
    rows = [
        {
            "connector": connector,
            "stage": "write",
            "source_offset": json.dumps({"batch": batch_id, "row": row}),
            "error_class": error_class,
            "error_message": message,
            "raw_record": raw,
            "time": now,
        }
        for raw, row, error_class, message in rejected
    ]
    return pa.Table.from_pylist(rows, schema=DEADLETTER_ARROW)
