"""Objects whose bytes do not decode, through a real worker and SeaweedFS: gzipped twice, zstd
twice, a `.gz` that is not gzip, a truncated gzip stream, parquet and avro objects that are not
parquet or avro. With errors.tolerance = 'all' every record (or the unreadable rest of an
object) is a dead letter naming its object and record, raw bytes kept; with 'none' the connector
fails naming the object; and read = written + dead-lettered in the status table."""

from __future__ import annotations

import base64
import gzip
import json

import pyarrow as pa
import pytest

from tests.helpers import read_parquet_rows, run, wait_until
from tests.s3server import bucket, s3server  # noqa: F401
from tests.test_cli import connectql
from tests.test_s3_io import csv_text, jsonl, put
from tests.test_s3_source import rows, with_options

pytestmark = pytest.mark.spark

SCHEMA = "id BIGINT, name STRING, v DOUBLE"


def twice_gzipped(fmt):
    body = jsonl(rows(0, 40)) if fmt == "jsonl" else csv_text(rows(0, 40))
    return gzip.compress(gzip.compress(body))


def twice_zstd(_fmt):
    z = pa.Codec("zstd")
    return z.compress(z.compress(jsonl(rows(0, 40)), asbytes=True), asbytes=True)


def not_gzip(_fmt):
    return jsonl(rows(0, 5))


def truncated_gzip(_fmt):
    whole = gzip.compress(jsonl(rows(0, 2000)))
    return whole[: len(whole) // 2]


def not_columnar(_fmt):
    return jsonl(rows(0, 5))


CASES = {
    "jsonl gzipped twice": ("jsonl", ".jsonl.gz", twice_gzipped),
    "csv gzipped twice": ("csv", ".csv.gz", twice_gzipped),
    "jsonl zstd twice": ("jsonl", ".jsonl.zst", twice_zstd),
    "a .gz that is no gzip": ("jsonl", ".jsonl.gz", not_gzip),
    "a truncated gzip stream": ("jsonl", ".jsonl.gz", truncated_gzip),
    "parquet that is no parquet": ("parquet", ".parquet", not_columnar),
    "avro that is no avro": ("avro", ".avro", not_columnar),
}


def raw_bytes(raw: str) -> bytes:
    """A dead letter's raw_record as bytes: base64 when they are no text."""
    return base64.b64decode(raw[len("base64:") :]) if raw.startswith("base64:") else raw.encode()


def decompressed_once(stored: bytes, suffix: str) -> bytes:
    """What a reader sees of a compressed object: the object decompressed once, if it can be."""
    codec = {".gz": "gzip", ".zst": "zstd"}.get(suffix[suffix.rindex(".") :])
    if codec is None:
        return b""
    try:
        return pa.CompressedInputStream(pa.BufferReader(stored), codec).read()
    except (OSError, pa.ArrowInvalid):
        return b""


def counts(worker, name: str):
    return worker.catalog.query(
        "SELECT rows_total, rows_written, rows_dead_lettered FROM connectors WHERE name = ?", [name]
    )[1][0]


def dead_letters(worker) -> list[tuple]:
    found = read_parquet_rows(
        worker.home / "streams/bad",
        "SELECT source_offset, error_message, raw_record FROM t ORDER BY source_offset",
    )
    return [(json.loads(o), e, r) for o, e, r in found or []]


@pytest.mark.parametrize("case", list(CASES))
def test_undecodable_objects_are_dead_letters_and_the_counts_add_up(worker, s3server, bucket, case):  # noqa: F811
    fmt, suffix, make = CASES[case]
    fs = s3server.filesystem()
    objects = {f"in/{i}{suffix}": make(fmt) for i in range(3)}
    for key, data in objects.items():
        put(fs, f"{bucket}/{key}", data)
    opts = with_options(s3server, bucket, prefix="in/", format=fmt)
    run(
        worker,
        f"CREATE SOURCE CONNECTOR landing FROM s3 INTO objs WITH ({opts}, run = 'once',"
        f" schema = '{SCHEMA}', 'errors.tolerance' = 'all', 'errors.deadletter.stream' = 'bad')",
    )
    worker.wait_for_once()
    dead = dead_letters(worker)
    assert {d[0]["key"] for d in dead} == set(objects), dead
    for where, error, raw in dead:
        assert where["bucket"] == bucket and isinstance(where["record"], int), where
        assert error, where
        # the raw bytes kept: those of the record, or the start of an undecodable object's
        stored = objects[where["key"]]
        seen = raw_bytes(raw)
        assert seen, where
        assert seen == stored[:65536] or seen in decompressed_once(stored, suffix), where
        if case in ("jsonl gzipped twice", "csv gzipped twice"):
            assert raw.startswith("base64:"), raw  # each line's bytes: no text
    good = read_parquet_rows(worker.home / "streams/objs", "SELECT count(*) FROM t")
    written = good[0][0] if good else 0
    wait_until(
        lambda: counts(worker, "landing") == (written + len(dead), written, len(dead)),
        what="read = written + dead-lettered",
        diagnose=lambda: (counts(worker, "landing"), written, len(dead)),
    )


@pytest.mark.parametrize(
    "case", ["jsonl gzipped twice", "a .gz that is no gzip", "avro that is no avro"]
)
def test_an_undecodable_object_fails_the_connector_naming_it(worker, s3server, bucket, case):  # noqa: F811
    fmt, suffix, make = CASES[case]
    fs = s3server.filesystem()
    put(fs, f"{bucket}/in/a{suffix}", make(fmt))
    opts = with_options(s3server, bucket, prefix="in/", format=fmt)
    run(
        worker,
        f"CREATE SOURCE CONNECTOR landing FROM s3 INTO objs WITH ({opts}, run = 'once',"
        f" schema = '{SCHEMA}', 'errors.retry.max' = 0)",
    )
    worker.wait_for_once()
    wait_until(lambda: worker.catalog.get_connector("landing").state == "FAILED", what="FAILED")
    error = worker.catalog.get_connector("landing").last_error
    assert f"in/a{suffix}" in error, error


def test_the_connectql_command_counts_every_record_of_an_undecodable_object(
    tmp_path,
    s3server,  # noqa: F811
    bucket,  # noqa: F811
):
    """The user's way in: a script of an s3 source over objects gzipped twice, errors sent to a
    dead-letter stream; what `connectql sql` then shows adds up."""
    fs = s3server.filesystem()
    for i in range(3):
        put(fs, f"{bucket}/in/{i}.jsonl.gz", twice_gzipped("jsonl"))
    opts = with_options(s3server, bucket, prefix="in/", format="jsonl")
    script = tmp_path / "objs.sql"
    script.write_text(
        f"CREATE SOURCE CONNECTOR landing FROM s3 INTO objs WITH ({opts}, run = 'once',"
        f" schema = '{SCHEMA}', 'errors.tolerance' = 'all', 'errors.deadletter.stream' = 'bad');"
    )
    home = tmp_path / "home"
    done = connectql("run", str(script), home=home)
    assert done.returncode == 0, done.stderr
    shown = connectql(
        "--format", "json", "sql",
        "SELECT rows_total, rows_written, rows_dead_lettered, state FROM connectors",
        "SELECT count(*) AS n FROM bad", home=home,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    found = [json.loads(line) for line in shown.stdout.splitlines() if line.startswith("[")]
    (status,), (letters,) = found
    assert letters["n"] > 0
    assert status == {
        "rows_total": letters["n"], "rows_written": 0, "rows_dead_lettered": letters["n"],
        "state": "FINISHED",
    }  # fmt: skip
