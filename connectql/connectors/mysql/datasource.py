"""The Python data source Spark loads as format `connectql_mysql` (reader and writer)."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

FORMAT = "connectql_mysql"


class MysqlDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def streamWriter(self, schema: StructType, overwrite: bool):  # noqa: N802 (Spark's name)
        from connectql.connectors.mysql.sink import MysqlStreamWriter, MysqlTarget
        from connectql.connectors.routed import ROUTES_OPTION, RoutedWriter

        if ROUTES_OPTION in self.options:  # several streams (option streams)
            return RoutedWriter(MysqlTarget, self.options)
        return MysqlStreamWriter(schema, self.options)

    def streamReader(self, schema: StructType):  # noqa: N802
        from connectql.connectors.mysql.source import MysqlStreamReader

        return MysqlStreamReader(schema, self.options)
