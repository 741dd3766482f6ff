"""The streaming replication tailer (walstream) against a real PostgreSQL, without Spark: it
spools committed transactions of the published tables by commit LSN, plans batches of whole
transactions, moves the slot only to confirmed positions, follows the server's WAL while the
captured tables are quiet, and spools again from the slot after a restart."""

from __future__ import annotations

import psycopg
import pytest

from connectql.connectors.postgres import cdc, walstream
from connectql.connectors.postgres.pgoutput import Decoder
from connectql.connectors.postgres.source import ReaderConfig
from tests.helpers import wait_until
from tests.pgserver import create_database

SLOT = "cq_walstream_test"


@pytest.fixture
def setup(pg_logical, tmp_path):
    info = create_database(pg_logical.conninfo(), "walstream_test")
    conn = psycopg.connect(info, autocommit=True)
    conn.execute("SET synchronous_commit = on")
    conn.execute("CREATE TABLE t (id int PRIMARY KEY, v text)")
    conn.execute("CREATE TABLE other (id int)")
    start = cdc.ensure_slot(conn, SLOT, "public", ["t"], "refuse", "test source")
    cfg = ReaderConfig(
        connection={"host": pg_logical.host, "port": pg_logical.port, "user": "postgres",
                    "database": "walstream_test"},
        schema="public", table="t", query=None, mode="cdc", slot=SLOT,
    )  # fmt: skip
    tailers = []

    def tail(at: int, rows: int = 2) -> walstream.Tailer:
        spool = walstream.spool_dir(str(tmp_path), cfg)
        tailers.append(walstream.Tailer(cfg, spool, at, {"public.t"}, rows))
        return tailers[-1]

    yield conn, start, tail
    for t in tailers:
        t.close()
    assert not any(t.thread.is_alive() for t in tailers)
    cdc.drop_slot(conn, SLOT)
    conn.close()


def commit_of(conn, *statements) -> int:
    with conn.transaction():
        for s in statements:
            conn.execute(s)
    return cdc.current_lsn(conn)


def slot_position(conn) -> int:
    row = conn.execute(
        "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s",
        (SLOT,),
    ).fetchone()
    return cdc.lsn_int(row[0])


def decoded(decoder: Decoder, messages: list[bytes]) -> list:
    """A spooled transaction's changes (its Relation messages fed to the decoder first)."""
    return [c for c in map(decoder.feed, messages) if c is not None]


def test_the_tailer_spools_plans_confirms_and_starts_again(setup):
    conn, start, tail = setup
    tailer = tail(start)
    ends = [
        commit_of(conn, "INSERT INTO t VALUES (1, 'a')"),
        commit_of(conn, "INSERT INTO t VALUES (2, 'b'), (3, 'c')", "INSERT INTO other VALUES (1)"),
        commit_of(conn, "UPDATE t SET v = 'A' WHERE id = 1"),
    ]
    wait_until(lambda: tailer.seen >= ends[-1], 30, what="the tailer to spool 3 transactions")
    assert tailer.server_end >= ends[-1]  # the server's end of WAL, asked while it reads
    # about batch_rows (2) rows of whole transactions: the first two; more follow
    window = tailer.window(start)
    assert window.full and window.last_relevant is not None
    assert ends[0] < window.last_relevant <= ends[1]
    decoder = Decoder(cdc.type_names(conn))  # the reader decodes the messages spooled
    txns = list(walstream.read_spool(tailer.spool, start, window.last_relevant))
    changes_of = [decoded(decoder, messages) for _lsn, _ts, _xid, messages in txns]
    assert [[(c.op, c.values) for c in changes] for changes in changes_of] == [
        [("c", {"id": "1", "v": "a"})],
        [("c", {"id": "2", "v": "b"}), ("c", {"id": "3", "v": "c"})],
    ]
    assert tailer.window(window.last_relevant).last_relevant > window.last_relevant

    # confirming moves the slot (never further) and deletes the files it covers
    assert slot_position(conn) <= start
    tailer.confirm(window.last_relevant)
    wait_until(lambda: slot_position(conn) == window.last_relevant, 30, what="the slot to move")
    left = [int(p.stem, 16) for p in tailer.spool.glob("*.txn")]  # files of later commits only
    assert left and min(left) > window.last_relevant

    # a quiet captured table: the tailer still follows the server's WAL (heartbeats)
    quiet = commit_of(conn, "INSERT INTO other VALUES (2)")
    wait_until(lambda: tailer.seen >= quiet, 30, what="the tailer to pass other tables' WAL")
    assert tailer.window(window.last_relevant).last_commit >= quiet

    # a new tailer (a restarted source) spools again from the confirmed position
    tailer.close()
    again = tail(window.last_relevant)
    wait_until(lambda: again.seen >= ends[-1], 30, what="the new tailer to catch up")
    upto = again.window(0).last_relevant
    (last,) = walstream.read_spool(again.spool, window.last_relevant, upto)
    changes = decoded(Decoder(cdc.type_names(conn)), last[3])
    assert [(c.op, c.values["v"]) for c in changes] == [("u", "A")]


def test_a_batch_planned_while_the_tailer_catches_up_waits_for_a_batch_of_rows():
    """Far behind the server's end of WAL, the window waits (FILL_WAIT_S at most) for
    batch_rows rows rather than taking the few spooled so far; caught up, it never waits."""
    import threading
    import time

    tailer = object.__new__(walstream.Tailer)  # no thread of its own: this one stands in
    tailer.limit, tailer.error, tailer.lock = 100, None, threading.Lock()
    tailer.commits, tailer.rows, tailer.seen = [10], [5], 10
    tailer.server_end = 10 + walstream.BACKLOG_BYTES + 1
    tailer.thread = threading.Thread(target=time.sleep, args=(5,), daemon=True)
    tailer.thread.start()

    def spool_more():
        time.sleep(0.3)
        with tailer.lock:
            tailer.commits += [20, 30]
            tailer.rows += [50, 50]
            tailer.seen = 30

    threading.Thread(target=spool_more, daemon=True).start()
    t0 = time.monotonic()
    window = tailer.window(0)
    assert window.last_relevant == 30 and time.monotonic() - t0 < walstream.FILL_WAIT_S
    tailer.server_end = tailer.seen + 1  # caught up: the few rows at once
    tailer.commits.append(40)
    tailer.rows.append(1)
    t0 = time.monotonic()
    assert tailer.window(30).last_relevant == 40 and time.monotonic() - t0 < 0.05
    tailer.server_end = tailer.seen + walstream.BACKLOG_BYTES + 1  # behind, no more rows
    t0 = time.monotonic()
    assert tailer.window(30).last_relevant == 40
    assert time.monotonic() - t0 >= walstream.FILL_WAIT_S
