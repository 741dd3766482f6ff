"""Our binlog row decoder (connectors/mysql/rowdecode.py) against mysql-replication's, on the
same binlog of a real MariaDB: every type it reads, the type corpus's awkward values (NULLs,
limits, zero dates, every byte, 4-byte UTF-8, values over 1 MB), more precisions and character
sets, inserts, updates (before and after images) and deletes, whatever binlog_row_metadata
says; both must give the very same values. A table with a type it leaves (TIME) is left to
mysql-replication whole (MariaDB's JSON is LONGTEXT in the binlog: read)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from connectql.connectors.mysql import binlog, rowdecode
from connectql.connectors.mysql.client import connect
from connectql.connectors.mysql.source import ReaderConfig
from connectql.connectors.mysql.tables import columns_of
from tests.mariadbserver import mariadb_binlog  # noqa: F401 (fixture)
from tests.test_mysql import binlog_db  # noqa: F401 (fixture)
from tests.test_mysql_corpus import COLUMNS, ROWS

LEFT = {"js", "st", "tm", "b1", "b9", "b64", "pt", "ge", "ls", "pg", "mpt", "mls", "mpg", "gc"}
READ = [n for n in COLUMNS if n not in LEFT]
MORE = {  # precisions and character sets the corpus does not have
    "d50": "DECIMAL(5,0)", "d105": "DECIMAL(10,5)", "d189": "DECIMAL(18,9)",
    "d6530": "DECIMAL(65,30)", "d11": "DECIMAL(1,1)", "t1": "TIMESTAMP(1) NULL",
    "t3": "TIMESTAMP(3) NULL", "dt2": "DATETIME(2)", "dt5": "DATETIME(5)",
    "l1": "VARCHAR(10) CHARACTER SET latin1", "v300": "VARCHAR(300)",
    "big_enum": "ENUM(" + ", ".join(f"'e{i}'" for i in range(300)) + ")",
}  # fmt: skip
MORE_ROWS = [
    {"d50": Decimal("-12345"), "d105": Decimal("12345.67891"), "d189": Decimal("-0.000000001"),
     "d6530": Decimal("-" + "9" * 35 + "." + "9" * 30), "d11": Decimal("-0.9"),
     "t1": "2001-02-03 04:05:06.7", "t3": "2001-02-03 04:05:06.789", "dt2": "1999-12-31 23:59:59.99",
     "dt5": "2020-01-01 00:00:00.00001", "l1": "ÀÉÎõü", "v300": "x" * 300, "big_enum": "e299"},
    {"d50": Decimal("0"), "d105": Decimal("-0.00001"), "d189": Decimal("123456789.123456789"),
     "d6530": Decimal("1E-30"), "d11": Decimal("0.1"), "t1": "2030-01-01 00:00:00.0",
     "dt2": "2000-01-01 00:00:00.01", "l1": "", "v300": "é" * 300, "big_enum": "e0"},
]  # fmt: skip


def _changes(db, start: dict, fast: bool, monkeypatch) -> list:
    """Every change of the binlog from `start`, decoded by our decoder or mysql-replication's."""
    cfg = ReaderConfig(
        connection={"host": db.host, "port": db.port, "user": db.user, "database": db.name},
        schema=db.name, table=None, query=None, mode="cdc", connector="rowdecode-test",
    )  # fmt: skip
    with connect(cfg.connection) as conn:
        columns = {t: columns_of(conn, db.name, t) for t in ("fast", "left_alone")}
        ours = rowdecode.rows
        read: list[str] = []

        def counted(ev):
            found = ours(ev) if fast else None
            read.extend([(ev.table, ev.event_type)] if found is not None else [])
            return found

        with monkeypatch.context() as m:
            m.setattr(rowdecode, "rows", counted)
            walker = binlog.Walker(cfg, columns, reader=1)
            changes = [c for txn in walker.transactions(start, conn) for c in txn.changes]
        assert {t for t, _ in read} == ({"fast"} if fast else set()), read  # left_alone: TIME
        return changes


@pytest.mark.parametrize("metadata", ["NO_LOG", "MINIMAL", "FULL"])
def test_our_row_decoder_gives_what_mysql_replication_gives(binlog_db, metadata, monkeypatch):  # noqa: F811
    old = binlog_db.sql("SELECT @@global.binlog_row_metadata")[0][0]
    binlog_db.sql(f"SET GLOBAL binlog_row_metadata = '{metadata}'")
    conn = binlog_db.connect()  # a session that writes with that setting
    try:
        types = {**{n: COLUMNS[n] for n in READ}, **MORE}
        ddl = ", ".join(f"`{n}` {t}" for n, t in types.items())
        binlog_db.sql(f"CREATE TABLE fast (id INT PRIMARY KEY, {ddl}) CHARSET utf8mb4")
        binlog_db.sql("CREATE TABLE left_alone (id INT PRIMARY KEY, tm TIME(6), v INT)")
        start = binlog.current(binlog_db.conn)
        rows = [{n: r.get(n) for n in READ} for r in ROWS.values()] + MORE_ROWS
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_mode = 'ALLOW_INVALID_DATES'")  # the corpus' zero dates
            for i, row in enumerate(rows, start=1):
                names = ", ".join(f"`{n}`" for n in ["id", *row])
                marks = ", ".join(["%s"] * (len(row) + 1))
                cur.execute(f"INSERT INTO fast ({names}) VALUES ({marks})", [i, *row.values()])
            cur.execute("UPDATE fast SET vc = CONCAT(IFNULL(vc, ''), '+'), d2 = -d2, y = 1999")
            cur.execute("UPDATE fast SET id = id + 100 WHERE id = 2")
            cur.execute("DELETE FROM fast WHERE id IN (3, 7)")
            cur.execute("INSERT INTO left_alone VALUES (1, '-12:34:56.5', 2)")
            cur.execute("UPDATE left_alone SET v = 3")
        ours = _changes(binlog_db, start, True, monkeypatch)
        theirs = _changes(binlog_db, start, False, monkeypatch)
    finally:
        conn.close()
        binlog_db.sql(f"SET GLOBAL binlog_row_metadata = '{old}'")
    ops = [(t, op) for t, op, _v, _b in theirs]
    assert ops.count(("fast", "c")) == len(rows) and ("fast", "d") in ops, [
        c for c in theirs if c[1] not in "cud"
    ]
    assert ("left_alone", "u") in ops
    assert len(ours) == len(theirs)
    for mine, want in zip(ours, theirs, strict=True):
        assert mine[:2] == want[:2]
        for image, expected in zip(mine[2:], want[2:], strict=True):
            got = None if image is None else dict(image.items())
            differ = {k: (v, expected[k]) for k, v in (got or {}).items() if v != expected[k]}
            assert got == expected, differ
            assert repr(got) == repr(expected)  # a Decimal's exponent too


def test_a_table_of_a_type_it_does_not_read_is_left_to_mysql_replication():
    from types import SimpleNamespace

    from pymysqlreplication.constants import FIELD_TYPE

    json_col = SimpleNamespace(name="js", type=FIELD_TYPE.JSON)
    table = SimpleNamespace(columns=[json_col])
    ev = SimpleNamespace(event_type=0x1E, table_map={7: table}, table_id=7, number_of_columns=1)
    assert rowdecode.rows(ev) is None and table._cq_readers is rowdecode.UNREAD
