"""Testing helpers: run a toolkit source or sink through a real SparkSession, stop it part way
and resume it from its checkpoint, replay its last batch, the way connectql runs it.

    run = SourceRun(MySource, {"path": ...}, tmp_path)
    run.batches(2)            # two micro-batches, then the query stops (offsets kept)
    run.to_end()              # resumes from the checkpoint: everything available now
    run.replay_last_batch()   # Spark forgets it committed the last batch and runs it again
    assert run.rows() == expected   # each record once (a source of several tables:
                                    # run.rows("books"), each table's rows)

SinkRun feeds a sink the same way (add(rows) puts the next micro-batch's rows in its input);
StreamsSinkRun feeds a sink of several streams (add(stream, rows)). options_of(cls, given)
gives the options connectql would make a Source or Sink with, defaults filled in.

The classes must be importable by module name (not defined in __main__): Spark's Python
processes rebuild them from "module:Qualname"."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

from connectql.config import validate

STOP_WAIT_S = 120.0


def session():
    """The process-wide SparkSession with connectql's data sources registered."""
    from connectql.runtime.session import get_session

    return get_session()


def options_of(cls, given: dict[str, Any]) -> dict[str, Any]:
    """The options a Source or Sink class is made with: `given` checked against its declared
    options, their defaults filled in, as connectql does at CREATE. For a test that makes one
    by hand: `MySource(options_of(MySource, {"url": ...}))`."""
    return validate({o.name: o for o in cls.options}, given, cls.__name__)


class _Run:
    """A query over a checkpoint in `workdir`; subclasses say what it reads and writes."""

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.checkpoint = self.workdir / "checkpoint"

    def _query(self, spark, trigger: dict):
        raise NotImplementedError

    def _after_stop(self) -> None:
        """What connectql does once a query has stopped."""

    def batches(self, count: int) -> None:
        """Run micro-batches until `count` more have committed (or no data is left), then stop
        the query: the next run resumes from the checkpoint."""
        before = self._committed()
        query = self._query(session(), {"availableNow": True})
        deadline = time.monotonic() + STOP_WAIT_S
        try:
            while self._committed() < before + count and query.isActive:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{count} batches did not commit in {STOP_WAIT_S}s")
                time.sleep(0.05)
        finally:
            query.stop()
            self._after_stop()
        _raise_failure(query)

    def to_end(self) -> None:
        """Run until everything available now is processed (resuming from the checkpoint)."""
        from pyspark.errors import StreamingQueryException

        query = self._query(session(), {"availableNow": True})
        ended = False
        try:
            ended = query.awaitTermination(STOP_WAIT_S)
        except StreamingQueryException:
            ended = True  # raised below, shorter
        finally:
            query.stop()
            self._after_stop()
        _raise_failure(query)
        if not ended:  # stopped half way: the batches it left would be miscounted
            raise AssertionError(f"the query did not reach the end in {STOP_WAIT_S}s")

    def replay_last_batch(self) -> int:
        """Make Spark believe the last batch never finished (a crash between the sink's write
        and Spark's commit log), then run again: Spark replays that batch. Returns its id."""
        commits = self.checkpoint / "commits"
        last = max(int(p.name) for p in commits.iterdir() if p.name.isdigit())
        (commits / str(last)).unlink()
        (commits / f".{last}.crc").unlink(missing_ok=True)
        self.to_end()
        return last

    def _committed(self) -> int:
        commits = self.checkpoint / "commits"
        return sum(1 for p in commits.iterdir() if p.name.isdigit()) if commits.exists() else 0


def _raise_failure(query) -> None:
    error = query.exception()
    if error is not None:
        raise AssertionError(f"the query failed: {error}")


class SourceRun(_Run):
    """A toolkit Source read into Parquet files (Spark's exactly-once file sink), as a source
    connector reads into its stream. `max_records`: the read limit (batch.max.records)."""

    def __init__(self, cls, options: dict[str, Any], workdir, max_records: int | None = None):
        super().__init__(workdir)
        self.cls, self.options = cls, options_of(cls, options)
        self.max_records = max_records
        self.output = self.workdir / "output"
        self._options: dict[str, str] | None = None

    def _after_stop(self) -> None:
        from connectql.toolkit.spark import commit_after_stop

        if self._options is not None:  # the last batch acknowledged, as connectql does
            commit_after_stop(self._options, str(self.checkpoint), self.cls.__name__)

    def _query(self, spark, trigger: dict):
        from connectql.toolkit.spark import FORMAT, MAX_RECORDS_KEY, ddl, spark_options

        options = spark_options(
            self.cls, self.options, {o.name for o in self.cls.options if o.secret}
        )
        if self.max_records:
            options[MAX_RECORDS_KEY] = str(self.max_records)
        options["connectql.checkpoint"] = str(self.checkpoint)
        self._options = options
        source = self.cls(self.options)
        tables = source.tables()
        if tables:  # packed, as connectql sends several tables' rows
            from pyspark.sql.types import StructType

            from connectql.toolkit.packed import PACKED_DDL, SCHEMAS_OPTION, schemas_option

            parts = [(t.name, StructType.fromDDL(ddl(t.schema))) for t in tables]
            options[SCHEMAS_OPTION] = schemas_option(parts)
        schema = PACKED_DDL if tables else ddl(source.schema())
        df = spark.readStream.format(FORMAT).options(**options).schema(schema).load()
        return (
            df.writeStream.format("parquet")
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(**trigger)
            .start(str(self.output))
        )

    def rows(self, table: str | None = None) -> list[dict]:
        """Every committed row (of `table`, for a source of several tables; its dead letters
        are the table ''), in no particular order."""
        from connectql.toolkit.packed import by_table

        read = _committed(self.output)
        if table is None:
            return [r for t in read for r in t.to_pylist()]
        found = by_table(pa.concat_tables(read)) if read else {}
        return found[table].to_pylist() if table in found else []


class SinkRun(_Run):
    """A toolkit Sink fed from a Parquet input directory, one file per micro-batch, as a sink
    connector reads its stream: add(table) puts the next file there. `dead_letters=True`: the
    rows it rejects go to a dead-letter stream (errors.tolerance = 'all'), see dead_letters()."""

    def __init__(
        self, cls, options: dict[str, Any], workdir, schema: pa.Schema, dead_letters=False
    ):
        super().__init__(workdir)
        self.cls, self.options, self.schema = cls, options_of(cls, options), schema
        self.input = self.workdir / "input"
        self.input.mkdir(parents=True, exist_ok=True)
        self.deadletter = self.workdir / "deadletters" if dead_letters else None
        if self.deadletter:
            (self.deadletter / "_spark_metadata").mkdir(parents=True, exist_ok=True)
        self._files = 0
        self._check()

    def _check(self) -> None:
        """What connectql does at CREATE: the sink's check of the rows' schema."""
        self.sink = self.cls(self.options)
        self.sink.check(self.schema)

    def add(self, rows: list[dict] | pa.Table) -> None:
        import pyarrow.parquet as pq

        table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, self.schema)
        staged = self.workdir / f".{self._files:06d}.parquet"
        pq.write_table(table, staged)
        shutil.move(staged, self.input / f"{self._files:06d}.parquet")
        self._files += 1

    def _secret(self) -> set[str]:
        return {o.name for o in self.cls.options if o.secret}

    def _writer_options(self) -> dict[str, str]:
        from connectql.toolkit.spark import spark_options

        return spark_options(self.cls, self.options, self._secret())

    def _query(self, spark, trigger: dict):
        from connectql.toolkit.spark import FORMAT, ddl

        options = self._writer_options()
        options["connectql.writer"] = "test"
        if self.deadletter:
            options["connectql.deadletter"] = str(self.deadletter)
        df = (
            spark.readStream.schema(ddl(self.schema))
            .option("maxFilesPerTrigger", 1)
            .parquet(str(self.input))
        )
        return (
            df.writeStream.format(FORMAT)
            .options(**options)
            .option("checkpointLocation", str(self.checkpoint))
            .trigger(**trigger)
            .start()
        )

    def dead_letters(self) -> list[dict]:
        """The rows of the dead-letter stream (connector, stage, source_offset, error_class,
        error_message, raw_record, time), in no particular order."""
        read = _committed(self.deadletter) if self.deadletter else []
        return [r for t in read for r in t.to_pylist()]


class StreamsSinkRun(SinkRun):
    """A toolkit Sink that writes several streams (`several = True`), fed as a sink of
    `streams = '...'` is: add(stream, rows) puts the next file (rows of that stream) in the
    input. The toolkit makes a sink per stream from `options` with ${stream} and ${table} (here
    both the stream's name) filled in, told `keys[stream]` as its stream's key, each with a
    writer id of its own; `schemas` gives each stream's rows."""

    def __init__(
        self,
        cls,
        options: dict[str, Any],
        workdir,
        schemas: dict[str, pa.Schema],
        keys: dict[str, tuple[str, ...]] | None = None,
        dead_letters=False,
    ):
        from connectql.toolkit.packed import ROWS_COLUMN, STREAM_COLUMN

        if not getattr(cls, "several", False):
            raise TypeError(f"{cls.__name__} writes one stream (several = False): use SinkRun")
        self.schemas = dict(schemas)
        self.keys = {name: tuple(k) for name, k in (keys or {}).items()}
        packed = pa.schema([(STREAM_COLUMN, pa.string()), (ROWS_COLUMN, pa.binary())])
        super().__init__(cls, options, workdir, packed, dead_letters)

    def _of(self, stream: str) -> dict[str, Any]:
        from connectql.toolkit.routed import filled

        return filled(self.options, stream, stream, self._secret())

    def _check(self) -> None:
        for stream, schema in self.schemas.items():
            sink = self.cls(self._of(stream))
            sink.stream_key = self.keys.get(stream, ())
            sink.check(schema)

    def add(self, stream: str, rows: list[dict] | pa.Table) -> None:
        from connectql.toolkit.packed import ROWS_COLUMN, STREAM_COLUMN, ipc_bytes

        given = self.schemas[stream]
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, given)
        super().add(pa.Table.from_pylist([{STREAM_COLUMN: stream, ROWS_COLUMN: ipc_bytes(table)}]))

    def _writer_options(self) -> dict[str, str]:
        from pyspark.sql.types import StructType

        from connectql.toolkit.routed import routed_options
        from connectql.toolkit.spark import STREAM_KEY_KEY, ddl, spark_options

        routes = []
        for stream, schema in self.schemas.items():
            options = spark_options(self.cls, self._of(stream), self._secret())
            options[STREAM_KEY_KEY] = json.dumps(list(self.keys.get(stream, ())))
            routes.append((stream, StructType.fromDDL(ddl(schema)).jsonValue(), options))
        return routed_options(routes)


def _committed(folder: Path) -> list[pa.Table]:
    """The files committed to a stream-like folder (its `_spark_metadata` log), read."""
    import pyarrow.parquet as pq

    from connectql.catalog.streams import committed_files

    return [pq.read_table(f) for f in committed_files(folder)] if folder.exists() else []
