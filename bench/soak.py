"""Soak: a PostgreSQL cdc pipeline (source -> stream -> upsert sink) under steady churn, its
worker killed with SIGKILL (with its JVM and Python workers) at random moments, again and again,
and started again each time; then one last worker catches up and the bench counts, by value:
kills survived, changes lost and changes taken twice (in the stream, against every transaction
the writer committed), and whether the target table equals the source.

    .venv/bin/python -m bench.soak [--kills 20] [--rows 5000] [--rate 30] [--seed 1] [--keep]

It uses the crash tests' machinery (tests/crash.py: workers in their own sessions, the writer
that remembers what it committed, the stream checks) on a private PostgreSQL; about a minute a
kill on a 2-core machine. Exits 1 unless nothing was lost or duplicated and the tables match."""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from tests.crash import kill_everything, start_worker, stream_changes, stream_count
from tests.helpers import wait_until
from tests.pgserver import PrivatePostgres, create_database
from tests.test_postgres_crash import FILL, SCRIPT, TABLE, PgWriter, checksum, sql


def main(argv=None) -> int:
    args = parse(argv)
    base = Path(tempfile.mkdtemp(prefix="cq-soak-"))
    server = PrivatePostgres().start()
    try:
        return soak(args, server, base)
    finally:
        server.stop()
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=20)
    p.add_argument("--rows", type=int, default=5000, help="rows in the table at the start")
    p.add_argument("--rate", type=float, default=30, help="writer transactions per second")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    return p.parse_args(argv)


def soak(args, server, base: Path) -> int:
    src = create_database(server.conninfo(), "soak_src")
    dst = create_database(server.conninfo(), "soak_dst")
    sql(src, TABLE)
    sql(src, FILL, (args.rows,))
    home, logs = base / "home", base / "logs"
    logs.mkdir()
    script = base / "pipeline.sql"
    script.write_text(
        SCRIPT.format(
            host=server.host,
            port=server.port,
            user=server.user,
            src="soak_src",
            dst="soak_dst",
            slot="soak",
            batch_rows=2000,
        )
    )
    rng = random.Random(args.seed)
    writer = PgWriter(src, range(1, args.rows + 1), 10 * args.rows, args.seed)
    survived, started = 0, time.monotonic()
    try:
        for kill in range(1, args.kills + 1):
            before = stream_count({"home": home})
            proc = start_worker(home, script, logs, f"w{kill}")
            if kill == 1:  # the writer starts once the slot exists: every change is in its log
                wait_until(lambda: stream_count({"home": home}) > 0, 300, what="a snapshot")
                writer.run(per_second=args.rate)
            # each kill lands at a random moment after the worker moved data (not while the
            # JVM starts): within a batch, between two, in the snapshot or in the change log
            wait_until(lambda b=before: stream_count({"home": home}) > b, 300, what="progress")
            time.sleep(rng.uniform(0, 8))
            kill_everything(proc)
            survived += 1
            changes = stream_count({"home": home}, "__op <> 'r'")
            print(
                f"kill {kill:2d} at {time.monotonic() - started:5.0f}s: {changes} changes in"
                f" the stream, {len(writer.committed)} transactions committed",
                flush=True,
            )
        writer.stop()
        expected = checksum(src)
        final = start_worker(home, script, logs, "final")
        try:
            wait_until(lambda: checksum(dst) == expected, 600, every=1, what="target = source")
        finally:
            kill_everything(final)
    finally:
        writer.stop()
    return report(
        survived,
        writer.committed,
        stream_changes({"home": home}, "xid"),
        checksum(src) == checksum(dst),
        time.monotonic() - started,
    )


def report(survived, committed, changes, equal: bool, seconds: float) -> int:
    expected = Counter((txn, op, key) for txn, ops in committed for op, key in ops)
    seen = Counter((txn, op, key) for _pos, op, key, txn in changes)
    lost, twice = sum((expected - seen).values()), sum((seen - expected).values())
    print(
        f"\nkills survived: {survived}; transactions committed: {len(committed)};"
        f" changes committed: {sum(expected.values())}; in the stream: {sum(seen.values())}"
    )
    print(
        f"changes lost: {lost}; changes duplicated: {twice};"
        f" target equals source: {equal}; {seconds:.0f} s in all"
    )
    return 0 if lost == twice == 0 and equal else 1


if __name__ == "__main__":
    sys.exit(main())
