"""TableDataSource: the Python data source Spark loads for a database sink, its writers named
as "module:Class" so that registering it imports neither."""

from __future__ import annotations

from typing import ClassVar

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType


class TableDataSource(DataSource):
    """A subclass names its format and its writer and target (the writer of one of
    several streams, under RoutedWriter) classes."""

    format: ClassVar[str]
    writer: ClassVar[str]
    target: ClassVar[str]

    @classmethod
    def name(cls) -> str:
        return cls.format

    def streamWriter(self, schema: StructType, overwrite: bool):  # noqa: N802 (Spark's name)
        from connectql.connectors.registry import load
        from connectql.connectors.relational.routed import ROUTES_OPTION, RoutedWriter

        if ROUTES_OPTION in self.options:  # several streams (option streams)
            return RoutedWriter(load(self.target), self.options)
        return load(self.writer)(schema, self.options)
