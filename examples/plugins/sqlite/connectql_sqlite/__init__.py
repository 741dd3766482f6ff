"""connectql-sqlite: SQLite tables as a connectql source and sink, built only on connectql.toolkit."""

from connectql.toolkit import Connector
from connectql_sqlite.sink import TableSink
from connectql_sqlite.source import TableSource

CONNECTOR = Connector(
    type="sqlite",
    doc="SQLite tables: the source reads new rows by an incrementing integer column; the sink"
    " inserts or upserts, exactly-once (the batch id is committed with the rows).",
    source=TableSource,
    sink=TableSink,
)
