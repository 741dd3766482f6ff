"""Opening a database file, quoting names, and what SQLite's declared column types mean."""

from __future__ import annotations

import sqlite3

import pyarrow as pa

from connectql.toolkit import Option, ValidationError

PATH = Option("path", required=True, doc="the SQLite database file")
TABLE = Option("table", required=True, doc="the table")


def connect(path: str, must_exist: bool = True) -> sqlite3.Connection:
    """A connection to the file (isolation handled by the caller: BEGIN ... COMMIT)."""
    uri = f"file:{path}?mode={'rw' if must_exist else 'rwc'}"
    try:
        return sqlite3.connect(uri, uri=True, isolation_level=None, timeout=30)
    except sqlite3.OperationalError as e:
        raise ValidationError(f"sqlite: cannot open database file '{path}': {e}") from None


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def columns(con: sqlite3.Connection, table: str) -> list[tuple[str, str]]:
    """(name, declared type) of the table's columns; ValidationError when there is no table."""
    found = [(r[1], r[2]) for r in con.execute(f"PRAGMA table_info({quote(table)})")]
    if not found:
        raise ValidationError(f"sqlite: there is no table '{table}'")
    return found


def arrow_type(declared: str) -> pa.DataType:
    """SQLite's type affinity rules (https://sqlite.org/datatype3.html, 3.1) as Arrow types."""
    text = declared.upper()
    if "INT" in text:
        return pa.int64()
    if any(word in text for word in ("CHAR", "CLOB", "TEXT")) or not text:
        return pa.string()
    if "BLOB" in text:
        return pa.binary()
    return pa.float64()  # REAL, FLOA, DOUB and NUMERIC affinity


def declared_type(arrow: pa.DataType) -> str:
    """The column type a sink declares for an Arrow type."""
    if pa.types.is_integer(arrow) or pa.types.is_boolean(arrow):
        return "INTEGER"
    if pa.types.is_floating(arrow) or pa.types.is_decimal(arrow):
        return "REAL"
    if pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow):
        return "BLOB"
    return "TEXT"
