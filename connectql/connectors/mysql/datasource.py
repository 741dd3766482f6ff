"""The Python data source Spark loads as format `connectql_mysql`: the sink's writer (the source
runs on the toolkit's data source)."""

from __future__ import annotations

from connectql.connectors.relational.datasource import TableDataSource

FORMAT = "connectql_mysql"


class MysqlDataSource(TableDataSource):
    format = FORMAT
    writer = "connectql.connectors.mysql.sink:MysqlStreamWriter"
    target = "connectql.connectors.mysql.sink:MysqlTarget"
