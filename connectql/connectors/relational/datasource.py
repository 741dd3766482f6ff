"""TableDataSource: the Python data source Spark loads for a database connector, its reader and
writer named as "module:Class" so that registering it imports neither."""

from __future__ import annotations

import importlib
from typing import ClassVar

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType


def _load(spec: str):
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


class TableDataSource(DataSource):
    """A subclass names its format and its reader, writer and target (the writer of one of
    several streams, under RoutedWriter) classes."""

    format: ClassVar[str]
    reader: ClassVar[str]
    writer: ClassVar[str]
    target: ClassVar[str]

    @classmethod
    def name(cls) -> str:
        return cls.format

    def streamWriter(self, schema: StructType, overwrite: bool):  # noqa: N802 (Spark's name)
        from connectql.connectors.relational.routed import ROUTES_OPTION, RoutedWriter

        if ROUTES_OPTION in self.options:  # several streams (option streams)
            return RoutedWriter(_load(self.target), self.options)
        return _load(self.writer)(schema, self.options)

    def streamReader(self, schema: StructType):  # noqa: N802
        return _load(self.reader)(schema, self.options)
