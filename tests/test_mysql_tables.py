"""MySQL/MariaDB cdc sources of several tables, against a real server: a table without a primary
key never gets a row twice (its snapshot is the table as it was at the source's start position),
and one table's bad value does not stop the other tables."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.helpers import check_poison_isolated, read_parquet_rows, run, wait_until
from tests.mariadbserver import mariadb_binlog  # noqa: F401 (fixture)
from tests.test_mysql import binlog_db, streaming  # noqa: F401 (fixtures)

pytestmark = pytest.mark.spark


def offset(worker, name: str) -> str:
    rows = worker.catalog.query(
        f"SELECT committed_offset FROM connector_offsets WHERE connector = '{name}'"
    )[1]
    return (rows[0][0] or "") if rows else ""


def replayed(ops: list[tuple]) -> Counter:
    """The rows a change stream stands for: r and c add, d removes, u replaces the row with
    the same first column (the stream holds only an update's after image, so the test
    updates a row whose first column is unique)."""
    rows: Counter = Counter()
    for op, *row in ops:
        row = tuple(row)
        if op == "u":
            rows -= Counter([next(r for r in rows if r[0] == row[0])])
        if op in ("r", "c", "u"):
            rows[row] += 1
        elif op == "d":
            rows[row] -= 1
    return +rows


def test_a_keyless_table_changed_before_its_snapshot_gets_no_row_twice(worker, binlog_db):  # noqa: F811
    """A table without a primary key, snapshotted after a larger table: rows inserted, updated
    and deleted after CREATE but before its snapshot arrive once each (the snapshot is the
    table as it was when the source started; the binlog brings the rest)."""
    binlog_db.sql("CREATE TABLE big (id INT PRIMARY KEY, v INT)")
    binlog_db.sql("INSERT INTO big SELECT seq, seq FROM seq_1_to_30000")
    binlog_db.sql("CREATE TABLE nokey (a INT, b VARCHAR(8))")
    binlog_db.sql("INSERT INTO nokey VALUES (1, 'one'), (2, 'two'), (2, 'two'), (3, 'three')")
    run(
        worker,
        f"CREATE SOURCE CONNECTOR src FROM mysql INTO s WITH ({binlog_db.options()},"
        " table = 'big, nokey', 'batch.rows' = 1000)",
    )
    wait_until(
        lambda: '"table": "big"' in offset(worker, "src"),
        timeout=120,
        what="the snapshot of big to begin",
    )
    binlog_db.sql("INSERT INTO nokey VALUES (4, 'four'), (2, 'two')")
    binlog_db.sql("UPDATE nokey SET b = 'THREE' WHERE a = 3")
    binlog_db.sql("DELETE FROM nokey WHERE a = 1")
    assert '"table": "big"' in offset(worker, "src"), "the keyless table was read too early"
    wait_until(lambda: streaming(worker, "src"), timeout=240, what="the snapshots to end")
    want = Counter(binlog_db.sql("SELECT a, b FROM nokey"))
    path = worker.home / "streams/s_nokey"
    query = "SELECT __op, a, b FROM t ORDER BY __pos"
    wait_until(
        lambda: replayed(read_parquet_rows(path, query) or []) == want,
        timeout=90,
        what="the keyless stream to stand for the table",
        diagnose=lambda: read_parquet_rows(path, query),
    )
    ops = read_parquet_rows(path, query)
    snapshot = Counter((a, b) for op, a, b in ops if op == "r")
    assert snapshot == Counter([(1, "one"), (2, "two"), (2, "two"), (3, "three")])
    assert sorted(op for op, *_r in ops if op != "r") == ["c", "c", "d", "u"]


def test_a_change_one_table_cannot_read_leaves_the_other_tables_flowing(worker, binlog_db):  # noqa: F811
    """A DATE the binlog decoder cannot read ('2024-02-31', stored under ALLOW_INVALID_DATES)
    in one table of three: with errors.tolerance = 'all' it goes to the dead-letter stream,
    naming its table and position, and every other change flows, of that table too, even in
    the same transaction; with 'none' that table stops and the others go on."""
    for t in ("bad", "good1", "good2"):
        binlog_db.sql(f"CREATE TABLE {t} (id INT PRIMARY KEY, d DATE)")
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR tolerant FROM mysql INTO s WITH ({binlog_db.options()},
          table = 'bad, good*', 'errors.tolerance' = 'all',
          'errors.deadletter.stream' = 'rejects');
        CREATE SOURCE CONNECTOR strict FROM mysql INTO x WITH ({binlog_db.options()},
          table = 'bad, good*', 'errors.retry.max' = 0);
        """,
    )
    for name in ("tolerant", "strict"):
        wait_until(lambda n=name: streaming(worker, n), timeout=120, what=f"{name} streaming")
    conn = binlog_db.connect()
    with conn.cursor() as cur:
        cur.execute("SET autocommit = 0, sql_mode = 'ALLOW_INVALID_DATES'")
        cur.execute("INSERT INTO good1 VALUES (1, '2024-01-01')")
        conn.commit()
        cur.execute("INSERT INTO bad VALUES (1, '2024-02-31')")
        cur.execute("INSERT INTO good2 VALUES (1, '2024-01-02')")  # same transaction
        conn.commit()
        cur.execute("INSERT INTO bad VALUES (2, '2024-03-01')")
        cur.execute("INSERT INTO good1 VALUES (2, '2024-01-03')")
        conn.commit()
    conn.close()

    check_poison_isolated(worker, f"{binlog_db.name}.bad", "binlog")
