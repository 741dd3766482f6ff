"""S3 source bench: gzip jsonl objects in SeaweedFS into a stream, against pyarrow reading the same
objects straight into Parquet (the yardstick), in one run.

    .venv/bin/python -m bench.s3 [--mb 50] [--objects 10] [--repeat 2]

A private SeaweedFS (tests/s3server.py) holds --objects gzip jsonl objects of about --mb MB of
JSON in all (id BIGINT, name STRING, v DOUBLE, ts TIMESTAMP). Each repetition:
- connectql: a Worker in a fresh temporary home runs `CREATE SOURCE CONNECTOR ... FROM s3 ...
  run = 'once'` and `wait_for_once()`; timed from the statement to the end of the wait, which
  includes listing, counting each object's records (latest offset) and reading them (a second
  download); checked by value: N rows, N distinct ids.
- yardstick: pyarrow lists the objects, reads each through a gzip stream with pyarrow.json
  (explicit schema) and writes it as Parquet to a local directory; checked: N rows.
- with --file, the `file` connector too (Spark's own JVM file source, not a toolkit source) on a
  local copy of the same objects, timed and checked as the s3 source: whether a toolkit source
  over pyarrow (the s3 source, here through SeaweedFS on loopback) reads slower than it.
A warm-up of the connectql path runs first (a session's first job is slower, NOTES.md).
Figures are medians over --repeat repetitions; the machine's load moves them a lot.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.json as pajson
import pyarrow.parquet as pq
from rich.console import Console
from rich.table import Table

from tests.s3server import SeaweedS3

BUCKET = "bench"
SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("v", pa.float64()),
        ("ts", pa.timestamp("us", tz="UTC")),
    ]
)
console = Console(width=120)


def put_objects(fs, prefix: str, objects: int, per_object: int) -> int:
    """gzip jsonl objects under prefix; returns the bytes of JSON written."""
    size = 0
    for n in range(objects):
        lines = "".join(
            json.dumps(
                {"id": i, "name": f"name-{i % 977}", "v": i / 7, "ts": "2026-01-02T03:04:05Z"}
            )
            + "\n"
            for i in range(n * per_object, (n + 1) * per_object)
        ).encode()
        size += len(lines)
        with fs.open_output_stream(
            f"{BUCKET}/{prefix}part-{n:04d}.jsonl.gz", compression=None
        ) as out:
            out.write(gzip.compress(lines, compresslevel=6))
    return size


def connectql_run(server, prefix: str, total: int) -> float:
    opts = {**server.options(), "bucket": BUCKET, "prefix": prefix}
    given = ", ".join(f"'{k}' = '{v}'" for k, v in opts.items())
    return timed_copy(f"s3 INTO events WITH ({given}", total)


def file_run(folder: Path, total: int) -> float:
    """The `file` connector (Spark's json reader) on a local folder of the same objects."""
    return timed_copy(f"file INTO events WITH (path = '{folder}', format = 'json'", total)


def timed_copy(source: str, total: int) -> float:
    """Seconds from `CREATE SOURCE CONNECTOR landing FROM <source>, run = 'once', schema = ...)`
    in a worker on a fresh home to the run's end, its stream checked to hold `total` rows."""
    from connectql.worker.worker import Worker

    home = Path(tempfile.mkdtemp(prefix="cq-bench-s3-"))
    worker = Worker(home)
    try:
        started = time.perf_counter()
        list(
            worker.run_script(
                f"CREATE SOURCE CONNECTOR landing FROM {source}, run = 'once',"
                " schema = 'id BIGINT, name STRING, v DOUBLE, ts TIMESTAMP')"
            )
        )
        worker.wait_for_once()
        took = time.perf_counter() - started
        check(home / "streams/events", total)
        return took
    finally:
        worker.close(stop_spark=False)
        shutil.rmtree(home, ignore_errors=True)


def local_copy(fs, prefix: str) -> Path:
    """The objects under prefix, copied into a local folder."""
    folder = Path(tempfile.mkdtemp(prefix="cq-bench-file-in-"))
    selector = pafs.FileSelector(f"{BUCKET}/{prefix}", recursive=True)
    for info in fs.get_file_info(selector):
        with fs.open_input_stream(info.path, compression=None) as src:
            (folder / Path(info.path).name).write_bytes(src.read())
    return folder


def check(stream: Path, total: int) -> None:
    import duckdb

    from connectql.catalog.streams import committed_files

    got = duckdb.sql(
        f"SELECT count(*), count(DISTINCT id) FROM read_parquet({committed_files(stream)!r})"
    ).fetchall()[0]
    assert got == (total, total), f"stream holds {got}, expected {total} rows"


def yardstick(server, prefix: str, total: int) -> float:
    fs = server.filesystem()
    out = Path(tempfile.mkdtemp(prefix="cq-bench-s3-pa-"))
    try:
        started = time.perf_counter()
        selector = pafs.FileSelector(f"{BUCKET}/{prefix}", recursive=True)
        rows = 0
        for info in sorted(fs.get_file_info(selector), key=lambda i: i.path):
            with pa.CompressedInputStream(
                fs.open_input_stream(info.path, compression=None), "gzip"
            ) as stream:
                table = pajson.read_json(
                    stream, parse_options=pajson.ParseOptions(explicit_schema=SCHEMA)
                )
            pq.write_table(table, out / (Path(info.path).name + ".parquet"))
            rows += table.num_rows
        took = time.perf_counter() - started
        assert rows == total, f"pyarrow read {rows}, expected {total}"
        return took
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--mb", type=float, default=50.0)
    args.add_argument("--objects", type=int, default=10)
    args.add_argument("--repeat", type=int, default=2)
    args.add_argument("--file", action="store_true", help="the file connector too")
    a = args.parse_args()
    per_object = max(1, int(a.mb * 1e6 / 110 / a.objects))  # about 110 bytes a line
    total = per_object * a.objects
    from connectql.runtime.session import get_session

    get_session({"spark.master": "local[2]"})
    with SeaweedS3() as server:
        server.filesystem().create_dir(BUCKET)
        size = put_objects(server.filesystem(), "data/", a.objects, per_object)
        put_objects(server.filesystem(), "warm/", 2, 1000)
        connectql_run(server, "warm/", 2000)
        folder = local_copy(server.filesystem(), "data/") if a.file else None
        ours, theirs, files = [], [], []
        for r in range(a.repeat):
            pair = [lambda: ours.append(connectql_run(server, "data/", total)),
                    lambda: theirs.append(yardstick(server, "data/", total))]  # fmt: skip
            if folder:
                pair.append(lambda: files.append(file_run(folder, total)))
            for run in pair if r % 2 == 0 else pair[::-1]:
                run()
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    show(size, total, statistics.median(ours), statistics.median(theirs), ours, theirs, files)


def show(size: int, total: int, ours: float, theirs: float, all_ours, all_theirs, files) -> None:
    table = Table(title=f"s3 source: {total:,} records, {size / 1e6:.0f} MB of JSON (gzip)")
    for column in ("path", "median s", "MB/s", "records/s", "runs"):
        table.add_column(column)
    rows = [("connectql s3 source -> stream", ours, all_ours),
            ("pyarrow -> Parquet (yardstick)", theirs, all_theirs)]  # fmt: skip
    if files:
        rows.append(("connectql file source (Spark's) -> stream", statistics.median(files), files))
    for name, took, runs in rows:
        table.add_row(
            name, f"{took:.2f}", f"{size / 1e6 / took:.1f}", f"{total / took:,.0f}",
            ", ".join(f"{t:.2f}" for t in runs),
        )  # fmt: skip
    console.print(table)
    console.print(f"ratio connectql / yardstick: {ours / theirs:.2f}")


if __name__ == "__main__":
    main()
