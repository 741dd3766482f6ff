"""The s3 connector's I/O layer against a real SeaweedFS: listing in key order by prefix and
pattern, record readers from record N for every format and compression, counts, bad records,
and the offsets' arithmetic."""

from __future__ import annotations

import gzip
import io
import json

import fastavro
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from connectql.connectors.s3 import offsets, records
from connectql.connectors.s3.records import Format
from connectql.connectors.s3.store import Matcher, Place, etag_of, head_etag, list_objects
from tests.s3server import ACCESS_KEY, SECRET_KEY, bucket, s3server  # noqa: F401

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("v", pa.float64())])
ROWS = [{"id": i, "name": f"n{i}", "v": i / 2} for i in range(10)]


def place(server, name) -> Place:
    return Place(name, server.endpoint, "us-east-1", ACCESS_KEY, SECRET_KEY)


def put(fs, path: str, data: bytes) -> None:
    with fs.open_output_stream(path, compression=None) as f:
        f.write(data)


def jsonl(rows) -> bytes:
    return b"".join(json.dumps(r).encode() + b"\n" for r in rows)


def csv_text(rows) -> bytes:
    return ("id,name,v\n" + "".join(f"{r['id']},{r['name']},{r['v']}\n" for r in rows)).encode()


def parquet(rows) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, SCHEMA), sink, row_group_size=3)
    return sink.getvalue()


def avro(rows) -> bytes:
    sink = io.BytesIO()
    schema = {
        "type": "record",
        "name": "r",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": "string"},
            {"name": "v", "type": "double"},
        ],
    }
    fastavro.writer(sink, schema, rows, sync_interval=64)
    return sink.getvalue()


def zstd(data: bytes) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as out:
        out.write(data)
    return sink.getvalue().to_pybytes()


CASES = {
    "a.jsonl": ("jsonl", jsonl),
    "a.jsonl.gz": ("jsonl", lambda rows: gzip.compress(jsonl(rows))),
    "a.jsonl.zst": ("jsonl", lambda rows: zstd(jsonl(rows))),
    "a.csv": ("csv", csv_text),
    "a.csv.gz": ("csv", lambda rows: gzip.compress(csv_text(rows))),
    "a.parquet": ("parquet", parquet),
    "a.avro": ("avro", avro),
}


def read(fs, path, fmt, start, end):
    handle, meta = records.open_object(fs, path, fmt)
    with handle:
        return list(records.chunks(handle, fmt, SCHEMA, start, end)), meta


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_format_reads_from_record_n_and_counts(s3server, bucket, name):  # noqa: F811
    fmt_name, encode = CASES[name]
    fs, fmt = s3server.filesystem(), Format(fmt_name)
    put(fs, f"{bucket}/{name}", encode(ROWS))
    handle, _ = records.open_object(fs, f"{bucket}/{name}", fmt)
    with handle:
        assert records.count(handle, fmt) == records.Count(10)
    found, meta = read(fs, f"{bucket}/{name}", fmt, 4, 9)
    rows = [r for c in found for r in c.batch.to_pylist()]
    assert rows == ROWS[4:9]
    assert [n for c in found for n in c.numbers.to_pylist()] == list(range(4, 9))
    assert found[0].batch.schema == SCHEMA
    assert etag_of(meta)


def test_csv_without_header_and_with_another_delimiter(s3server, bucket):  # noqa: F811
    fs, fmt = s3server.filesystem(), Format("csv", header=False, delimiter=";")
    put(fs, f"{bucket}/a.csv", b"1;x;0.5\n2;y;1.5\n")
    found, _ = read(fs, f"{bucket}/a.csv", fmt, 0, 10)
    assert [r for c in found for r in c.batch.to_pylist()] == [
        {"id": 1, "name": "x", "v": 0.5},
        {"id": 2, "name": "y", "v": 1.5},
    ]


def test_bad_records_are_set_apart_with_record_and_line(s3server, bucket):  # noqa: F811
    fs, fmt = s3server.filesystem(), Format("jsonl")
    lines = [json.dumps(ROWS[0]), "", "{not json", json.dumps(ROWS[1]), '{"id": "x"}']
    put(fs, f"{bucket}/bad.jsonl", "\n".join(lines).encode())
    found, _ = read(fs, f"{bucket}/bad.jsonl", fmt, 0, 100)
    assert [r["id"] for c in found for r in c.batch.to_pylist()] == [0, 1]
    assert [n for c in found for n in c.numbers.to_pylist()] == [0, 2]
    bad = [b for c in found for b in c.bad]
    assert [(b.record, b.line, b.raw) for b in bad] == [
        (1, 3, b"{not json"),
        (3, 5, b'{"id": "x"}'),
    ]
    assert all(b.error for b in bad)


def test_source_column_names_bucket_key_and_record(s3server, bucket):  # noqa: F811
    fs, fmt = s3server.filesystem(), Format("jsonl")
    put(fs, f'{bucket}/in/q"uote.jsonl', jsonl(ROWS[:3]))
    found, _ = read(fs, f'{bucket}/in/q"uote.jsonl', fmt, 1, 3)
    batch = records.with_source(found[0], bucket, 'in/q"uote.jsonl')
    sources = [json.loads(s) for s in batch.column("__source").to_pylist()]
    assert sources == [
        {"bucket": bucket, "key": 'in/q"uote.jsonl', "record": 1},
        {"bucket": bucket, "key": 'in/q"uote.jsonl', "record": 2},
    ]


def test_listing_is_in_key_order_with_prefix_and_pattern(s3server, bucket):  # noqa: F811
    fs = s3server.filesystem()
    for key in ["in/b.jsonl", "in/a.jsonl", "in/sub/c.jsonl", "in/x.csv", "out/d.jsonl",
                "in2/e.jsonl", "_connectql/in/f.jsonl"]:  # fmt: skip
        put(fs, f"{bucket}/{key}", b"{}\n")
    where = place(s3server, bucket)
    keys = [o.key for o in list_objects(fs, where, Matcher("in/"))]
    assert keys == ["in/a.jsonl", "in/b.jsonl", "in/sub/c.jsonl", "in/x.csv"]
    keys = [o.key for o in list_objects(fs, where, Matcher("in/", "in/*.jsonl"))]
    assert keys == ["in/a.jsonl", "in/b.jsonl", "in/sub/c.jsonl"]
    keys = [o.key for o in list_objects(fs, where, Matcher("in", r"/[ab]\.", "regex"))]
    assert keys == ["in/a.jsonl", "in/b.jsonl"]
    assert all(o.size == 3 for o in list_objects(fs, where, Matcher("")))


def test_replaced_object_has_another_etag(s3server, bucket):  # noqa: F811
    fs = s3server.filesystem()
    where = place(s3server, bucket)
    put(fs, f"{bucket}/k.jsonl", jsonl(ROWS[:2]))
    first = head_etag(fs, where, "k.jsonl")
    put(fs, f"{bucket}/k.jsonl", jsonl(ROWS[:3]))
    assert head_etag(fs, where, "k.jsonl") not in ("", first)


def test_offsets_advance_mid_object_and_read_replaced_objects_again():
    found = [offsets.Seen("a", "e1", 100, 5), offsets.Seen("b", "e2", 50, 4)]
    one = offsets.advance(offsets.EMPTY, found, 3)
    assert one["objects"] == {"a": offsets.entry("e1", 100, 3, 5)}
    assert (one["done"], one["bytes"]) == (0, 0)
    two = offsets.advance(one, found, 4)
    assert two["objects"]["a"]["read"] == 5 and two["objects"]["b"]["read"] == 2
    assert offsets.ranges(one, two) == [
        offsets.Range("a", "e1", 3, 5),
        offsets.Range("b", "e2", 0, 2),
    ]
    three = offsets.advance(two, found, None)
    assert (three["done"], three["bytes"]) == (2, 150)
    assert offsets.advance(three, found, None) == three  # nothing new: the same offset
    replaced = offsets.advance(three, [offsets.Seen("a", "e9", 70, 2)], None)
    assert offsets.ranges(three, replaced) == [offsets.Range("a", "e9", 0, 2)]
    assert list(three) == ["objects", "done", "bytes"]
    gone = offsets.advance(three, [], None, {"b"})  # "a" was deleted from the bucket
    assert gone["objects"] == {"b": three["objects"]["b"]} and gone["done"] == 1
    assert offsets.ranges(gone, offsets.advance(gone, found, None, {"a", "b"})) == [
        offsets.Range("a", "e1", 0, 5)  # uploaded again: new
    ]


def test_split_deals_ranges_into_balanced_tasks():
    rs = [offsets.Range(k, "e", 0, n) for k, n in [("a", 10), ("b", 5), ("c", 5), ("d", 1)]]
    groups = offsets.split(rs, 2)
    assert sorted(sum(r.last - r.first for r in g) for g in groups) == [10, 11]
    assert offsets.split(rs[:1], 4) == [rs[:1]]
