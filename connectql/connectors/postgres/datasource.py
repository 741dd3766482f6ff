"""The Python data source Spark loads as format `connectql_postgres` (reader and writer)."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

FORMAT = "connectql_postgres"


class PostgresDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def streamWriter(self, schema: StructType, overwrite: bool):  # noqa: N802 (Spark's name)
        from connectql.connectors.postgres.sink import PgTarget, PostgresStreamWriter
        from connectql.connectors.routed import ROUTES_OPTION, RoutedWriter

        if ROUTES_OPTION in self.options:  # several streams (option streams)
            return RoutedWriter(PgTarget, self.options)
        return PostgresStreamWriter(schema, self.options)

    def streamReader(self, schema: StructType):  # noqa: N802
        from connectql.connectors.postgres.source import PostgresStreamReader

        return PostgresStreamReader(schema, self.options)
