"""The Python data source Spark loads as format `connectql_mysql` (reader and writer)."""

from __future__ import annotations

from connectql.connectors.relational.datasource import TableDataSource

FORMAT = "connectql_mysql"


class MysqlDataSource(TableDataSource):
    format = FORMAT
    reader = "connectql.connectors.mysql.source:MysqlStreamReader"
    writer = "connectql.connectors.mysql.sink:MysqlStreamWriter"
    target = "connectql.connectors.mysql.sink:MysqlTarget"
