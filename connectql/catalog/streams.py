"""A stream's committed files, read from the Spark file sink's `_spark_metadata` log (a glob
would also see the 0-byte part files a killed batch leaves behind)."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote, urlparse


def _log_files(meta: Path) -> list[Path]:
    """The compacted log file (if any) and every batch file after it, in batch order."""
    batches = []
    for f in meta.iterdir():
        stem = f.name.removesuffix(".compact")
        if stem.isdigit() and not f.name.startswith("."):
            batches.append((int(stem), f.name.endswith(".compact"), f))
    batches.sort()
    last_compact = max((b for b, compact, _ in batches if compact), default=-1)
    return [f for b, compact, f in batches if b > last_compact or (b == last_compact and compact)]


def committed_files(stream_path: str | Path) -> list[str]:
    """Local paths of the data files the stream's writers have committed."""
    meta = Path(stream_path) / "_spark_metadata"
    if not meta.is_dir():
        return []
    files: dict[str, None] = {}
    for log in _log_files(meta):
        for line in log.read_text().splitlines()[1:]:  # first line is the log version
            if not line.strip():
                continue
            entry = json.loads(line)
            path = unquote(urlparse(entry["path"]).path)
            if entry.get("action", "add") == "add":
                files[path] = None
            else:
                files.pop(path, None)
    return list(files)


_DUCK_TYPES = {
    "long": "BIGINT",
    "integer": "INTEGER",
    "short": "SMALLINT",
    "byte": "TINYINT",
    "double": "DOUBLE",
    "float": "FLOAT",
    "string": "VARCHAR",
    "boolean": "BOOLEAN",
    "timestamp": "TIMESTAMPTZ",
    "timestamp_ntz": "TIMESTAMP",
    "date": "DATE",
    "binary": "BLOB",
}


def duck_type(spark_type) -> str:
    if isinstance(spark_type, str) and spark_type.startswith("decimal"):
        return spark_type.upper()
    return _DUCK_TYPES.get(spark_type, "VARCHAR") if isinstance(spark_type, str) else "VARCHAR"


def empty_relation(schema_json: str | None) -> str:
    """A DuckDB query with the stream's columns and no rows (a stream with no committed file)."""
    fields = json.loads(schema_json)["fields"] if schema_json else []
    cols = ", ".join(f'CAST(NULL AS {duck_type(f["type"])}) AS "{f["name"]}"' for f in fields)
    return f"SELECT {cols or 'NULL AS none'} WHERE false"
