"""The database connectors' shared declaration (connectors/relational/plugin.py), planned against real
servers: a cdc source counts the rows its snapshot will read over every table it reads (the
command line's progress bars), on both databases, and bad input is refused before anything."""

from __future__ import annotations

import pytest

from connectql.config import validate
from connectql.connectors.mysql.plugin import PLUGIN as MYSQL
from connectql.connectors.postgres.plugin import PLUGIN as POSTGRES
from connectql.errors import PlanError
from tests.pgserver import pg_shared  # noqa: F401 (fixture)
from tests.test_mysql import plain_db  # noqa: F401 (fixture)
from tests.test_postgres import db, sql  # noqa: F401 (fixture)


def planned(plugin, **given):
    return plugin.plan_source(validate(plugin.source_options, given, "test source"))


def test_a_mysql_snapshot_counts_the_rows_of_every_table_it_reads(plain_db):  # noqa: F811
    for table, n in (("orders", 3), ("order_items", 5), ("other", 7)):
        plain_db.sql(f"CREATE TABLE {table} (id INT PRIMARY KEY)")
        plain_db.sql(f"INSERT INTO {table} VALUES " + ", ".join(f"({i})" for i in range(n)))
    where = {"host": plain_db.host, "port": plain_db.port, "database": plain_db.name}
    assert planned(MYSQL, **where, table="order*").count_rows() == 8
    assert planned(MYSQL, **where, table="other").count_rows() == 7
    assert planned(MYSQL, **where, table="other", mode="bulk").count_rows() is None


def test_a_postgres_snapshot_counts_the_rows_of_every_table_it_reads(pg_shared, db):  # noqa: F811
    name, info = db
    for table, n in (("orders", 2), ("order_items", 4), ("other", 6)):
        sql(info, f"CREATE TABLE {table} (id INT PRIMARY KEY)")
        sql(info, f"INSERT INTO {table} SELECT generate_series(1, {n})")
    where = {"host": pg_shared.host, "port": pg_shared.port, "user": pg_shared.user}
    assert planned(POSTGRES, **where, database=name, table="order*").count_rows() == 6
    assert planned(POSTGRES, **where, database=name, table="public.other").count_rows() == 6


def test_a_negative_server_id_is_refused_naming_it():
    with pytest.raises(PlanError, match=r"mysql source: server.id must be a positive number"):
        planned(MYSQL, database="shop", table="orders", **{"server.id": -1})
