"""Issue 50's avro values: N messages of the same record (a long, a string, a double, a
timestamp) decoded by the broker sources' shared step (toolkit.messages.ValueFormat.decode, in
pages of 10,000 as a kafka fetch gives them) as schemaless Avro and as JSON, then encoded back
by the sinks' step; no broker (the step alone: every broker source and sink runs it). Each
decoded batch is checked by value, the Avro encoded back byte for byte; messages/s reported,
the median of --repeat runs, with fastavro's own container reader over the same records as the
yardstick of what decoding Avro into Python costs."""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from datetime import datetime, timedelta, timezone

import fastavro
import pyarrow as pa

from bench.common import load
from connectql.toolkit.messages import ValueFormat

PAGE = 10_000
SCHEMA = {"type": "record", "name": "click", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"},
    {"name": "score", "type": "double"},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}}]}  # fmt: skip
DDL = "id BIGINT, name STRING, score DOUBLE, at TIMESTAMP"
T0 = datetime(2026, 12, 7, tzinfo=timezone.utc)


def messages(n: int) -> tuple[list[bytes], list[bytes]]:
    """The same n records as Avro datums and as JSON objects."""
    parsed, avro, text = fastavro.parse_schema(SCHEMA), [], []
    for i in range(n):
        record = {"id": i, "name": f"name-{i}", "score": i / 3, "at": T0 + timedelta(seconds=i)}
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
        avro.append(out.getvalue())
        text.append(json.dumps({**record, "at": record["at"].isoformat()}).encode())
    return avro, text


def decoded(fmt: ValueFormat, values: list[bytes]) -> tuple[float, pa.Table]:
    """Seconds to decode the values page by page, and the rows."""
    started, batches = time.perf_counter(), []
    for at in range(0, len(values), PAGE):
        batch, bad = fmt.decode(values[at : at + PAGE])
        assert not bad, bad[:1]
        batches.append(batch)
    return time.perf_counter() - started, pa.Table.from_batches(batches)


def container_s(avro: list[bytes]) -> float:
    """Seconds fastavro's reader takes over the same records in one container file."""
    parsed, out = fastavro.parse_schema(SCHEMA), io.BytesIO()
    reader = (fastavro.schemaless_reader(io.BytesIO(v), parsed, None) for v in avro)
    fastavro.writer(out, parsed, reader)
    out.seek(0)
    started = time.perf_counter()
    n = sum(1 for _ in fastavro.reader(out))
    assert n == len(avro)
    return time.perf_counter() - started


def check(rows: pa.Table, n: int) -> None:
    assert rows.num_rows == n and rows.column("id").to_pylist() == list(range(n))
    last = rows.slice(n - 1).to_pylist()[0]
    assert last["name"] == f"name-{n - 1}" and last["at"] == T0 + timedelta(seconds=n - 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.avrovalues", description=__doc__)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    avro, text = messages(args.messages)
    formats = {
        "avro": (ValueFormat.of({"format": "avro", "avro.schema": json.dumps(SCHEMA)}, "bench"), avro),
        "json": (ValueFormat.of({"format": "json", "schema": DDL}, "bench"), text),
    }  # fmt: skip
    print(f"{args.messages:,} messages, median of {args.repeat}, load {load()}")
    print(f"fastavro's container reader: {args.messages / container_s(avro):,.0f}/s")
    for name, (fmt, values) in formats.items():
        reads, writes = [], []
        for _ in range(args.repeat):
            seconds, rows = decoded(fmt, values)
            check(rows, args.messages)
            reads.append(seconds)
            started = time.perf_counter()
            encoded = fmt.encode(rows)
            writes.append(time.perf_counter() - started)
            assert len(encoded) == args.messages and (name != "avro" or encoded == values)
        per_s = lambda s: f"{args.messages / statistics.median(s):,.0f}/s"  # noqa: E731
        print(f"{name}: decoded {per_s(reads)}, encoded {per_s(writes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
