"""A class-data-sharing archive of the driver JVM's classes: the first session of a JVM, jars and
class path writes one, and every later session maps it instead of loading and verifying Spark's
~13,000 classes again (a SparkSession's start and first query, 9.4 -> 5.7 s here).

The archive lives in the user's cache (`CONNECTQL_CACHE_DIR`, else `$XDG_CACHE_HOME/connectql`,
else `~/.cache/connectql`), under a name made of what it depends on. The JVM writes it while it
exits (`-XX:ArchiveClassesAtExit`, ~10 s that nobody waits for: the JVM ends after this process),
into a file of the writing process's own, and logs what it wrote. That file becomes the archive
only when its log says it was written whole and it is that long, because a JVM that maps a
truncated archive dies (SIGBUS), and a JVM started with `-version` does not touch all of it.
`CONNECTQL_JVM_ARCHIVE` = `on` (the default: use it, write it when missing), `use` (never write
one) or `off`."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from connectql.processes import alive

FORMAT = "1"  # bumped when the options below change what an archive holds
QUIET = "-Xlog:cds*=off"  # the JVM's notes on classes it skips go to stdout otherwise
BUSY_S = 60.0  # a writer whose log changed this recently may still be writing
STALE_S = 600.0  # an unfinished file of a writer that is gone is removed after this
KEEP = 4  # archives kept (each ~160 MB): one per Python environment recently used
WRITTEN = re.compile(r"Written dynamic archive .* (\d+) bytes total")
REGION = re.compile(r"Shared file region \(\w+ *\) +\d+: +(\d+) bytes.* file offset (0x[0-9a-f]+)")


@dataclass(frozen=True)
class Archive:
    """The JVM options that read the archive, or that write one into `writing`."""

    options: str
    writing: Path | None = None


def plan(conf: dict[str, str]) -> Archive | None:
    """The archive options for a driver JVM started with `conf`, or None (switched off, no
    cache directory, a path the JVM options could not carry, another process writing one)."""
    mode = os.environ.get("CONNECTQL_JVM_ARCHIVE", "on").strip().lower()
    folder = _folder()
    if mode not in ("on", "use") or folder is None:
        return None
    path = folder / f"spark-{_key(conf)}.jsa"
    if re.search(r"[\s'\"\\]", str(path)):
        return None
    if _promote(path):  # also clears what gone writers left beside an archive
        return Archive(f"-XX:SharedArchiveFile={path} {QUIET}")
    if mode == "use" or _busy(path):
        return None
    writing = path.with_name(f"{path.name}.{os.getpid()}.part")
    log = f"-Xlog:cds=info,cds+dynamic=info:file={writing.with_suffix('.log')}"
    return Archive(f"-XX:ArchiveClassesAtExit={writing} {QUIET} {log}", writing)


def with_options(conf: dict[str, str], archive: Archive | None) -> dict[str, str]:
    """`conf` with the archive's options after any driver JVM options already given."""
    if archive is None:
        return conf
    given = conf.get("spark.driver.extraJavaOptions", "")
    return {**conf, "spark.driver.extraJavaOptions": f"{given} {archive.options}".strip()}


def _promote(path: Path) -> bool:
    """Whether the archive is there (a writer's file written whole becomes it); the files of
    writers that are gone (a JVM killed before or while writing) are cleared on the way."""
    for log in sorted(path.parent.glob(f"{path.name}.*.log")):
        part = log.with_suffix(".part")
        with contextlib.suppress(OSError, ValueError):
            if part.exists() and _whole(part, log):
                os.replace(part, path)
                log.unlink()
                _prune(path.parent)
                return True
            idle = time.time() - max(_mtime(part), _mtime(log))
            if idle > STALE_S and not alive(_writer(log)):
                part.unlink(missing_ok=True)
                log.unlink()
    return path.exists()


def _writer(log: Path) -> int:
    """The pid of the process whose JVM writes the archive `log` tells of."""
    return int(log.suffixes[-2].lstrip("."))


def _whole(part: Path, log: Path) -> bool:
    """Whether the JVM's `log` says it finished `part` and the file holds every region logged."""
    text = log.read_text(errors="replace")
    if not WRITTEN.search(text):
        return False
    ends = [int(offset, 16) + int(size) for size, offset in REGION.findall(text)]
    return bool(ends) and part.stat().st_size >= max(ends)


def _busy(path: Path) -> bool:
    """Whether another process is writing this archive: its log changed lately, or it lives."""
    for log in path.parent.glob(f"{path.name}.*.log"):
        with contextlib.suppress(OSError, ValueError):
            pid = _writer(log)
            if pid != os.getpid() and (alive(pid) or time.time() - _mtime(log) < BUSY_S):
                return True
    return False


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def cache_root() -> str:
    """Where connectql keeps what it can make again: CONNECTQL_CACHE_DIR, else the user's cache."""
    root = os.environ.get("CONNECTQL_CACHE_DIR")
    if root:
        return root
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "connectql")


def _folder() -> Path | None:
    folder = Path(cache_root()) / "jvm"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder if os.access(folder, os.W_OK) else None


def _key(conf: dict[str, str]) -> str:
    """What the archive depends on: the java binary, Spark's jars and the class path."""
    import pyspark

    home = os.environ.get("SPARK_HOME") or os.path.dirname(pyspark.__file__)
    jars = Path(home) / "jars"
    java = _java()
    parts = [
        FORMAT,
        java,
        pyspark.__version__,
        str(jars),
        conf.get("spark.driver.extraClassPath", ""),
    ]
    for stamped in (java, str(jars)):
        with contextlib.suppress(OSError):
            parts.append(str(os.stat(stamped).st_mtime_ns))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _java() -> str:
    """The java binary spark-submit runs (JAVA_HOME's, else the one on PATH), resolved."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java") or "java"
    return os.path.realpath(java)


def _prune(folder: Path) -> None:
    """All but the KEEP archives last written (a JVM that maps one keeps it after unlink)."""
    archives = sorted(folder.glob("spark-*.jsa"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[KEEP:]:
        with contextlib.suppress(OSError):
            old.unlink()
