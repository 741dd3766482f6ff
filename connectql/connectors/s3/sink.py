"""The s3 sink on the connector toolkit: each task writes its rows as complete objects under a
staging prefix; the batch's commit copies them to their names and records the batch, so a
reader never sees a partial object and a replayed batch writes the same names and content."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from connectql.config import Option
from connectql.connectors.s3.objects import (
    COMPRESSIONS,
    SINK_FORMATS,
    ObjectFormat,
    Template,
    avro_schema,
)
from connectql.connectors.s3.options import STORE_OPTIONS
from connectql.connectors.s3.store import INTERNAL, place_of, require_bucket
from connectql.errors import PermanentError, ValidationError
from connectql.toolkit import Retryable, Sink
from connectql.toolkit.sink import own_trigger

SINK_OPTIONS = (
    *STORE_OPTIONS.values(),
    Option("prefix", default="", doc="put every object's name after this, e.g. 'out/'"),
    Option(
        "format",
        "enum",
        "parquet",
        choices=SINK_FORMATS,
        doc="object format: parquet, jsonl (one JSON object per line), csv (with a header) or avro",
    ),
    Option(
        "compression",
        "enum",
        choices=COMPRESSIONS,
        doc="parquet: none, snappy (default), gzip, zstd; jsonl and csv: none (default), gzip,"
        " zstd (the name gets .gz or .zst); avro: none (default) or gzip (deflate)",
    ),
    Option(
        "file.name.template",
        default="{stream}/{partition}/{start_offset}.{ext}",
        doc="object names: {stream}, {partition} (the writer task), {start_offset} (records the"
        " sink wrote before the object, 20 digits), {batch} (micro-batch id), {ext}",
    ),
    Option(
        "file.max.records",
        "int",
        doc="at most this many records per object: keep objects under 5 GiB, the most S3 copies"
        " in one request (the commit's server-side copy), and a task holds no more at once;"
        " absent: one object per task and micro-batch (objects roll at every micro-batch:"
        " file.flush.interval.ms sets how often)",
    ),
    Option(
        "file.flush.interval.ms",
        "int",
        doc="roll objects by time: a micro-batch, which writes each task's records as objects,"
        " starts at most this often, so a record waits up to this long and an object holds up to"
        " this long's records; absent: as fast as records arrive. Sets the sink's trigger, so"
        " it cannot be given with trigger.interval",
    ),
)


class S3Sink(Sink):
    """stage (executors) writes staged objects; commit (driver) names and publishes them."""

    options = SINK_OPTIONS
    delivery = "exactly-once"
    #: streams = 'shop_*': each stream's objects named by the template's {stream}
    several = True
    target_options = {"file.name.template": "{stream}"}
    #: the commit publishes each object with one server-side copy (CopyObject), and S3 copies
    #: at most 5 GiB in one request
    COPY_LIMIT = 5 * 1024**3

    def __init__(self, opts: dict[str, Any]):
        super().__init__(opts)
        self.place = place_of(opts)
        default = "snappy" if opts["format"] == "parquet" else "none"
        self.format = ObjectFormat(opts["format"], opts.get("compression") or default)
        self.template = Template(opts["file.name.template"])
        self.max_records = opts.get("file.max.records")
        self.stream = opts.get("stream") or "stream"
        self.prefix = opts.get("prefix") or ""
        self._fs = None

    def __getstate__(self):
        return {**self.__dict__, "_fs": None}

    @property
    def fs(self):
        if self._fs is None:
            self._fs = self.place.filesystem()
        return self._fs

    def flush_interval_ms(self) -> int | None:
        return own_trigger(self.options, "file.flush.interval.ms", "s3 sink", "objects roll")

    def check(self, schema: pa.Schema) -> None:
        self.format.check()
        if self.max_records is not None and self.max_records < 1:
            raise ValidationError("s3 sink: file.max.records must be at least 1")
        if self.format.name == "avro":
            avro_schema(schema)
        _io(lambda: require_bucket(self.fs, self.place, "s3 sink"), self.place.where())

    # -- executors ----------------------------------------------------------------------
    def stage(self, writer: str, batch_id: int, task: int, data: pa.Table) -> list[list]:
        """The task's rows as staged objects: [[task, staging key, records], ...]."""
        rows = pa.RecordBatchReader.from_batches(data.schema, data.to_batches())
        return self.stage_batches(writer, batch_id, task, rows)

    def stage_batches(self, writer: str, batch_id: int, task: int, rows) -> list[list]:
        """The task's rows as staged objects, each written once it holds file.max.records
        records (the last with the rest), so that a task holds at most that many at once."""
        staged: list[list] = []
        held: list[pa.RecordBatch] = []
        count, most = 0, self.max_records
        for batch in rows:
            while batch.num_rows:
                room = most - count if most else batch.num_rows
                held.append(batch.slice(0, room))
                count += min(room, batch.num_rows)
                batch = batch.slice(room)
                if count == most:
                    staged.append(self._staged(writer, batch_id, task, len(staged), held))
                    held, count = [], 0
        if count:
            staged.append(self._staged(writer, batch_id, task, len(staged), held))
        return staged

    def _staged(self, writer: str, batch_id: int, task: int, n: int, held) -> list:
        """One staged object of `held` (record batches): [task, staging key, records]."""
        piece = pa.Table.from_batches(held)
        key = f"{self._home(writer)}/{batch_id}/{task:05d}-{n:05d}.{self.format.ext}"
        # the format compresses; pyarrow would compress a second time by the suffix
        with self.fs.open_output_stream(self.place.path(key), compression=None) as out:
            self.format.write(out, piece)
        self._copyable(key, piece.num_rows)
        return [task, key, piece.num_rows]

    def _copyable(self, key: str, records: int) -> None:
        """A PermanentError naming file.max.records for an object the commit cannot copy."""
        size = self.fs.get_file_info(self.place.path(key)).size
        if size > self.COPY_LIMIT:
            fits = max(1, records * self.COPY_LIMIT // size // 2)
            raise PermanentError(
                f"s3 sink: an object of {records} records is {size} bytes, more than the"
                f" {self.COPY_LIMIT} bytes S3 copies in one request (the commit publishes each"
                f" object with one server-side copy); set file.max.records lower, e.g. {fits}"
            )

    # -- driver ---------------------------------------------------------------------------
    def last_batch(self, writer: str) -> int | None:
        return self._progress(writer)["batch"]

    def commit(self, writer: str, batch_id: int, staged: list[Any]) -> None:
        """Copy each staged object to its name, then record the batch: a kill in between
        replays the batch, which copies the same objects to the same names again."""
        offset = self._progress(writer)["records"]
        for task, key, count in sorted(s for task_staged in staged for s in task_staged):
            name = self.template.name(self.stream, task, offset, batch_id, self.format.ext)
            _io(lambda k=key, n=name: self.fs.copy_file(self.place.path(k), self._target(n)), key)
            offset += count
        progress = json.dumps({"batch": batch_id, "records": offset}).encode()
        with self.fs.open_output_stream(self.place.path(self._progress_key(writer))) as out:
            out.write(progress)
        self._drop(writer, batch_id)

    def abort(self, writer: str, batch_id: int, staged: list[Any]) -> None:
        self._drop(writer, batch_id)

    def _target(self, name: str) -> str:
        return self.place.path(self.prefix + name)

    def _home(self, writer: str) -> str:
        return f"{INTERNAL}{writer}"

    def _progress_key(self, writer: str) -> str:
        return f"{self._home(writer)}/progress.json"

    def _progress(self, writer: str) -> dict:
        path = self.place.path(self._progress_key(writer))
        try:
            with self.fs.open_input_stream(path) as f:
                return json.loads(f.read())
        except FileNotFoundError:
            return {"batch": None, "records": 0}

    def _drop(self, writer: str, batch_id: int) -> None:
        self.fs.delete_dir_contents(
            self.place.path(f"{self._home(writer)}/{batch_id}"), missing_dir_ok=True
        )


def _io(call, what: str):
    try:
        return call()
    except OSError as e:
        raise Retryable(f"s3 sink: {what}: {e}") from None
