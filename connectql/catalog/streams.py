"""A stream's `_spark_metadata` log, in the format of Spark's file sink: reading the committed
files (a glob would also see the 0-byte part files a killed batch leaves behind) and appending
new ones."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlparse


def log_files(meta: Path) -> list[Path]:
    """The compacted log file (if any) and every batch file after it, in batch order."""
    batches = []
    if not meta.is_dir():
        return []
    for f in meta.iterdir():
        stem = f.name.removesuffix(".compact")
        if stem.isdigit() and not f.name.startswith("."):
            batches.append((int(stem), f.name.endswith(".compact"), f))
    batches.sort()
    last_compact = max((b for b, compact, _ in batches if compact), default=-1)
    return [f for b, compact, f in batches if b > last_compact or (b == last_compact and compact)]


def committed_entries(stream_path: str | Path) -> list[dict]:
    """The log entries (Spark's SinkFileStatus JSON) of the files committed to a stream."""
    meta = Path(stream_path) / "_spark_metadata"
    if not meta.is_dir():
        return []
    files: dict[str, dict] = {}
    for log in log_files(meta):
        for line in log.read_text().splitlines()[1:]:  # first line is the log version
            if not line.strip():
                continue
            entry = json.loads(line)
            if entry.get("action", "add") == "add":
                files[entry["path"]] = entry
            else:
                files.pop(entry["path"], None)
    return list(files.values())


def local_path(uri: str) -> str:
    """A path of the metadata log (a file: URI) as a local path."""
    return unquote(urlparse(uri).path)


def committed_files(stream_path: str | Path) -> list[str]:
    """Local paths of the data files the stream's writers have committed."""
    return [local_path(e["path"]) for e in committed_entries(stream_path)]


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


# Spark's file-sink log reader expects every 10th batch file as `N.compact` holding all entries.
COMPACT_INTERVAL = 10
_append_lock = threading.Lock()


def _entry(path: Path) -> dict:
    st = path.stat()
    return {
        "path": path.resolve().as_uri(),
        "size": st.st_size,
        "isDir": False,
        "modificationTime": int(st.st_mtime * 1000),
        "blockReplication": 1,
        "blockSize": 33554432,
        "action": "add",
    }


def _latest_batch(meta: Path) -> int:
    ids = [
        int(f.name.removesuffix(".compact"))
        for f in meta.iterdir()
        if f.name.removesuffix(".compact").isdigit()
    ]
    return max(ids, default=-1)


def append_files(stream_path: str | Path, files: list[Path]) -> int:
    """Commit data files to a stream: one new entry in its `_spark_metadata` log, created
    atomically (link, never overwrite), so several writers can share a stream. Returns the
    log batch id used."""
    meta = Path(stream_path) / "_spark_metadata"
    meta.mkdir(parents=True, exist_ok=True)
    new = [_entry(f) for f in files]
    with _append_lock:
        while True:
            n = _latest_batch(meta) + 1
            compact = (n + 1) % COMPACT_INTERVAL == 0
            body = committed_entries(stream_path) + new if compact else new
            name = f"{n}.compact" if compact else str(n)
            tmp = meta / f".{name}.{os.getpid()}.tmp"
            tmp.write_text("v1\n" + "\n".join(json.dumps(e) for e in body))
            try:
                os.link(tmp, meta / name)
                return n
            except FileExistsError:  # another writer took this id: take the next
                continue
            finally:
                tmp.unlink()


def append_table(stream_path: str | Path, name: str, table) -> bool:
    """Write an Arrow table as `<name>.parquet` into a stream and commit it, once: a file of that
    name already committed (a replayed batch) is left as it is. True when it was written."""
    import pyarrow.parquet as pq

    stream = Path(stream_path)
    target = stream / f"{name}.parquet"
    if any(Path(f).name == target.name for f in committed_files(stream)):
        return False
    tmp = stream / f".{name}.{os.getpid()}.tmp"
    pq.write_table(table, tmp)
    tmp.replace(target)
    append_files(stream, [target])
    return True


def remove_files(stream_path: str | Path, paths: set[str]) -> None:
    """Take committed files out of a stream's log (retention); see replace_files."""
    replace_files(stream_path, paths, [])


class StaleFiles(Exception):
    """Files to be replaced are no longer in the stream's log (replaced meanwhile)."""


def replace_files(stream_path: str | Path, paths: set[str], added: list[dict]) -> None:
    """Take committed files out of a stream's log and add others, in one step: empty batches
    up to the next compaction batch, whose compact file then lists every committed file but
    these, and the added ones. Spark's readers see the change once that compact file exists;
    the files on disk are the caller's to delete, after. Adding files in place of some no
    longer in the log raises StaleFiles and changes nothing (their records would be twice)."""
    meta = Path(stream_path) / "_spark_metadata"
    with _append_lock:
        while True:
            n = _latest_batch(meta) + 1
            compact = (n + 1) % COMPACT_INTERVAL == 0
            entries = committed_entries(stream_path)
            if added and not paths <= {e["path"] for e in entries}:
                raise StaleFiles(f"{stream_path}: files to replace are no longer in the log")
            body = [e for e in entries if e["path"] not in paths]
            name = f"{n}.compact" if compact else str(n)
            tmp = meta / f".{name}.{os.getpid()}.tmp"
            text = "\n".join(json.dumps(e) for e in body + added)
            tmp.write_text("v1\n" + text if compact else "v1\n")
            try:
                os.link(tmp, meta / name)
                if compact:
                    return
            except FileExistsError:  # another writer took this id: take the next
                continue
            finally:
                tmp.unlink()


def prune_log(stream_path: str | Path, min_age_s: float = 600) -> int:
    """Delete log files that no reader needs: those before the previous compact file and
    older than `min_age_s` (a reader that listed the log just before a compaction may still
    read them, as Spark's own cleanupDelay allows). Returns how many went."""
    meta = Path(stream_path) / "_spark_metadata"
    compacts = sorted(int(f.name.removesuffix(".compact")) for f in meta.glob("*.compact"))
    if len(compacts) < 2:
        return 0
    keep_from, cutoff, gone = compacts[-2], time.time() - min_age_s, 0
    for f in meta.iterdir():
        stem = f.name.removesuffix(".compact")
        if stem.isdigit() and int(stem) < keep_from and f.stat().st_mtime < cutoff:
            f.unlink(missing_ok=True)
            gone += 1
    return gone


def sweep_orphans(stream_path: str | Path, min_age_s: float = 600) -> int:
    """Delete data files in a stream's folder that its log does not list (left by a retention
    pass killed between the log and the disk, or a batch killed before its commit) once older
    than `min_age_s`: a writer moves its files in just before committing them. Returns how many
    went."""
    stream = Path(stream_path)
    listed = {str(Path(f)) for f in committed_files(stream)}
    cutoff, gone = time.time() - min_age_s, 0
    for f in stream.glob("*.parquet"):
        if str(f.resolve()) not in listed and f.stat().st_mtime < cutoff:
            f.unlink(missing_ok=True)
            gone += 1
    return gone
