"""cdc's columnar change path (pgcolumns, issue 55) against the message-by-message one it stands
beside: the same pgoutput messages of a real PostgreSQL, read both ways, give equal change rows
(values, types, order, change columns) and equal dead letters or errors. Every type of the
pgoutput type corpus, awkward texts, NULLs, NaN and infinities; unchanged TOAST values, key
changes, REPLICA IDENTITY FULL, deletes; columns added and a column's type changed within the
batch (schema.change fail and ignore); unreadable values (errors.tolerance none and all);
a keyless table's snapshot filter; other tables' changes between; the spool's framing (a
transaction's Relation messages first) and the SQL peek's (a Relation once per session)."""

from __future__ import annotations

import re
import secrets

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from connectql.connectors.postgres import cdc, pgcolumns
from connectql.connectors.postgres.pgoutput import Decoder
from connectql.connectors.postgres.source import ReaderConfig
from connectql.connectors.postgres.tables import describe_table
from connectql.errors import SchemaChanged
from connectql.toolkit.source import DeadLetter
from tests.pgserver import create_database
from tests.test_pgoutput import COLUMNS, full_row, insert, sparse_row

DB = "pgcolumns_test"
_SIMPLE = {
    "SMALLINT": ShortType(), "INT": IntegerType(), "BIGINT": LongType(), "FLOAT": FloatType(),
    "DOUBLE": DoubleType(), "BOOLEAN": BooleanType(), "STRING": StringType(),
    "DATE": DateType(), "BINARY": BinaryType(), "TIMESTAMP": TimestampType(),
    "TIMESTAMP_NTZ": TimestampNTZType(),
}  # fmt: skip
META = [("__op", StringType()), ("__ts_ms", LongType()), ("__pos", StringType()),
        ("__source", StringType()), ("__unchanged", StringType())]  # fmt: skip


def spark_type(ddl: str) -> DataType:
    """The Spark type of the DDL the source's describe gives (no Spark session needed)."""
    if ddl.startswith("ARRAY<"):
        return ArrayType(spark_type(ddl[6:-1]))
    m = re.match(r"DECIMAL\((\d+),(\d+)\)", ddl)
    return DecimalType(int(m.group(1)), int(m.group(2))) if m else _SIMPLE[ddl]


@pytest.fixture(scope="module")
def info(pg_logical):  # noqa: F811
    return create_database(pg_logical.conninfo(), DB)


@pytest.fixture
def conns(info, pg_logical):
    """(writer, reader, slot, config): the reader's session prints values as the source's."""
    with psycopg.connect(info, autocommit=True) as w, psycopg.connect(info, autocommit=True) as r:
        w.execute("SET synchronous_commit = on")
        w.execute("SET TimeZone = 'Asia/Kolkata'")
        for setting in ("TimeZone = 'UTC'", "DateStyle = 'ISO'", "IntervalStyle = 'postgres'",
                        "bytea_output = 'hex'", "extra_float_digits = 3"):  # fmt: skip
            r.execute(f"SET {setting}")
        slot = f"cols_{secrets.token_hex(4)}"
        r.execute(f"CREATE PUBLICATION {slot} FOR ALL TABLES")
        r.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
        cfg = ReaderConfig(
            connection={"host": pg_logical.host, "port": pg_logical.port, "user": "postgres",
                        "database": DB},
            schema="public", table=None, query=None, mode="cdc", slot=slot,
        )  # fmt: skip
        try:
            yield w, r, slot, cfg
        finally:
            r.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            r.execute(f"DROP PUBLICATION {slot}")


@pytest.fixture
def made(monkeypatch) -> list:
    """The tables whose rows the columnar path made (not handed to the other way whole)."""
    tables, real = [], pgcolumns.table_batch

    def table_batch(batch, rows, groups, sources):
        out = real(batch, rows, groups, sources)
        tables.append(rows.table)
        return out

    monkeypatch.setattr(pgcolumns, "table_batch", table_batch)
    return tables


def schemas_of(reader, tables: list[str]) -> tuple[dict, dict]:
    """Each table's stream schema and key, as the source describes them now."""
    schemas, keys = {}, {}
    for t in tables:
        described = describe_table(reader, "public", t, "test")
        fields = [StructField(n, spark_type(s)) for n, _pg, s in described.columns]
        schemas[t] = StructType(fields + [StructField(n, k) for n, k in META])
        keys[t] = list(described.key)
    return schemas, keys


def read(cfg, reader, txns, schemas, keys, columnar: bool, monkeypatch, **kw) -> list:
    """change_batches' output (or the error it raised), one way or the other."""
    with monkeypatch.context() as m:
        if not columnar:
            m.setattr(cdc, "_collect_columns", _one_by_one)
        try:
            return list(
                cdc.change_batches(
                    cfg, schemas, keys, list(txns), Decoder(cdc.type_names(reader)), **kw
                )  # fmt: skip
            )
        except Exception as e:  # noqa: BLE001 (compared)
            return [f"{type(e).__name__}: {e}"]


def _one_by_one(changes, ones, txns, decoder, seen) -> dict:
    cdc._collect(changes, ones, list(txns), decoder, seen)
    return {}


def comparable(out: list) -> list:
    """Batches as (table, their rows as Python values), dead letters by their fields."""
    done = []
    for item in out:
        if isinstance(item, DeadLetter):
            done.append(("dead", item.raw, item.error, item.offset, item.error_class))
        elif isinstance(item, tuple):
            table, batch = item
            assert isinstance(batch, pa.RecordBatch)
            done.append((table, batch.schema, _nan_free(batch.to_pylist())))
        else:
            done.append(item)
    return done


def _nan_free(value):
    """NaN (which equals nothing, not even itself) as a marker that equals itself."""
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, list):
        return [_nan_free(v) for v in value]
    if isinstance(value, dict):
        return {k: _nan_free(v) for k, v in value.items()}
    return value


def both_ways(cfg, reader, slot, tables, monkeypatch, spool=False, **kw) -> list:
    """The slot's committed transactions read both ways (as the spool frames them, each
    transaction with its Relation messages first, or as the SQL peek gives them); asserts
    they agree, returns the columnar way's output."""
    schemas, keys = schemas_of(reader, tables)
    end = cdc.current_lsn(reader)
    txns = list(cdc.transactions(reader, slot, 0, end))
    if spool:
        txns = spooled(txns)
    columnar = read(cfg, reader, txns, schemas, keys, True, monkeypatch, **kw)
    one_by_one = read(cfg, reader, txns, schemas, keys, False, monkeypatch, **kw)
    assert_same(comparable(columnar), comparable(one_by_one))
    return columnar


def assert_same(a: list, b: list) -> None:
    """Equal outputs; else the first rows and columns that differ."""
    if a == b:
        return
    assert len(a) == len(b), (len(a), len(b), a[:1], b[:1])
    for x, y in zip(a, b, strict=True):
        assert type(x) is type(y) and x[:2] == y[:2], (x[:2], y[:2])
        if len(x) == 3 and x[2] != y[2]:
            assert len(x[2]) == len(y[2]), (x[0], len(x[2]), len(y[2]))
            diff = [
                (i, k, rx[k], ry[k])
                for i, (rx, ry) in enumerate(zip(x[2], y[2], strict=True))
                for k in rx
                if rx[k] != ry[k]
            ]
            assert not diff, (x[0], diff[:10])
        else:
            assert x == y


def spooled(txns: list) -> list:
    """The transactions as the tailer spools them: each one's Relation messages (the last of
    each relation before it) first, then its changes."""
    last: dict[bytes, bytes] = {}
    out = []
    for commit, ts, xid, messages in txns:
        used, changes = {}, []
        for m in messages:
            if m[:1] == b"R":
                last[m[1:5]] = m
            else:
                used.setdefault(m[1:5], last[m[1:5]])
                changes.append(m)
        out.append((commit, ts, xid, [*used.values(), *changes]))
    return out


def rows_of(out: list, table: str) -> list[dict]:
    return [r for t, batch in (o for o in out if isinstance(o, tuple)) if t == table
            for r in batch.to_pylist()]  # fmt: skip


# ---------------------------------------------------------------------------------------------


def test_every_type_and_change_kind_reads_the_same_both_ways(conns, made, monkeypatch):
    w, r, slot, cfg = conns
    w.execute('DROP TABLE IF EXISTS "All Types", big, full_id, other')
    w.execute(
        sql.SQL('CREATE TABLE "All Types" ({})').format(
            sql.SQL(", ").join(
                sql.SQL("{} " + ddl).format(sql.Identifier(c)) for c, ddl, _p in COLUMNS
            )
        )
    )
    w.execute("CREATE TABLE big (id int PRIMARY KEY, n int, doc text)")
    w.execute("CREATE TABLE full_id (id int PRIMARY KEY, v text, ts timestamptz)")
    w.execute("ALTER TABLE full_id REPLICA IDENTITY FULL")
    w.execute("CREATE TABLE other (id int)")
    big = secrets.token_hex(60_000)  # out of line (TOAST), not compressible
    with w.transaction():
        for i in range(1, 31):
            insert(w, "All Types", full_row(i) if i % 3 else sparse_row(i))
        w.execute("INSERT INTO other VALUES (1)")
        w.execute("INSERT INTO big SELECT g, g, %s FROM generate_series(1, 5) g", (big,))
        w.execute("INSERT INTO full_id SELECT g, 'v' || g, now() FROM generate_series(1, 5) g")
    with w.transaction():
        w.execute('UPDATE "All Types" SET i = i - 1, t = t || \'!\' WHERE "Order Id" % 2 = 0')
        w.execute('UPDATE "All Types" SET "Order Id" = "Order Id" + 100 WHERE "Order Id" < 4')
        w.execute('DELETE FROM "All Types" WHERE "Order Id" BETWEEN 20 AND 24')
        w.execute("UPDATE big SET n = n + 1 WHERE id <= 3")  # doc unchanged: not sent
        w.execute("UPDATE big SET id = id + 10, n = 0 WHERE id = 4")
        w.execute("UPDATE full_id SET v = 'w' WHERE id <= 2")
        w.execute("DELETE FROM full_id WHERE id = 5")
        w.execute("DELETE FROM big WHERE id = 5")
        w.execute("INSERT INTO other VALUES (2)")
    for i in range(3):  # small transactions: sequence numbers start again in each
        w.execute(f"INSERT INTO big VALUES ({100 + i}, {i}, 'x{i}')")
    tables = ["All Types", "big", "full_id"]
    for spool in (False, True):
        out = both_ways(cfg, r, slot, tables, monkeypatch, spool=spool)
        got = rows_of(out, "big")
        unchanged = [x for x in got if x["__unchanged"]]
        assert [(x["id"], x["doc"], x["__unchanged"]) for x in unchanged] == [
            (i, None, '["doc"]')
            for i in (1, 2, 3, 4, 14)  # 4 -> 14: a key change
        ]
        at: dict[str, list] = {}
        for x in got:
            at.setdefault(x["__pos"], []).append((x["__op"], x["id"]))
        assert [("d", 4), ("c", 14)] in at.values()  # the key change: a delete, an insert
        ops = [x["__op"] for x in rows_of(out, "All Types")]
        assert ops.count("c") == 30 + 3 and ops.count("d") == 5 + 3
        assert [x["__pos"] for x in rows_of(out, "All Types")] == sorted(
            x["__pos"] for x in rows_of(out, "All Types")
        )
    # every table's plain changes took the columnar way (the others merged in order)
    assert sorted(set(made)) == ["public.All Types", "public.big", "public.full_id"]


def test_columns_added_and_retyped_within_a_batch(conns, made, monkeypatch):
    w, r, slot, cfg = conns
    w.execute("DROP TABLE IF EXISTS evolving")
    w.execute("CREATE TABLE evolving (id int PRIMARY KEY, a int, s text)")
    tables = ["evolving"]
    schemas_before = schemas_of(r, tables)
    w.execute("INSERT INTO evolving SELECT g, g, 's' || g FROM generate_series(1, 20) g")
    w.execute("ALTER TABLE evolving ADD COLUMN extra text")
    w.execute("INSERT INTO evolving SELECT g, g, 's', 'e' FROM generate_series(21, 40) g")
    w.execute("ALTER TABLE evolving ALTER COLUMN a TYPE bigint")
    w.execute("UPDATE evolving SET a = a + 1 WHERE id > 35")
    end = cdc.current_lsn(r)
    txns = list(cdc.transactions(r, slot, 0, end))
    for change in ("fail", "ignore"):
        c = ReaderConfig(**{**cfg.__dict__, "schema_change": change})
        outs = [read(c, r, txns, *schemas_before, way, monkeypatch) for way in (True, False)]
        assert comparable(outs[0]) == comparable(outs[1])
        if change == "fail":
            assert isinstance(outs[0][0], str) and SchemaChanged.__name__ in outs[0][0]
        else:
            assert len(rows_of(outs[0], "evolving")) == 45
    assert not made  # a column's type changed: the whole table the other way


def test_unreadable_values_fail_or_are_dead_letters_alike(conns, monkeypatch):
    w, r, slot, cfg = conns
    w.execute("DROP TABLE IF EXISTS poison")
    w.execute("CREATE TABLE poison (id int PRIMARY KEY, xs int[], ts timestamp, d date)")
    w.execute("INSERT INTO poison SELECT g, ARRAY[g], '2024-01-01', '2024-01-02'"
              " FROM generate_series(1, 10) g")  # fmt: skip
    w.execute("INSERT INTO poison VALUES (11, '{{1,2},{3,4}}', 'infinity', '-infinity')")
    w.execute("INSERT INTO poison VALUES (12, '{5}', '20000-01-01', '0044-03-15 BC')")
    w.execute("UPDATE poison SET xs = '{{7}}' WHERE id = 3")
    for tolerance in ("none", "all"):
        c = ReaderConfig(**{**cfg.__dict__, "tolerance": tolerance})
        out = both_ways(c, r, slot, ["poison"], monkeypatch, tolerant=tolerance == "all")
        if tolerance == "all":
            assert sum(isinstance(o, DeadLetter) for o in out) == 2
        else:
            assert isinstance(out[0], str)


def test_a_keyless_snapshot_filter_and_a_missing_relation(conns, monkeypatch):
    w, r, slot, cfg = conns
    w.execute("DROP TABLE IF EXISTS loose")
    w.execute("CREATE TABLE loose (id int, v text)")
    w.execute("ALTER TABLE loose REPLICA IDENTITY FULL")
    xids = []
    for i in range(4):
        with w.transaction():
            w.execute("INSERT INTO loose VALUES (%s, 'x')", (i,))
            xids.append(w.execute("SELECT txid_current() % 4294967296").fetchone()[0])
    w.execute("UPDATE loose SET v = 'y'")
    w.execute("DELETE FROM loose WHERE id = 0")
    hidden = set(xids[:2])
    out = both_ways(cfg, r, slot, ["loose"], monkeypatch, seen=lambda t, x: x in hidden)
    assert sorted(x["id"] for x in rows_of(out, "loose") if x["__op"] == "c") == [2, 3]
    # a change whose Relation the batch lacks (and the decoder never saw): both fail alike
    schemas, keys = schemas_of(r, ["loose"])
    txns = [(c, ts, x, [m for m in ms if m[:1] != b"R"])
            for c, ts, x, ms in cdc.transactions(r, slot, 0, cdc.current_lsn(r))]  # fmt: skip
    outs = [read(cfg, r, txns, schemas, keys, way, monkeypatch) for way in (True, False)]
    assert outs[0] == outs[1] and "Relation" in outs[0][0]
