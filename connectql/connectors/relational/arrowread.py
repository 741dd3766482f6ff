"""Arrow-native range reads through connectorx (Rust): a SELECT's rows arrive as Arrow record
batches without a Python row loop. Used where a range's bounds are plain integers; a dialect
falls back to its own reader for anything else (NOTES.md, "The Arrow floor for a bulk copy")."""

from __future__ import annotations

import faulthandler
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from urllib.parse import quote

import pyarrow as pa

BATCH_ROWS = 65_536
_INTEGER = re.compile(r"^-?\d{1,19}$")
# past read.timeout.ms the server's own statement timeout has had its chance to end the read
GRACE_S = 5.0


def inline(sql: str, params: Sequence) -> str | None:
    """`sql` with its %s placeholders replaced by `params` when every one is an integer's text
    and the text has no other % (a query's own); None otherwise."""
    texts = [str(p) for p in params]
    if sql.count("%") != len(texts) or sql.count("%s") != len(texts):
        return None
    if not all(_INTEGER.match(t) for t in texts):
        return None
    for text in texts:
        sql = sql.replace("%s", text, 1)
    return sql


def url(scheme: str, cfg: dict, default_port: int) -> str | None:
    """A connectorx URL for a connection config (host, port, user, password, database); None
    without a database (connectorx needs one)."""
    if not cfg.get("database"):
        return None
    user = quote(str(cfg.get("user") or ""), safe="")
    password = quote(str(cfg.get("password") or ""), safe="")
    host = cfg.get("host", "localhost")
    port = int(cfg.get("port", default_port))
    database = quote(str(cfg["database"]), safe="")
    return f"{scheme}://{user}:{password}@{host}:{port}/{database}"


def read(address: str, sql: str, setup, target: pa.Schema, text=None, read_s=None):
    """The rows of `sql` (`setup`: SET statements run first) as record batches of `target`;
    string columns whose target is not a string or binary go through `text(array, type)`
    (default: Arrow's cast). None when connectorx cannot read the query (a column type it
    does not know: it raises, or panics), or when a read bound (`read_s`) cannot be kept
    here (see watchdog): the caller's bounded driver reads it instead."""
    if read_s is not None and not can_watch():
        return None
    reader = batches(address, sql, setup, read_s)
    try:
        first = next(reader, None)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # noqa: B036 (pyo3's PanicException is a BaseException)
        return None
    return _cast(first, reader, target, text)


def batches(address: str, sql: str, setup, read_s=None) -> Iterator[pa.RecordBatch]:
    """The batches of `sql`; each call into connectorx (connecting and running the query, each
    next batch) ends the process if it takes longer than `read_s` + GRACE_S (watchdog)."""
    import connectorx

    with watchdog(read_s):
        stream = iter(
            connectorx.read_sql(
                address, sql, return_type="arrow_stream", pre_execution_query=setup,
                batch_size=BATCH_ROWS,
            )
        )  # fmt: skip
    while True:
        with watchdog(read_s):
            batch = next(stream, None)
        if batch is None:
            return
        yield batch


def can_watch() -> bool:
    """In a Spark task of a Python worker (the process a watchdog may end), unless Spark's
    own periodic traceback dumps (spark.python.worker.tracebackDumpIntervalSeconds) use
    faulthandler's one timer."""
    from pyspark import TaskContext

    dumping = int(os.environ.get("PYTHON_TRACEBACK_DUMP_INTERVAL_SECONDS") or 0) > 0
    return TaskContext.get() is not None and not dumping


@contextmanager
def watchdog(read_s: float | None):
    """Ends the process (exit code 1, the stuck thread's traceback on stderr) if the body
    runs longer than `read_s` + GRACE_S. connectorx holds the GIL while it waits on the server
    and its Rust drivers have no read timeout, so nothing in Python (a thread, a signal) can
    end a read from a server that stopped answering: faulthandler's timer is a C thread. Spark
    then fails the task (the Python worker crashed) and the connector is retried."""
    if read_s is None:
        yield
        return
    faulthandler.dump_traceback_later(read_s + GRACE_S, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def _cast(first, reader, target: pa.Schema, text) -> Iterator[pa.RecordBatch]:
    if first is None:
        return
    yield _exact(first, target, text)
    for batch in reader:
        yield _exact(batch, target, text)


def _exact(batch: pa.RecordBatch, target: pa.Schema, text) -> pa.RecordBatch:
    arrays = []
    for column, field in zip(batch.columns, target, strict=True):
        is_text = pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
        if is_text and text is not None and not pa.types.is_binary(field.type):
            column = text(column.cast(pa.string()), field.type)
        if pa.types.is_date32(field.type) and pa.types.is_integer(column.type):
            column = column.cast(pa.int32())  # days since the epoch
        if pa.types.is_decimal128(field.type) and pa.types.is_string(column.type):
            # Arrow's text to decimal128 cast wraps a value of 21 to 38 integer digits around
            # (1.2e29 arrived as 4.6e19); through decimal256 it raises as the COPY path does
            column = column.cast(pa.decimal256(76, field.type.scale))
        arrays.append(column.cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=target)
