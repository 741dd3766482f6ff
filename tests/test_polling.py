"""Key ranges of a real table (connectors/relational/polling.py): where a chunk of N rows ends, for one
and two key columns, with the rest of the table longer or shorter than N, and under an upper
bound, on PostgreSQL and MariaDB."""

from __future__ import annotations

import psycopg
from pyspark.sql.types import LongType, StructField, StructType

from connectql.connectors.mysql.db import MyDb
from connectql.connectors.postgres.db import PgDb
from connectql.connectors.relational.polling import Source, chunk_end
from tests.pgserver import pg_shared  # noqa: F401 (fixture)
from tests.test_mysql import plain_db  # noqa: F401 (fixture)
from tests.test_postgres import db  # noqa: F401 (fixture)

SCHEMA = StructType([StructField("a", LongType()), StructField("b", LongType())])
# (a, b): a in 1..4, b in 1..5: 20 rows in key order (1,1), (1,2), ... (4,5)
ROWS = [(a, b) for a in range(1, 5) for b in range(1, 6)]


def cases(db_) -> None:
    src = Source(db_.quote("t"), SCHEMA)
    one, two = ["a"], ["a", "b"]
    assert chunk_end(db_, src, two, None, 7) == (["2", "2"], 7)
    assert chunk_end(db_, src, two, ["2", "2"], 7) == (["3", "4"], 7)
    assert chunk_end(db_, src, two, ["3", "4"], 7) == (["4", "5"], 6)  # fewer remain
    assert chunk_end(db_, src, two, ["4", "5"], 7) == (None, 0)
    assert chunk_end(db_, src, two, None, 7, upto=["1", "4"]) == (["1", "4"], 4)
    assert chunk_end(db_, src, two, ["1", "1"], 3, upto=["3", "1"]) == (["1", "4"], 3)
    assert chunk_end(db_, src, one, ["3"], 1) == (["4"], 1)
    assert chunk_end(db_, src, one, ["3"], 20) == (["4"], 5)
    assert chunk_end(db_, src, two, None, 20) == (["4", "5"], 20)  # exactly all
    assert chunk_end(db_, src, two, None, 21) == (["4", "5"], 20)


def test_chunk_ends_on_postgres(db):  # noqa: F811
    _name, info = db
    with psycopg.connect(info, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (a bigint, b bigint, PRIMARY KEY (a, b))")
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s)", ROWS)
        cases(PgDb(conn, {"a": "bigint", "b": "bigint"}))


def test_chunk_ends_on_mariadb(plain_db):  # noqa: F811
    plain_db.sql("CREATE TABLE t (a bigint, b bigint, PRIMARY KEY (a, b))")
    with plain_db.conn.cursor() as cur:
        cur.executemany("INSERT INTO t VALUES (%s, %s)", ROWS)
    conn = plain_db.connect()
    try:
        cases(MyDb(conn, {"a": "bigint(20)", "b": "bigint(20)"}))
    finally:
        conn.close()
