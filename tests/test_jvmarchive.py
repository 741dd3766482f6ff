"""The driver JVM's class-data-sharing archive: written by a real JVM, taken only when whole."""

from __future__ import annotations

import os
import subprocess

import pytest

from connectql.runtime import jvmarchive


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CONNECTQL_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("CONNECTQL_JVM_ARCHIVE", raising=False)
    return tmp_path / "jvm"


def java(*options: str) -> subprocess.CompletedProcess:
    """`java -version` with these options, as spark-submit would add them."""
    return subprocess.run(["java", *options, "-version"], capture_output=True, text=True)


def write_archive(cache) -> jvmarchive.Archive:
    """Plan as a first session does and let a real JVM write the archive as it exits."""
    archive = jvmarchive.plan({})
    assert archive.writing is not None and "ArchiveClassesAtExit" in archive.options
    assert java(*archive.options.split()).returncode == 0
    return archive


def test_the_first_jvm_writes_the_archive_and_the_next_maps_it(cache):
    archive = write_archive(cache)
    done = jvmarchive.plan({})
    assert done.writing is None and "SharedArchiveFile" in done.options
    assert list(cache.glob("*.part")) == [] and list(cache.glob("*.log")) == []
    # -Xshare:on makes a JVM that cannot map the archive fail instead of going on without
    mapped = java("-Xshare:on", *done.options.split())
    assert mapped.returncode == 0, mapped.stderr
    assert mapped.stdout == "", "the JVM's notes on the archive must not reach stdout"
    assert not archive.writing.exists()


def gone_writer(*files) -> list:
    """`files` as written by a process that has ended, a long time ago."""
    pid = subprocess.Popen(["true"])
    pid.wait()
    moved = []
    for f in files:
        moved.append(f.rename(f.with_name(f.name.replace(f".{os.getpid()}.", f".{pid.pid}."))))
        os.utime(moved[-1], (0, 0))
    return moved


def test_a_truncated_file_never_becomes_the_archive(cache):
    archive = write_archive(cache)
    size = archive.writing.stat().st_size
    with open(archive.writing, "r+b") as f:
        f.truncate(size - 4096)  # its log says written whole: a crash of the disk, or of a copy
    part, log = gone_writer(archive.writing, archive.writing.with_suffix(".log"))
    again = jvmarchive.plan({})
    assert again.writing is not None, "a new writer, since the old file was not whole"
    assert not part.exists() and not log.exists(), "a gone writer's unfinished files are removed"
    assert list(cache.glob("*.jsa")) == []


def test_a_jvm_killed_before_writing_leaves_nothing_for_long(cache):
    writing = jvmarchive.plan({}).writing
    log = writing.with_suffix(".log")
    log.write_text("[0.1s][info][cds] started\n")  # the JVM opens its log when it starts
    (log,) = gone_writer(log)
    assert jvmarchive.plan({}).writing is not None
    assert not log.exists()


def test_a_writer_at_work_is_left_to_finish(cache):
    archive = jvmarchive.plan({})
    log = archive.writing.with_suffix(".log")
    log.write_text("[0.1s][info][cds] writing\n")  # the JVM opens its log when it starts
    assert jvmarchive.plan({}) is not None, "this process's own writer does not block it"
    other = log.with_name(log.name.replace(f".{os.getpid()}.", ".1."))
    log.rename(other)  # pid 1 lives: another process writing
    assert jvmarchive.plan({}) is None, "no second writer, and nothing to read yet"
    assert not list(cache.glob("*.jsa")), "an unfinished file is not taken"


def test_off_and_read_only_modes(cache, monkeypatch):
    monkeypatch.setenv("CONNECTQL_JVM_ARCHIVE", "off")
    assert jvmarchive.plan({}) is None
    monkeypatch.setenv("CONNECTQL_JVM_ARCHIVE", "use")
    assert jvmarchive.plan({}) is None, "nothing to read, and this process does not write"
    monkeypatch.setenv("CONNECTQL_JVM_ARCHIVE", "on")
    write_archive(cache)
    monkeypatch.setenv("CONNECTQL_JVM_ARCHIVE", "use")
    assert "SharedArchiveFile" in jvmarchive.plan({}).options


def test_the_options_follow_those_given():
    archive = jvmarchive.Archive("-XX:SharedArchiveFile=/c/a.jsa")
    conf = {"spark.driver.extraJavaOptions": "-Dx=1"}
    assert jvmarchive.with_options(conf, archive)["spark.driver.extraJavaOptions"] == (
        "-Dx=1 -XX:SharedArchiveFile=/c/a.jsa"
    )
    assert jvmarchive.with_options(conf, None) is conf


def test_what_a_gone_writer_left_beside_an_archive_is_cleared(cache):
    write_archive(cache)
    late = jvmarchive.plan({})  # reads the archive; a killed writer's log lies beside it
    assert late.writing is None
    log = cache / f"{next(cache.glob('*.jsa')).name}.{os.getpid()}.log"
    log.write_text("[0.1s][info][cds] started\n")
    (log,) = gone_writer(log)
    assert "SharedArchiveFile" in jvmarchive.plan({}).options
    assert not log.exists()
