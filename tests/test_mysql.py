"""MySQL/MariaDB sources against real servers: change-data capture from the binary log (round trip
into PostgreSQL under concurrent changes, every type, schema changes, a purged binlog), the
incremental and bulk sources on a server without a binary log, and every bad input named."""

from __future__ import annotations

import datetime as dt
import os
import random
import subprocess
import sys
import threading
import time
import uuid
from decimal import Decimal
from pathlib import Path

import duckdb
import psycopg
import pymysql
import pytest

from connectql.errors import ConnectQLError, PlanError
from tests.helpers import (
    interrupt,
    lag_bytes_below,
    lag_of,
    read_parquet_rows,
    run,
    wait_until,
)
from tests.mariadbserver import create_database, mariadb_binlog  # noqa: F401 (fixture)
from tests.pgserver import create_database as create_pg_database

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[1]
SHARED = {"host": "127.0.0.1", "port": 3306, "user": "root"}  # the shared MariaDB: no binlog
ITEMS = (
    "CREATE TABLE items (id BIGINT PRIMARY KEY, name VARCHAR(32), qty INT, price DECIMAL(12,2),"
    " updated DATETIME(6))"
)


class My:
    """A database on a MariaDB server, with a pymysql connection to it."""

    def __init__(self, host: str, port: int, user: str = "root"):
        self.host, self.port, self.user = host, port, user
        self.name = f"cq_{uuid.uuid4().hex[:8]}"
        self.conn = self.connect(None)
        create_database(self.conn, self.name)
        self.conn.select_db(self.name)

    def connect(self, database: str | None = "", **kw):
        database = self.name if database == "" else database
        return pymysql.connect(
            host=self.host, port=self.port, user=self.user, database=database, autocommit=True, **kw
        )

    def sql(self, statement: str, params=None) -> list[tuple]:
        with self.conn.cursor() as cur:
            cur.execute(statement, params)
            return list(cur.fetchall())

    def options(self, **extra) -> str:
        opts = {"host": self.host, "port": self.port, "user": self.user, "database": self.name}
        opts.update(extra)
        return ", ".join(
            f"'{k}' = {v}" if isinstance(v, int) else f"'{k}' = '{v}'" for k, v in opts.items()
        )

    def drop(self) -> None:
        self.sql(f"DROP DATABASE IF EXISTS `{self.name}`")
        self.conn.close()


@pytest.fixture
def binlog_db(mariadb_binlog):  # noqa: F811
    db = My(mariadb_binlog.host, mariadb_binlog.port)
    yield db
    db.drop()


@pytest.fixture
def plain_db():
    db = My(**SHARED)
    yield db
    db.drop()


@pytest.fixture
def pg_db(pg_shared):
    name = f"cq_{uuid.uuid4().hex[:8]}"
    info = create_pg_database(pg_shared.conninfo(), name)
    yield name, info
    with psycopg.connect(pg_shared.conninfo(), autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def pg_rows(info: str, statement: str):
    with psycopg.connect(info, autocommit=True) as c:
        try:
            return c.execute(statement).fetchall()
        except psycopg.errors.UndefinedTable:
            return None


def state(worker, name):
    return worker.catalog.get_connector(name)


def streaming(worker, name: str) -> bool:
    offsets = worker.catalog.query(
        f"SELECT committed_offset FROM connector_offsets WHERE connector = '{name}'"
    )[1]
    return bool(offsets) and '"phase": "stream"' in (offsets[0][0] or "")


# ------------------------------------------------------------------ change-data capture


class Writer(threading.Thread):
    """Commits random inserts, updates (some changing the primary key) and deletes."""

    def __init__(self, db: My, first_new_id: int):
        super().__init__(daemon=True)
        self.conn, self.next_id = db.connect(), first_new_id
        self.stop_at: float | None = None
        self.count = 0
        self.rng = random.Random(7)

    def run(self) -> None:
        with self.conn.cursor() as cur:
            while self.stop_at is None or time.monotonic() < self.stop_at:
                self.step(cur)
                self.count += 1
                time.sleep(0.005)
        self.conn.close()

    def step(self, cur) -> None:
        r, some = self.rng.random(), self.rng.randint(1, self.next_id)
        if r < 0.4:
            self.next_id += 1
            cur.execute(
                "INSERT INTO items VALUES (%s, %s, %s, %s, NOW(6))",
                (self.next_id, f"new {self.next_id}", r * 100, Decimal("1.25")),
            )
        elif r < 0.75:
            cur.execute("UPDATE items SET qty = qty + 1, updated = NOW(6) WHERE id = %s", (some,))
        elif r < 0.85:
            self.next_id += 1
            cur.execute("UPDATE items SET id = %s WHERE id = %s", (self.next_id, some))
        else:
            cur.execute("DELETE FROM items WHERE id = %s", (some,))


@pytest.fixture(params=["postgres", "mysql"])
def target(request, mariadb_binlog):  # noqa: F811
    """(sink connector options, fetch(SQL) -> rows or None) of a fresh target database: on the
    shared PostgreSQL, or on the private MariaDB beside the source (MariaDB -> MariaDB)."""
    if request.param == "postgres":
        name, info = request.getfixturevalue("pg_db")
        yield (
            f"TO postgres FROM items WITH (host = '127.0.0.1', database = '{name}'",
            (lambda q: pg_rows(info, q)),
        )
        return
    db = My(mariadb_binlog.host, mariadb_binlog.port)

    def fetch(q):
        try:
            return db.sql(q)
        except pymysql.err.ProgrammingError:  # no table yet
            return None

    yield f"TO mysql FROM items WITH ({db.options()}", fetch
    db.drop()


def test_cdc_keeps_a_target_table_equal_under_concurrent_changes(worker, binlog_db, target):
    """10,000 rows and a writer changing them (primary keys too) during the snapshot and after:
    the target (PostgreSQL, or another MariaDB database) ends equal to the source, row by row."""
    sink, fetch = target
    binlog_db.sql(ITEMS)
    binlog_db.sql(
        "INSERT INTO items SELECT seq, CONCAT('item ', seq), seq % 100, seq * 0.25,"
        " '2024-01-01' + INTERVAL seq SECOND FROM seq_1_to_10000"
    )
    writer = Writer(binlog_db, 10_000)
    writer.start()
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR src FROM mysql INTO items WITH ({binlog_db.options()},
          table = 'items', 'batch.rows' = 2000);
        CREATE SINK CONNECTOR dst {sink}, table = 'items');
        """,
    )
    wait_until(lambda: streaming(worker, "src"), timeout=120, what="the snapshot to end")
    writer.stop_at = time.monotonic() + 3
    writer.join()
    assert writer.count > 100
    query = "SELECT id, name, qty, price, updated FROM items ORDER BY id"
    want = [tuple(r) for r in binlog_db.sql(query)]
    wait_until(
        lambda: [tuple(r) for r in fetch(query) or []] == want,
        timeout=120,
        what="the target to equal the source",
    )
    ops = read_parquet_rows(
        worker.home / "streams/items", "SELECT __op, count(*) FROM t GROUP BY 1"
    )
    assert {op for op, _n in ops} == {"r", "c", "u", "d"}
    assert state(worker, "src").state == "RUNNING" and state(worker, "dst").state == "RUNNING"
    # caught up: the source's lag_bytes is the binlog after its last batch; the sink's lag,
    # records
    wait_until(lambda: lag_bytes_below(worker, "src", 1 << 20), what="the binlog lag")
    assert lag_of(worker, "src") is None


TYPES = (
    "CREATE TABLE t (id INT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, iu INT UNSIGNED,"
    " bu BIGINT UNSIGNED, mi MEDIUMINT, d DECIMAL(20,6), f FLOAT, db DOUBLE, c CHAR(3),"
    " v VARCHAR(20), tx TEXT, e ENUM('new','paid'), s SET('a','b','c'), dd DATE,"
    " dtm DATETIME(6), ts TIMESTAMP(6) NULL, tm TIME(6), y YEAR, b1 BIT(1), b8 BIT(8),"
    " bin BINARY(2), vb VARBINARY(8), bl BLOB, j JSON)"
)
VALUES = (
    "(%s, -128, 255, 4294967295, 18446744073709551615, -8388608, 12345678901234.123456, 1.5,"
    " 2.25, 'abc', 'héllo ✓', 'long text', 'paid', 'a,c', '2024-02-29',"
    " '2024-01-02 03:04:05.123456', '2024-05-06 07:08:09.654321', '12:34:56.5', 2024, 1, 200,"
    " x'00ff', x'010203', x'cafe', '{\"k\": [1, 2]}')"
)
NULLS = "(%s" + ", NULL" * 24 + ")"


def test_every_type_reads_the_same_from_the_snapshot_and_the_binlog(worker, binlog_db):
    binlog_db.sql(TYPES)
    binlog_db.sql(f"INSERT INTO t VALUES {VALUES}", (1,))
    binlog_db.sql(f"INSERT INTO t VALUES {NULLS}", (2,))
    run(
        worker,
        f"CREATE SOURCE CONNECTOR src FROM mysql INTO typed WITH ({binlog_db.options()},"
        " table = 't')",
    )
    wait_until(lambda: streaming(worker, "src"), timeout=90, what="the snapshot to end")
    binlog_db.sql(f"INSERT INTO t VALUES {VALUES}", (3,))
    binlog_db.sql(f"INSERT INTO t VALUES {NULLS}", (4,))
    path = worker.home / "streams/typed"
    wait_until(lambda: (read_parquet_rows(path, "SELECT count(*) FROM t") or [[0]])[0][0] == 4)
    cols = (
        "ti, tu, iu, bu, mi, d, f, db, c, v, tx, e, s, dd, dtm, ts, tm, y, b1, b8, bin, vb, bl, j"
    )
    rows = read_parquet_rows(path, f"SELECT id, __op, {cols} FROM t ORDER BY id")
    assert [r[1] for r in rows] == ["r", "r", "c", "c"]
    assert rows[0][2:] == rows[2][2:] and rows[1][2:] == rows[3][2:]  # snapshot == binlog
    assert rows[1][2:] == (None,) * 24
    assert rows[0][2:] == (
        -128,
        255,
        4294967295,
        Decimal("18446744073709551615"),
        -8388608,
        Decimal("12345678901234.123456"),
        1.5,
        2.25,
        "abc",
        "héllo ✓",
        "long text",
        "paid",
        "a,c",
        dt.date(2024, 2, 29),
        dt.datetime(2024, 1, 2, 3, 4, 5, 123456),
        dt.datetime(2024, 5, 6, 7, 8, 9, 654321),  # UTC (the stream stores it without zone)
        "12:34:56.500000",
        2024,
        True,
        200,
        b"\x00\xff",
        b"\x01\x02\x03",
        b"\xca\xfe",
        '{"k": [1, 2]}',
    )


def test_schema_change_modes_while_streaming(worker, binlog_db):
    binlog_db.sql("CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(8))")
    binlog_db.sql("INSERT INTO t VALUES (1, 'one')")
    for mode in ("evolve", "fail", "ignore"):
        run(
            worker,
            f"CREATE SOURCE CONNECTOR s_{mode} FROM mysql INTO t_{mode} WITH"
            f" ({binlog_db.options()}, table = 't', 'schema.change' = '{mode}')",
        )
    for mode in ("evolve", "fail", "ignore"):
        wait_until(lambda m=mode: streaming(worker, f"s_{m}"), timeout=90, what=f"{mode} stream")
    binlog_db.sql("ALTER TABLE t ADD COLUMN b INT")
    binlog_db.sql("INSERT INTO t VALUES (2, 'two', 22)")

    def rows(mode):
        cols = "id, a, b, __op" if mode == "evolve" else "id, a, __op"
        path = worker.home / f"streams/t_{mode}"
        try:  # before the first file with b is committed, b is unknown
            return read_parquet_rows(path, f"SELECT {cols} FROM t ORDER BY id")
        except duckdb.BinderException:
            return None

    evolved = lambda: "`b` INT" in worker.catalog.get_stream("t_evolve").schema  # noqa: E731
    wait_until(evolved, timeout=90, what="the stream to gain column b")
    wait_until(lambda: len(rows("evolve") or []) == 2, timeout=90, what="the evolved stream")
    assert rows("evolve") == [(1, "one", None, "r"), (2, "two", 22, "c")]
    wait_until(lambda: len(rows("ignore") or []) == 2, timeout=60, what="the ignoring stream")
    assert rows("ignore") == [(1, "one", "r"), (2, "two", "c")]
    wait_until(lambda: state(worker, "s_fail").state == "FAILED", timeout=60, what="FAILED")
    error = state(worker, "s_fail").last_error
    assert "SchemaChanged" in error and "new column(s) b" in error and "t" in error


def test_a_paused_cdc_source_leaves_no_binlog_dump_behind(worker, binlog_db):
    """While streaming, a thread follows the binlog over a dump that stays open; once the
    connector is paused no dump is left on the server (one left behind would fight the next
    for its server id), and resuming follows the log again."""

    def dumps() -> int:
        query = (
            "SELECT count(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'"
        )
        return binlog_db.sql(query)[0][0]

    binlog_db.sql("CREATE TABLE t (id INT PRIMARY KEY)")
    run(
        worker,
        f"CREATE SOURCE CONNECTOR s FROM mysql INTO t WITH ({binlog_db.options()}, table = 't')",
    )
    wait_until(lambda: streaming(worker, "s"), timeout=90, what="the stream phase")
    binlog_db.sql("INSERT INTO t VALUES (1)")
    stream = worker.home / "streams/t"
    wait_until(lambda: read_parquet_rows(stream, "SELECT count(*) FROM t") == [(1,)], timeout=60)
    assert dumps() >= 1
    run(worker, "PAUSE CONNECTOR s")
    wait_until(lambda: dumps() == 0, timeout=15, what="the binlog dump to end", diagnose=dumps)
    run(worker, "RESUME CONNECTOR s")
    binlog_db.sql("INSERT INTO t VALUES (2)")
    wait_until(lambda: read_parquet_rows(stream, "SELECT count(*) FROM t") == [(2,)], timeout=60)


def test_a_purged_binlog_fails_the_connector_and_reset_starts_over(worker, binlog_db):
    binlog_db.sql("CREATE TABLE t (id INT PRIMARY KEY)")
    binlog_db.sql("INSERT INTO t VALUES (1), (2)")
    run(
        worker,
        f"CREATE SOURCE CONNECTOR src FROM mysql INTO t WITH ({binlog_db.options()}, table = 't')",
    )
    wait_until(lambda: streaming(worker, "src"), timeout=90, what="streaming")
    run(worker, "PAUSE CONNECTOR src")
    for i in (3, 4):
        binlog_db.sql(f"INSERT INTO t VALUES ({i})")
        binlog_db.sql("FLUSH BINARY LOGS")
    current = binlog_db.sql("SHOW MASTER STATUS")[0][0]

    def purged():  # the server keeps a file a binlog dump (ours, just closed) still reads
        binlog_db.sql(f"PURGE BINARY LOGS TO '{current}'")
        return binlog_db.sql("SHOW BINARY LOGS")[0][0] == current

    wait_until(purged, timeout=30, what="the old binlog files to be purged")
    run(worker, "RESUME CONNECTOR src")
    wait_until(lambda: state(worker, "src").state == "FAILED", timeout=60, what="FAILED")
    error = state(worker, "src").last_error
    assert "purged" in error and "RESET CONNECTOR src OFFSETS" in error
    run(worker, "RESET CONNECTOR src OFFSETS; RESTART CONNECTOR src")
    path = worker.home / "streams/t"
    wait_until(
        lambda: (
            read_parquet_rows(path, "SELECT count(DISTINCT id) FROM t WHERE __op = 'r'") == [(4,)]
        ),
        timeout=90,
        what="a new snapshot",
    )


# ------------------------------------------------------------------ incremental and bulk


def test_incremental_and_bulk_on_a_server_without_a_binary_log(worker, plain_db):
    plain_db.sql(
        "CREATE TABLE ev (id INT AUTO_INCREMENT PRIMARY KEY, v DECIMAL(8,2),"
        " at DATETIME(3) DEFAULT NOW(3))"
    )
    plain_db.sql("INSERT INTO ev (v) SELECT seq / 4 FROM seq_1_to_500")
    run(
        worker,
        f"""
        CREATE SOURCE CONNECTOR inc FROM mysql INTO ev WITH ({plain_db.options()},
          table = 'ev', mode = 'incremental', 'incrementing.column' = 'id',
          'poll.interval.ms' = 200, 'batch.rows' = 150, 'tasks.max' = 2);
        CREATE SOURCE CONNECTOR big FROM mariadb INTO big WITH ({plain_db.options()},
          query = 'SELECT id, v * 2 AS v2 FROM ev WHERE id <= 100', mode = 'bulk', run = 'once');
        """,
    )
    path = worker.home / "streams/ev"
    counts = "SELECT count(*), count(DISTINCT id), sum(v) FROM t"
    wait_until(lambda: (read_parquet_rows(path, counts) or [[0]])[0][0] == 500, timeout=90)
    plain_db.sql("INSERT INTO ev (v) SELECT seq FROM seq_1_to_20")
    wait_until(lambda: (read_parquet_rows(path, counts) or [[0]])[0][0] == 520, timeout=60)
    total = plain_db.sql("SELECT count(*), count(DISTINCT id), sum(v) FROM ev")[0]
    assert read_parquet_rows(path, counts) == [tuple(total)]
    worker.wait_for_once(["big"])
    assert read_parquet_rows(worker.home / "streams/big", "SELECT count(*), sum(v2) FROM t") == [
        (100, Decimal("2525.00"))
    ]
    assert state(worker, "big").state == "FINISHED"


def test_lag_counts_what_an_incremental_source_and_a_sink_have_not_read(worker, plain_db, tmp_path):
    """An incremental source's lag is the rows after its last batch (500 rows, 200 a batch, one
    batch every 2 s: 300, 100, 0); a sink's is the records of its stream not yet read."""
    plain_db.sql("CREATE TABLE lg (id INT PRIMARY KEY, v INT)")
    plain_db.sql("INSERT INTO lg SELECT seq, seq FROM seq_1_to_500")
    run(
        worker,
        f"""
        SET 'stream.retention.check.interval' = '1 s';
        CREATE SOURCE CONNECTOR lagged FROM mysql INTO lg WITH ({plain_db.options()},
          table = 'lg', mode = 'incremental', 'incrementing.column' = 'id',
          'batch.rows' = 200, 'trigger.interval' = '2 seconds');
        """,
    )
    seen = []

    def lag_now():
        lag = lag_of(worker, "lagged")
        if lag is not None and (not seen or seen[-1] != lag):
            seen.append(lag)
        return seen and seen[-1] == 0

    wait_until(lag_now, timeout=90, what="the source's lag down to 0")
    assert seen[0] in (300, 100) and seen == sorted(seen, reverse=True), seen
    run(worker, f"CREATE SINK CONNECTOR out TO file FROM lg WITH (path = '{tmp_path / 'out'}')")
    wait_until(lambda: lag_of(worker, "out") == 0, timeout=90, what="the sink's lag at 0")
    run(worker, "PAUSE CONNECTOR out")
    plain_db.sql("INSERT INTO lg SELECT seq, seq FROM seq_501_to_520")
    wait_until(lambda: lag_of(worker, "out") == 20, timeout=60, what="the paused sink's lag")
    run(worker, "RESUME CONNECTOR out")
    wait_until(lambda: lag_of(worker, "out") == 0, timeout=90, what="the sink's lag down to 0")


# ------------------------------------------------------------------ bad input


def test_cdc_on_a_server_without_binary_logging_names_the_variable(worker, plain_db):
    plain_db.sql("CREATE TABLE t (id INT PRIMARY KEY)")
    with pytest.raises(PlanError, match="log_bin = ON, but it is OFF"):
        run(
            worker,
            f"CREATE SOURCE CONNECTOR c FROM mysql INTO s WITH ({plain_db.options()}, table = 't')",
        )
    assert worker.catalog.connectors() == []


def test_bad_input_is_named_and_changes_nothing(worker, binlog_db, mariadb_binlog):  # noqa: F811
    binlog_db.sql("CREATE TABLE t (id INT PRIMARY KEY, g GEOMETRY)")
    binlog_db.sql("CREATE TABLE u (id INT PRIMARY KEY, d DECIMAL(65,2))")
    binlog_db.sql("CREATE TABLE ok (id INT PRIMARY KEY)")
    for user, grants in (
        ("noslave", "SELECT, BINLOG MONITOR"),
        ("nomonitor", "SELECT, REPLICATION SLAVE"),
    ):
        binlog_db.sql(f"CREATE OR REPLACE USER '{user}'@'%' IDENTIFIED BY 'pw-{user}'")
        binlog_db.sql(f"GRANT {grants} ON *.* TO '{user}'@'%'")
    o = binlog_db.options
    cases = [
        (o(table="nope"), "table .*nope does not exist \\(tables in .*: ok, t, u\\)"),
        (o(table="ok", password="s3cret-pw"), "access denied for user 'root'"),
        (o(table="ok", port=1), "connection refused"),
        (o(table="ok", user="noslave", password="pw-noslave"), "REPLICATION SLAVE"),
        (o(table="ok", user="nomonitor", password="pw-nomonitor"), "REPLICATION CLIENT"),
        (o(table="ok", mode="incremental", **{"incrementing.column": "nope"}), "no column nope"),
        (o(table="ok", mode="incremental"), "needs incrementing.column"),
        (o(query="SELECT nope FROM ok", mode="bulk"), "the query fails: Unknown column 'nope'"),
    ]
    for options, message in cases:
        with pytest.raises(ConnectQLError, match=message) as e:
            run(worker, f"CREATE SOURCE CONNECTOR c FROM mysql INTO s WITH ({options})")
        assert "s3cret-pw" not in str(e.value) and "pw-no" not in str(e.value)
    assert worker.catalog.connectors() == [] and worker.catalog.streams() == []


# ------------------------------------------------------------------ the flagship example


def test_the_mysql_to_postgres_example_runs_as_the_readme_says(tmp_path, binlog_db, pg_db):
    """examples/mysql_to_postgres.sql through `connectql run`, with the README's user setup:
    the snapshot arrives, a later change follows, Ctrl-C stops it with a full progress bar."""
    pg_name, pg_info = pg_db
    binlog_db.sql("CREATE OR REPLACE USER 'cdc'@'%' IDENTIFIED BY 'cdc-pw'")
    binlog_db.sql("GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'cdc'@'%'")
    binlog_db.sql("CREATE TABLE orders (id BIGINT PRIMARY KEY, amount DECIMAL(10,2), note TEXT)")
    binlog_db.sql("INSERT INTO orders SELECT seq, seq / 10, 'n' FROM seq_1_to_3000")
    script = (ROOT / "examples/mysql_to_postgres.sql").read_text()
    script = script.replace("'shop'", f"'{binlog_db.name}'").replace("'analytics'", f"'{pg_name}'")
    (tmp_path / "sync.sql").write_text(script)
    env = {**os.environ, "CDC_PASSWORD": "cdc-pw", "COLUMNS": "200"}
    env.update(MYSQL_HOST=binlog_db.host, MYSQL_TCP_PORT=str(binlog_db.port), PGHOST="127.0.0.1")
    env.update(PGPORT="5432", PGUSER="postgres")  # pg_shared: the machine's PostgreSQL
    proc = subprocess.Popen(
        [sys.executable, "-m", "connectql.cli", "--home", str(tmp_path / "h"), "run", "sync.sql"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    count = "SELECT count(*), sum(amount) FROM orders"
    try:
        wait_until(lambda: pg_rows(pg_info, count) == [(3000, Decimal("450150.00"))], timeout=180)
        binlog_db.sql("UPDATE orders SET amount = 0 WHERE id = 3000")
        wait_until(lambda: pg_rows(pg_info, count) == [(3000, Decimal("449850.00"))], timeout=60)
    except AssertionError:
        pass  # shown below with the command's output
    finally:
        out, err = interrupt(proc)
    assert proc.returncode == 0, err
    assert pg_rows(pg_info, count) == [(3000, Decimal("449850.00"))], out + err
    assert "created source connector orders_cdc" in out and "RUNNING" in out
    assert "100%" in out  # the snapshot's progress bar, full
    assert "cdc-pw" not in out + err
