"""What a mysql source finds at CREATE: each table's columns and key, and whether the server
and the tables allow change-data capture (above tables, binlog and keyless, which it asks)."""

from __future__ import annotations

from connectql.connectors.mysql.binlog import check_replication
from connectql.connectors.mysql.client import connect, query
from connectql.connectors.mysql.keyless import check_supported
from connectql.connectors.mysql.tables import (
    check_binlog,
    check_table_readable,
    describe_source,
    tables_of,
)
from connectql.connectors.relational.source import count_sql
from connectql.connectors.relational.tablereader import Table


def discover(cfg, cdc: bool, where: str, log_checks: bool = True) -> list[Table]:
    """At CREATE: the columns and key of each table the source reads, checking what
    change-data capture needs (the binary log's settings and the user's right to read it
    unless not `log_checks`: a running source looking for tables created since)."""
    with connect(cfg.connection) as conn:
        if cdc and log_checks:
            check_binlog(conn, where)
            check_replication(cfg, where)
        found = []
        for table in tables_of(conn, cfg, where):
            one = cfg.for_table(table)
            found.append(describe_source(conn, one, where))
            if not one.query:
                check_table_readable(conn, one.schema, one.table, where)
            if cdc and not one.query and not found[-1].key:
                check_supported(conn, found[-1].qualified, where)
        return found


def count(cfg, where: str) -> int:
    """At CREATE of a cdc source: the rows its snapshot reads (progress)."""
    with connect(cfg.connection) as conn:
        return sum(int(n) for (n,) in query(conn, count_sql(cfg, tables_of(conn, cfg, where))))
