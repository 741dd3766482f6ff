"""Small connectors built only on connectql.toolkit, for the toolkit's tests."""

from __future__ import annotations

import contextlib
import json
import os
import threading
from itertools import pairwise
from pathlib import Path

import pyarrow as pa

from connectql.toolkit import (
    Connector,
    DeadLetter,
    Option,
    Rejected,
    Retryable,
    SchemaEvolved,
    Sink,
    Source,
    Table,
    TableFailed,
)


class Counter(Source):
    """Records {id, text} for id 0..count-1; offsets {"n": records before}. Every `bad`-th
    record is a dead letter; `flaky`: a file whose existence makes the first read of each
    partition raise Retryable (and which that read removes)."""

    options = (
        Option("count", "int", required=True, doc="how many records"),
        Option("bad", "int", 0, doc="every bad-th record does not parse (0: none)"),
        Option("flaky", doc="a file: while it exists, a read fails once with Retryable"),
        Option("tasks.max", "int", 1, doc="partitions per batch"),
        Option("token", secret=True, doc="a secret the source never shows"),
        Option("dropped", doc="a file DROP CONNECTOR writes the connector's name into"),
    )
    lag_field = "n"
    retry_backoff_ms = 10

    def schema(self):
        return pa.schema([("id", pa.int64()), ("text", pa.string())])

    def initial_offset(self):
        return {"n": 0}

    def latest_offset(self, start):
        return {"n": self.options["count"]}

    def end_offset(self, start, latest, max_records):
        return {"n": min(latest["n"], start["n"] + max_records)}

    def partitions(self, start, end):
        lo, hi, k = start["n"], end["n"], self.options["tasks.max"]
        cuts = [lo + (hi - lo) * i // k for i in range(k + 1)]
        return [{"lo": a, "hi": b} for a, b in pairwise(cuts) if b > a]

    def endpoint(self):
        return "counter.test:9"

    def on_drop(self, connector):
        marker = self.options.get("dropped")
        if not marker:
            return None
        Path(marker).write_text(connector)
        return f"wrote {marker}"

    def read(self, partition):
        flaky = self.options.get("flaky")
        if flaky and os.path.exists(flaky):
            os.remove(flaky)
            raise Retryable("the server is restarting")
        bad = self.options["bad"]
        for i in range(partition["lo"], partition["hi"]):
            if bad and i % bad == bad - 1:
                yield DeadLetter(raw=f"#{i}", error="not a number", offset={"n": i})
            else:
                yield {"id": i, "text": f"record {i}"}


class Shelves(Counter):
    """Counter's records on two tables: even ids are books (dicts), odd ids pens (one-row
    RecordBatches, columns in another order); `stray`: a record of a table it does not have;
    `broken`: the pens from that id on cannot be read (TableFailed; skipped once failed)."""

    options = (
        *Counter.options,
        Option("stray", "bool", False, doc="yield an unknown table"),
        Option("broken", "int", 0, doc="the first pen that cannot be read (0: none)"),
    )

    def tables(self):
        books = pa.schema([("id", pa.int64()), ("title", pa.string())])
        return [Table("books", books, ("id",)), Table("pens", "id BIGINT, color STRING")]

    def read(self, partition):
        if self.options["stray"]:
            yield "cups", {"id": 0}
        for record in super().read(partition):
            if isinstance(record, DeadLetter):
                yield record
            elif record["id"] % 2 == 0:
                yield "books", {"id": record["id"], "title": record["text"]}
            elif "pens" in self.failed:
                continue
            elif 0 < self.options["broken"] <= record["id"]:
                raise TableFailed("pens", f"pen {record['id']}: its color cannot be read")
            else:
                color = pa.array([f"c{record['id']}"])
                yield (
                    "pens",
                    pa.RecordBatch.from_arrays(
                        [color, pa.array([record["id"]])], names=["color", "id"]
                    ),
                )


class Growing(Counter):
    """Counter whose records gain a column `size` once the file `grown` exists: then `count`
    more records are there, with it, and schema() has it too."""

    options = (*Counter.options, Option("grown", required=True, doc="a file: records grew"))

    def grew(self) -> bool:
        return os.path.exists(self.options["grown"])

    def schema(self):
        return (
            super().schema().append(pa.field("size", pa.int64()))
            if self.grew()
            else super().schema()
        )

    def latest_offset(self, start):
        return {"n": self.options["count"] * (2 if self.grew() else 1)}

    def read(self, partition):
        for record in super().read(partition):
            if record["id"] >= self.options["count"]:
                if "size" not in self.stream_schemas[None].names:
                    raise SchemaEvolved("records have a new column: size")
                record["size"] = record["id"] * 10
            yield record


class JsonDir(Sink):
    """Each batch one JSON-lines file named for its writer and batch id, made visible by a
    rename (so the file is the record of the batch id: exactly-once)."""

    options = (Option("path", required=True, doc="directory of the files"),)

    def check(self, schema):
        Path(self.options["path"]).mkdir(parents=True, exist_ok=True)

    def last_batch(self, writer):
        ids = [
            int(p.stem.rsplit("-", 1)[1])
            for p in Path(self.options["path"]).glob(f"{writer}-*.json")
        ]
        return max(ids, default=None)

    def write(self, writer, batch_id, data):
        target = Path(self.options["path"]) / f"{writer}-{batch_id:08d}.json"
        temp = target.with_suffix(".tmp")
        temp.write_text("".join(json.dumps(r) + "\n" for r in data.to_pylist()))
        temp.replace(target)


class Opened(JsonDir):
    """JsonDir that notes each open (writer, epoch, connector, its stream's key, each field's
    comment) as a JSON line in the file `opened`."""

    options = (
        *JsonDir.options,
        Option("opened", required=True, doc="a file: a line per open"),
        Option("skip", doc="a column it never reads"),
    )

    def unread_columns(self):
        return [self.options["skip"]] if self.options.get("skip") else []

    def open(self, writer, schema):
        comments = {f.name: (f.metadata or {}).get(b"comment", b"").decode() for f in schema}
        seen = [writer, self.epoch, self.connector, list(self.stream_key), comments]
        with open(self.options["opened"], "a") as f:
            f.write(json.dumps(seen) + "\n")


class Chunked(Counter):
    """Counter whose micro-batches it cuts itself, `chunk` records each (plans_batches)."""

    options = (*Counter.options, Option("chunk", "int", 10, doc="records per micro-batch"))
    plans_batches = True

    def latest_offset(self, start):
        return {"n": min(start["n"] + self.options["chunk"], self.options["count"])}


class Picky(JsonDir):
    """JsonDir that refuses a record whose text has a 9, one per call (as a target that stops
    at the first bad row would): the toolkit asks again, round after round. `crash`: a file
    whose existence fails the write of the rows left (once: the write removes it)."""

    options = (*JsonDir.options, Option("crash", doc="a file: while it exists, a write fails"))
    rejects = True

    def write(self, writer, batch_id, data):
        texts = data.column("text").to_pylist()
        bad = next((i for i, t in enumerate(texts) if "9" in t), None)
        if bad is not None:
            raise Rejected({bad: ValueError(f"no nines: {texts[bad]!r}")})
        crash = self.options.get("crash")
        if crash and os.path.exists(crash):
            os.remove(crash)
            raise RuntimeError("the target went away")
        super().write(writer, batch_id, data)


class Sloppy(Picky):
    """Picky, but its Rejected also names a row its data does not have."""

    def write(self, writer, batch_id, data):
        raise Rejected({0: "first", data.num_rows: "one past the end"})


class StagedPicky(Picky):
    """Picky as a staged sink: each task stages its rows in a part file, and `commit` merges
    the parts into the batch's file; a record with a 9 is found there, one per call, named
    by (task, row in the part). `sloppy`: its Rejected leaves out the record."""

    options = (*Picky.options, Option("sloppy", "bool", False, doc="Rejected without records"))

    def _part(self, writer, batch_id, task) -> Path:
        return Path(self.options["path"]) / f".{writer}-{batch_id}-{task}.part"

    def stage(self, writer, batch_id, task, data):
        part = self._part(writer, batch_id, task)
        part.write_text("".join(json.dumps(r) + "\n" for r in data.to_pylist()))
        return part

    def commit(self, writer, batch_id, staged):
        rows = {
            (int(Path(part).stem.rsplit("-", 1)[1]), i): json.loads(line)
            for part in staged
            for i, line in enumerate(Path(part).read_text().splitlines())
        }
        kept = {k: r for k, r in rows.items() if k not in self.rejected}
        bad = next((k for k, r in sorted(kept.items()) if "9" in r["text"]), None)
        if bad is not None:
            records = {} if self.options["sloppy"] else {bad: kept[bad]}
            raise Rejected({bad: ValueError(f"no nines: {kept[bad]['text']!r}")}, records)
        crash = self.options.get("crash")
        if crash and os.path.exists(crash):
            os.remove(crash)
            raise RuntimeError("the target went away")
        if kept:
            JsonDir.write(self, writer, batch_id, pa.Table.from_pylist(list(kept.values())))
        self.abort(writer, batch_id, staged)

    def abort(self, writer, batch_id, staged):
        for part in staged:
            Path(part).unlink(missing_ok=True)


class Streaming(JsonDir):
    """JsonDir that writes each task's rows batch by batch as they arrive (stage_batches) into
    a part file, never holding them whole; commit renames the parts into the batch's files and
    notes in `sizes.txt` the sizes of the batches each task got."""

    def stage_batches(self, writer, batch_id, task, rows):
        part = Path(self.options["path"]) / f".{writer}-{batch_id}-{task}.part"
        sizes = []
        with part.open("w") as out:
            for batch in rows:
                sizes.append(batch.num_rows)
                out.write("".join(json.dumps(r) + "\n" for r in batch.to_pylist()))
        return str(part), sizes

    def commit(self, writer, batch_id, staged):
        folder = Path(self.options["path"])
        for n, (part, _sizes) in enumerate(staged):
            Path(part).replace(folder / f"{writer}-{batch_id:08d}-{n}.json")
        (folder / "sizes.txt").write_text(json.dumps([sizes for _part, sizes in staged]))

    def last_batch(self, writer):
        files = Path(self.options["path"]).glob(f"{writer}-*.json")
        return max((int(p.stem.split("-")[1]) for p in files), default=None)


def written(path) -> list[dict]:
    return [
        json.loads(line)
        for p in sorted(Path(path).glob("*.json"))
        for line in p.read_text().splitlines()
    ]


class Keyed(Counter):
    """Counter whose records are identified by id (key()), each carrying the name of the
    connector that read it and whether its checkpoint is a directory; `asked`: a file that
    schema() adds a line to each time it is asked."""

    options = (*Counter.options, Option("asked", required=True, doc="a file: a line per ask"))

    def schema(self):
        with open(self.options["asked"], "a") as f:
            f.write("schema\n")
        return super().schema()

    def key(self):
        return ("id",)

    def read(self, partition):
        for record in super().read(partition):
            yield {**record, "text": f"{self.connector} {os.path.isdir(self.checkpoint)}"}


class Shelf(Opened):
    """Opened that writes several streams (one query, `streams`); `together` notes each round
    (how many sinks it wraps, in which process) as a line of the file `rounds`."""

    options = (*Opened.options, Option("rounds", required=True, doc="a file: a line per round"))
    several = True
    target_options = {"path": ""}  # a folder per stream: path = '.../${stream}'

    @classmethod
    @contextlib.contextmanager
    def together(cls, sinks):
        with open(sinks[0].options["rounds"], "a") as f:
            f.write(json.dumps([len(sinks), os.getpid()]) + "\n")
        yield


COUNTER = Connector("counter", "numbered test records", source=Counter, sink=JsonDir)
PICKY = Connector("picky", "JSON files without nines", sink=Picky)
GROWING = Connector("growing", "numbered records that gain a column", source=Growing)
SHELVES = Connector("shelves", "numbered test records in two tables", source=Shelves)
KEYED = Connector("keyed", "numbered records with a key", source=Keyed, sink=Opened)
SHELF = Connector("shelf", "JSON files, a folder per stream", sink=Shelf)


class Greedy(Counter):
    """Declares `stream`, which connectql owns."""

    options = (*Counter.options, Option("stream", doc="where the records go"))


GREEDY = Connector("greedy", "a source that declares stream", source=Greedy)


class Acking(Counter):
    """Counter whose commit(end) writes the end it acknowledges to the file `acks` (a broker's
    ack floor); `refuse`: a file whose existence makes commit raise Retryable."""

    options = (
        *Counter.options,
        Option("acks", required=True, doc="a file each acknowledged end is appended to"),
        Option("refuse", doc="a file: while it exists, commit raises Retryable"),
    )
    retries = 2

    def commit(self, end):
        refuse = self.options.get("refuse")
        if refuse and os.path.exists(refuse):
            raise Retryable("the broker does not answer")
        with open(self.options["acks"], "a") as f:
            f.write(f"{end['n']}\n")


ACKING = Connector("acking", "numbered records acknowledged in a file", source=Acking)

HANG = threading.Event()  # set to let a Hanging source's check return


class Hanging(Counter):
    """A check that does not return until HANG is set (a broker client that reconnects for
    ever)."""

    def check(self) -> None:
        HANG.wait(600)


HANGING = Connector("hanging", "a source whose check hangs", source=Hanging)
