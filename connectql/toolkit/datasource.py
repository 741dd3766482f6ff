"""ToolkitDataSource: the Python data source Spark loads as `format("connectql_toolkit")`, its
reader and writer built around a toolkit Source or Sink (spark.py), or the sinks of several
streams (routed.py)."""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from connectql.toolkit.routed import ROUTES_KEY, RoutedWriter
from connectql.toolkit.spark import FORMAT, StreamReader, StreamWriter, connector_of, ddl


class ToolkitDataSource(DataSource):
    """`spark.readStream.format("connectql_toolkit")` / `writeStream.format(...)`."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return ddl(connector_of(self.options).schema())

    def streamReader(self, schema: StructType) -> StreamReader:  # noqa: N802 (Spark's name)
        return StreamReader(connector_of(self.options), schema, self.options)

    def streamWriter(self, schema: StructType, overwrite: bool):  # noqa: N802
        if ROUTES_KEY in self.options:  # a sink of several streams
            return RoutedWriter(self.options)
        return StreamWriter(connector_of(self.options), schema, self.options)
