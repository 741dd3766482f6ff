"""Streams that run for long: three datagen sources at the same steady rate, each into its own
stream read by a running file sink: one stream with small files merged, one merged and with a
retention (`--retention`), and one with neither (the yardstick, 'merge.target.bytes' = '0'), in
one worker. At every quarter of the run it reports for each: committed files, files on disk,
bytes, the time of `SELECT count(*) FROM stream`, the time its running sink takes to restart
(RESTART until its first trigger has listed the stream), and the time a new sink
(`run = 'once'`) takes to start, read the whole stream and finish; at the end that every record
reached each running sink exactly once, and each stream but the retained one.

    .venv/bin/python -m bench.streams [--batches 2000] [--interval '1 second'] [--rows 100]
        [--merge '1 MB'] [--retention '5 minutes'] [--marks 4] [--keep]

Goal: all four figures flat in the length of the run with merging on. A 2-core machine makes
about one batch a second per source with the defaults (about 35 minutes)."""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from bench.common import load
from connectql.catalog.streams import committed_entries, committed_files
from tests.helpers import read_parquet_rows, run, wait_until

# stream -> (merge.target.bytes (None: --merge), retained)
MODES = {"merged": (None, False), "retained": (None, True), "plain": ("0", False)}
console = Console(width=140)


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batches", type=int, default=2000, help="source batches per stream")
    p.add_argument("--interval", default="1 second", help="the sources' trigger.interval")
    p.add_argument("--rows", type=int, default=100, help="rows per source batch")
    p.add_argument("--merge", default="1 MB", help="merge.target.bytes of the merged stream")
    p.add_argument("--retention", default="5 minutes", help="retention of the retained stream")
    p.add_argument("--marks", type=int, default=4, help="measure this many times in the run")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    return p.parse_args(argv)


def setup(worker, args, out: Path) -> None:
    run(worker, "SET stream.retention.check.interval = '2 s'")
    for name, (target, retained) in MODES.items():
        kept = f", retention = '{args.retention}'" if retained else ""
        run(
            worker,
            f"CREATE STREAM {name} WITH ('merge.target.bytes' = '{target or args.merge}'{kept})",
        )
        run(
            worker,
            f"CREATE SOURCE CONNECTOR src_{name} FROM datagen INTO {name} WITH"
            f" ('rows.per.batch' = {args.rows}, 'rows.per.second' = 1000000,"
            f" 'trigger.interval' = '{args.interval}',"
            " fields = 'id BIGINT SEQUENCE, name STRING')",
        )
        run(
            worker,
            f"CREATE SINK CONNECTOR dst_{name} TO file FROM {name} WITH"
            f" (path = '{out / name}', 'trigger.interval' = '{args.interval}')",
        )


def pause(worker, verb: str) -> None:
    for name in MODES:
        run(worker, f"{verb} CONNECTOR src_{name}")


def batches(worker, name: str) -> int:
    rows = worker.catalog.query("SELECT rows_total FROM connectors WHERE name = ?", [name])[1]
    return rows[0][0] or 0


def measure(worker, name: str, out: Path, n: int) -> dict:
    stream = worker.catalog.get_stream(name).path
    t0 = time.perf_counter()
    count = run(worker, f"SELECT count(*) FROM {name}")[0].rows[0][0]
    counted = time.perf_counter() - t0
    restart = restart_time(worker, f"dst_{name}")
    once = out / f"once_{name}_{n}"
    t0 = time.perf_counter()
    run(
        worker,
        f"CREATE SINK CONNECTOR once_{name}_{n} TO file FROM {name} WITH"
        f" (path = '{once}', run = 'once')",
    )
    wait_until(
        lambda: worker.catalog.state_of(f"once_{name}_{n}") == "FINISHED",
        timeout=600,
        what=f"once_{name}_{n} to finish",
    )
    new_sink = time.perf_counter() - t0
    read = (read_parquet_rows(once) or [(0, 0)])[0]
    run(worker, f"DROP CONNECTOR once_{name}_{n}")
    return {
        "committed": len(committed_entries(stream)),
        "on disk": len(list(Path(stream).glob("*.parquet"))),
        "bytes": sum(e["size"] for e in committed_entries(stream)),
        "count(*) s": counted,
        "restart s": restart,
        "new sink s": new_sink,
        "rows": count,
        # (retention may remove files of the retained stream between the count and the read)
        "new sink rows": f"{read[0]:,}"
        + ("" if read[0] == read[1] and (read[0] == count or MODES[name][1]) else " MISMATCH"),
    }


def restart_time(worker, sink: str) -> float:
    """Seconds from RESTART of a running sink until its first trigger has listed the stream
    (with the sources paused, it finds nothing new: what is timed is the start and the listing)."""
    t0 = time.perf_counter()
    run(worker, f"RESTART CONNECTOR {sink}")
    wait_until(
        lambda: worker.engine.queries[sink].recentProgress,
        timeout=600,
        every=0.05,
        what=f"{sink}'s first trigger",
    )
    return time.perf_counter() - t0


def report(figures: list[tuple[int, str, dict]]) -> None:
    t = Table(title=f"streams bench (load {load()})")
    keys = list(figures[0][2])
    for col in ("batches", "stream", *keys):
        t.add_column(col, justify="right")
    for n, name, f in figures:
        t.add_row(
            f"{n:,}",
            name,
            *[f"{v:.2f}" if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else v
              for v in f.values()],
        )  # fmt: skip
    console.print(t)


def bench(args, base: Path) -> int:
    from connectql.worker.worker import Worker

    out = base / "out"
    worker = Worker(base / "home")
    figures = []
    try:
        setup(worker, args, out)
        marks = [args.batches * (q + 1) // args.marks for q in range(args.marks)]
        for mark in marks:
            wait_until(
                lambda m=mark: min(batches(worker, f"src_{s}") for s in MODES) >= m * args.rows,
                timeout=args.batches * 60,
                every=1,
                what=f"{mark} batches",
            )
            pause(worker, "PAUSE")  # both streams measured as they are at the mark
            order = list(MODES) if len(figures) % 4 == 0 else list(MODES)[::-1]  # the first
            for name in order:  # new sink of a mark pays for the pause: take turns
                figures.append((mark, name, measure(worker, name, out, mark)))
            report(figures)
            if mark != marks[-1]:
                pause(worker, "RESUME")
        ok = True
        for name in MODES:
            stream = worker.catalog.get_stream(name).path
            # ids are a sequence from 0: the source made max(id) + 1 records (rows_total counts
            # only since the query's last start)
            last = "SELECT max(id) + 1 FROM t"
            total = (read_parquet_rows(stream, last) or read_parquet_rows(out / name, last))[0][0]
            wait_until(
                lambda n=name, t=total: (read_parquet_rows(out / n) or [(0, 0)])[0][0] >= t,
                timeout=300,
                what=f"dst_{name} to catch up",
            )
            got = [(read_parquet_rows(p) or [(0, 0)])[0] for p in (stream, out / name)]
            # the retained stream keeps what is younger than its retention; its sink has all
            fine = got[1] == (total, total) and (MODES[name][1] or got[0] == (total, total))
            ok &= fine
            merged = sum(Path(f).name.startswith("merged-") for f in committed_files(stream))
            console.print(
                f"{name}: source {total:,} rows; stream and running sink (rows, distinct)"
                f" {got}: {'OK' if fine else 'FAIL'}; {merged} merged files"
            )
        return 0 if ok else 1
    finally:
        worker.close()


def main(argv=None) -> int:
    args = parse(argv)
    base = Path(tempfile.mkdtemp(prefix="cq-streams-"))
    try:
        return bench(args, base)
    finally:
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
