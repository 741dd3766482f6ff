"""The worker's logs, worker.log (every Python logger), spark.log (Spark's log4j) and jvm.log
(the JVM's own output), each line scrubbed of secret values before it is written, whoever
writes it (a client library too)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from connectql.catalog.redact import scrub

REDACT_PROPERTY = "connectql.redact"  # read by log4j2.properties' %replace


class SecretFilter(logging.Filter):
    """Rewrites a record's message and traceback with every current secret masked."""

    def __init__(self, secrets: Callable[[], Iterable[str]]):
        super().__init__()
        self._secrets = secrets

    def filter(self, record: logging.LogRecord) -> bool:
        values = [v for v in self._secrets() if v]
        if not values:
            return True
        record.msg, record.args = scrub(record.getMessage(), values), None
        if record.exc_info:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
            record.exc_info = None
        if record.exc_text:
            record.exc_text = scrub(record.exc_text, values)
        if record.stack_info:
            record.stack_info = scrub(record.stack_info, values)
        return True


def log_to(path: Path, secrets: Callable[[], Iterable[str]]) -> logging.Handler:
    """Send every Python logger's records (connectql's from INFO, others' from WARNING) to
    `path` through a SecretFilter; returns the handler, for `stop_logging`."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    handler.addFilter(SecretFilter(secrets))
    logging.getLogger().addHandler(handler)
    logging.getLogger("connectql").setLevel(logging.INFO)
    return handler


def stop_logging(handler: logging.Handler) -> None:
    logging.getLogger().removeHandler(handler)
    handler.close()


def scrubbed_pipe(path: Path, secrets: Callable[[], Iterable[str]]) -> int:
    """The write end of a pipe whose lines a daemon thread appends to `path` with every secret
    masked: for a child process's output (the JVM's, and Spark's Python workers' it starts)."""
    read_fd, write_fd = os.pipe()
    copy = threading.Thread(
        target=_copy_lines, args=(read_fd, path, secrets), name="jvm-output", daemon=True
    )
    copy.start()
    return write_fd


def _copy_lines(read_fd: int, path: Path, secrets: Callable[[], Iterable[str]]) -> None:
    out_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(read_fd, "rb") as lines, os.fdopen(out_fd, "ab") as out:
        for line in lines:  # until every process holding the write end has exited
            text = scrub(line.decode("utf-8", "replace"), [v for v in secrets() if v])
            out.write(text.encode())
            out.flush()


def java_pattern(values: Iterable[str]) -> str:
    """A Java regex matching any of `values`, written with letters, digits and \\uXXXX escapes
    only, so no value can break log4j's %replace{...}{...}{...} pattern (braces, $, quotes)."""

    def escaped(value: str) -> str:
        out = []
        for ch in value:
            if ch.isascii() and ch.isalnum():
                out.append(ch)
            else:
                units = ch.encode("utf-16-be")
                out.extend(f"\\u{units[i]:02X}{units[i + 1]:02X}" for i in range(0, len(units), 2))
        return "".join(out)

    alternatives = sorted({escaped(v) for v in values if v and len(v) >= 3}, key=len, reverse=True)
    return "|".join(alternatives) or "(?!)"


def redact_spark_log(spark, values: Iterable[str]) -> None:
    """Make Spark's log4j mask `values` from now on (the pattern is read at reconfiguration)."""
    jvm = spark._jvm
    jvm.java.lang.System.setProperty(REDACT_PROPERTY, java_pattern(values))
    jvm.org.apache.logging.log4j.LogManager.getContext(False).reconfigure()
