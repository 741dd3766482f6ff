"""Many small tables bench (issue 31): one cdc source of N small tables, MariaDB and PostgreSQL,
from CREATE on a warm worker until every table's snapshot is in its stream, each table checked
by value.

    .venv/bin/python -m bench.manytables [--tables 100] [--rows 100] [--sinks [one|each]] [--keep]

Servers: bench.mysql.Servers (a private MariaDB and PostgreSQL). Each database gets N tables
`m0000`... of the bulk bench's columns (bigint key, int, decimal, two varchars with NULL, '',
'NULL', tabs, newlines, backslashes and non-ASCII, a datetime), `--rows` rows each (copies of
one table filled like bench.mysql's orders), and two more for a warm-up source, run first on
the same worker so that Spark's Python workers are up. Then, per database: `CREATE SOURCE
CONNECTOR ... WITH (table = 'm*')` (cdc), timed until the committed files of all N streams
(`<stream>_m0000`, ...) hold --rows rows each; then every stream's rows are compared with its
table's, row by row (decimals as Decimal, timestamps as UTC wall time). With --sinks, the same
script also creates one PostgreSQL upsert sink of all N streams (`streams = '<stream>_m*'`,
`table = '${table}'`; `--sinks each`: one sink per table instead), and the time until every target's
count and MD5 checksum (bench.mysql's) equals its source table's is reported as well.
Timings are reported, never judged; the exit status is 1 when a check failed."""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import time
from datetime import timezone
from decimal import Decimal
from pathlib import Path

import psycopg
import pyarrow.parquet as pq

from bench import mysql
from bench.common import Connectql, console, execute, load
from connectql.catalog.streams import committed_files

COLUMNS = "id, customer, amount, status, note, created"
PG_FILL = r"""
INSERT INTO {name}
SELECT g, 1 + (g * 7919) % 99999, round((g * 37 % 500000) / 100.0, 2),
       CASE WHEN g % 97 = 0 THEN NULL ELSE (ARRAY['new', 'paid', 'shipped'])[1 + g % 3] END,
       CASE g % 10 WHEN 1 THEN E'tab\there, new\nline, backslash \\ and \\N ' || g
            WHEN 2 THEN 'NULL' WHEN 3 THEN '' WHEN 4 THEN 'naïve café ☕ ' || g
            WHEN 5 THEN NULL ELSE 'note ' || md5(g::text) END,
       TIMESTAMP '2024-01-01' + g * INTERVAL '1 second 123456 microseconds'
FROM generate_series(1, {rows}) g
"""
POLL_S = 0.25


def fill_mariadb(srv: mysql.Servers, names: list[str], rows: int) -> None:
    from tests.mariadbserver import create_database

    create_database(srv.my, "srcdb")
    conn = srv.my.connect("srcdb")
    try:
        with conn.cursor() as cur:
            cur.execute(mysql.MY_TABLE_DDL.format(name="orders"))
            cur.execute(mysql.FILL_SQL.format(n=rows))
            for name in names:
                cur.execute(f"CREATE TABLE {name} LIKE orders")
                cur.execute(f"INSERT INTO {name} SELECT * FROM orders")
        conn.commit()
    finally:
        conn.close()


def fill_postgres(srv: mysql.Servers, names: list[str], rows: int) -> str:
    from tests.pgserver import create_database

    info = create_database(srv.pg.conninfo(), "pgsrc")
    with psycopg.connect(info, autocommit=True) as conn:
        conn.execute(mysql.PG_TABLE_DDL.format(name="orders"))
        conn.execute(PG_FILL.format(name="orders", rows=rows))
        for name in names:
            conn.execute(f"CREATE TABLE {name} (LIKE orders INCLUDING ALL)")
            conn.execute(f"INSERT INTO {name} SELECT * FROM orders")
    return info


def committed_rows(stream: Path, seen: dict[str, int]) -> int:
    """Rows in a stream's committed files (each file's footer read once)."""
    total = 0
    if not (stream / "_spark_metadata").exists():
        return 0
    for f in committed_files(stream):
        if f not in seen:
            seen[f] = pq.ParquetFile(f.removeprefix("file://")).metadata.num_rows
        total += seen[f]
    return total


def wait_streams(streams: list[Path], rows: int, timeout: float, t0: float) -> float | None:
    seen: dict[str, int] = {}
    left = list(streams)
    while left and time.perf_counter() - t0 < timeout:
        left = [s for s in left if committed_rows(s, seen) < rows]
        if left:
            time.sleep(POLL_S)
    return None if left else time.perf_counter() - t0


def canonical(row: tuple) -> tuple:
    out = []
    for v in row:
        if hasattr(v, "tzinfo") and getattr(v, "tzinfo", None) is not None:
            v = v.astimezone(timezone.utc).replace(tzinfo=None)
        if isinstance(v, float):
            v = Decimal(str(v))
        out.append(v)
    return tuple(out)


def stream_values(stream: Path) -> list[tuple]:
    files = [f.removeprefix("file://") for f in committed_files(stream)]
    table = pq.ParquetDataset(files).read(columns=COLUMNS.split(", "))
    return sorted(canonical(tuple(r.values())) for r in table.to_pylist())


def check_streams(streams: dict[str, Path], source_rows) -> str:
    bad = [t for t, s in streams.items() if stream_values(s) != source_rows(t)]
    return f"FAIL: {len(bad)} tables differ, e.g. {bad[:3]}" if bad else "OK"


def my_rows(srv: mysql.Servers):
    def rows(table: str) -> list[tuple]:
        return sorted(canonical(r) for r in srv.my_rows(f"SELECT {COLUMNS} FROM {table}"))

    return rows


def pg_rows(info: str):
    def rows(table: str) -> list[tuple]:
        return sorted(canonical(r) for r in execute(info, f"SELECT {COLUMNS} FROM {table}"))

    return rows


def batch_note(cq, name: str, since: float) -> str:
    """The source's micro-batches so far: how many, first one's start, their summed time."""
    batches = [b for b in cq.listener.of(name, since) if b.rows]
    if not batches:
        return "no batch reported yet"
    first = min(b.start for b in batches) - since
    busy = sum(b.seconds for b in batches)
    return f"{len(batches)} batches with rows, the first at {first:.1f} s, {busy:.1f} s in them"


def source_sql(name: str, kind: str, conn: str, pattern: str, stream: str) -> str:
    return (
        f"CREATE SOURCE CONNECTOR {name} FROM {kind} INTO {stream} WITH ({conn},"
        f" table = '{pattern}', mode = 'cdc');\n"
    )


def sinks_sql(stream: str, names: list[str], conn: str, how: str) -> str:
    if how == "one":
        return (
            f"CREATE SINK CONNECTOR {stream}_dst TO postgres WITH ({conn},"
            f" streams = '{stream}_m*', table = '${{table}}');\n"
        )
    return "".join(
        f"CREATE SINK CONNECTOR {stream}_{t}_dst TO postgres FROM {stream}_{t} WITH ({conn},"
        f" table = '{t}');\n"
        for t in names
    )


def wait_targets(srv, dst_info: str, names: list[str], want, timeout: float, t0: float):
    left = list(names)
    while left and time.perf_counter() - t0 < timeout:
        left = [
            t for t in left if _pg_checksum(dst_info, t) != want[t]
        ]  # a missing table is not there yet
        if left:
            time.sleep(1.0)
    return None if left else time.perf_counter() - t0


def _pg_checksum(info: str, table: str):
    try:
        return tuple(execute(info, mysql.PG_CHECKSUM_SQL.format(name=table))[0])
    except psycopg.errors.UndefinedTable:
        return None


def run_one(cq, srv, label, kind, conn, names, rows, source_rows, sums, args, home) -> list:
    """One source of `names` (and, with --sinks, a sink per table); the result rows."""
    script = source_sql(f"{label}_src", kind, conn, "m*", label)
    dst_info = None
    if args.sinks:
        from tests.pgserver import create_database

        dst_info = create_database(srv.pg.conninfo(), f"{label}_dst")
        script += sinks_sql(label, names, srv.pg_options(f"{label}_dst"), args.sinks)
    streams = {t: home / "streams" / f"{label}_{t}" for t in names}
    start_load = load()
    t0_wall, t0 = time.time(), time.perf_counter()
    cq.run(script)
    created = time.perf_counter() - t0
    seconds = wait_streams(list(streams.values()), rows, args.timeout, t0)
    out = []
    if seconds is None:
        out.append((label, "streams", f"not done in {args.timeout:.0f} s", "FAIL", start_load))
        return out
    check = check_streams(streams, source_rows)
    note = f"{created:.1f} s of it in CREATE; {batch_note(cq, f'{label}_src', t0_wall)}"
    out.append((label, "snapshot in the streams", f"{seconds:.1f}", check, start_load, note))
    if args.sinks:
        targets = wait_targets(srv, dst_info, names, sums, args.timeout, t0)
        text = f"{targets:.1f}" if targets else f"not done in {args.timeout:.0f} s"
        what = f"in the targets ({'one sink' if args.sinks == 'one' else 'a sink per table'})"
        out.append((label, what, text, "OK" if targets else "FAIL", load()))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench.manytables", description=__doc__.splitlines()[0])
    p.add_argument("--tables", type=int, default=100)
    p.add_argument("--rows", type=int, default=100)
    p.add_argument(
        "--sinks",
        nargs="?",
        const="one",
        choices=("one", "each"),
        help="PostgreSQL targets as well: one sink of all the streams (one), or one per table",
    )
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--keep", action="store_true")
    args = p.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="cq-manytables-"))
    srv = mysql.Servers()
    cq = None
    results = []
    try:
        srv.start()
        names = [f"m{i:04d}" for i in range(args.tables)]
        fill_mariadb(srv, [*names, "w0", "w1"], args.rows)
        pg_info = fill_postgres(srv, [*names, "w0", "w1"], args.rows)
        console.print(f"  {args.tables} tables of {args.rows} rows in each database")
        my_sums = {t: tuple(srv.my_checksum(t)) for t in names}
        pg_sums = {
            t: tuple(execute(pg_info, mysql.PG_CHECKSUM_SQL.format(name=t))[0]) for t in names
        }
        cq = Connectql(tmp / "home", "mysql")
        my_conn, pg_conn = srv.my_options(), srv.pg_options("pgsrc")
        warm = source_sql("warm_my", "mysql", my_conn, "w*", "wmy")
        warm += source_sql("warm_pg", "postgres", pg_conn, "w*", "wpg")
        cq.run(warm)
        home = tmp / "home"
        warm_streams = [home / "streams" / f"{s}_{t}" for s in ("wmy", "wpg") for t in ("w0", "w1")]
        if wait_streams(warm_streams, args.rows, args.timeout, time.perf_counter()) is None:
            console.print("  the warm-up sources did not finish their snapshots")
        sides = (
            ("my", "mysql", my_conn, my_rows(srv), my_sums),
            ("pg", "postgres", pg_conn, pg_rows(pg_info), pg_sums),
        )
        for label, kind, conn, source_rows, sums in sides:
            results += run_one(
                cq, srv, label, kind, conn, names, args.rows, source_rows, sums, args, home
            )
    finally:
        if cq is not None:
            with contextlib.suppress(Exception):
                cq.close()
        srv.stop()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    console.print(f"\n{args.tables} tables x {args.rows} rows, cdc source, warm worker:")
    for r in results:
        console.print("  " + " | ".join(str(x) for x in r))
    return 0 if all(r[3] == "OK" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
