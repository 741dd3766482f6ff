"""The Python data source Spark loads as format `connectql_postgres` (reader and writer)."""

from __future__ import annotations

from connectql.connectors.relational.datasource import TableDataSource

FORMAT = "connectql_postgres"


class PostgresDataSource(TableDataSource):
    format = FORMAT
    reader = "connectql.connectors.postgres.source:PostgresStreamReader"
    writer = "connectql.connectors.postgres.sink:PostgresStreamWriter"
    target = "connectql.connectors.postgres.sink:PgTarget"
