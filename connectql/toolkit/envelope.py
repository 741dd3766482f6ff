"""The record envelope every connector and the runtime share: the change-data columns a row may
carry beside its data, the tag of a several-table source's rows, and the dead-letter columns."""

from __future__ import annotations

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
