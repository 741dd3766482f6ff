"""The Python data source Spark loads as format `connectql_postgres`: the sink's writer (the
source runs on the toolkit's data source)."""

from __future__ import annotations

from connectql.connectors.relational.datasource import TableDataSource

FORMAT = "connectql_postgres"


class PostgresDataSource(TableDataSource):
    format = FORMAT
    writer = "connectql.connectors.postgres.sink:PostgresStreamWriter"
    target = "connectql.connectors.postgres.sink:PgTarget"
