"""Arrow-native range reads through connectorx (Rust): a SELECT's rows arrive as Arrow record
batches without a Python row loop. Used where a range's bounds are plain integers; a dialect
falls back to its own reader for anything else (NOTES.md, "The Arrow floor for a bulk copy")."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from urllib.parse import quote

import pyarrow as pa

BATCH_ROWS = 65_536
_INTEGER = re.compile(r"^-?\d{1,19}$")


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


def batches(address: str, sql: str, setup: str) -> Iterator[pa.RecordBatch]:
    """The rows of `sql` as record batches, `setup` (a SET statement) run first."""
    import connectorx

    reader = connectorx.read_sql(
        address,
        sql,
        return_type="arrow_stream",
        pre_execution_query=setup,
        batch_size=BATCH_ROWS,
    )
    yield from reader


UNREADABLE = object()


def first(reader: Iterator[pa.RecordBatch]):
    """The first batch of `reader`, None when it has none, UNREADABLE when connectorx cannot
    read the query (a column type it does not know: it raises, or panics)."""
    try:
        return next(reader, None)
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException:  # noqa: B036 (pyo3's PanicException is a BaseException)
        return UNREADABLE
