"""What must hold when the worker's Spark runs on a cluster (spark.master not local): every
executor sees the home at the same path (streams, checkpoints) and its Python imports connectql.
Probed with one tiny job when the session starts, so that a wrong setup is a clear error then,
not a task failure minutes later."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

from connectql.errors import ConnectQLError

PROBE_FILE = ".cluster-probe"


def is_cluster(master: str) -> bool:
    return not master.startswith("local")


def check_home_given(given: str, master: str) -> None:
    """A home given as a relative path (the default ./.connectql is one) names a folder of this
    machine's working directory: on a cluster it must be an absolute path on shared storage."""
    if is_cluster(master) and not Path(given).is_absolute():
        raise ConnectQLError(
            f"the home is given as the relative path {given!r} but spark.master is {master}:"
            " the executors read and write its streams and checkpoints, so give CONNECTQL_HOME"
            " (or --home) as an absolute path on storage every node mounts at the same path"
        )


def check_cluster(spark, home: Path) -> None:
    """Raise ConnectQLError naming what is wrong when the session runs on a cluster whose
    executors cannot see `home` or cannot import connectql; nothing to do in local mode."""
    master = spark.sparkContext.master
    if not is_cluster(master):
        return
    token = uuid.uuid4().hex
    probe = home / PROBE_FILE
    probe.write_text(token)
    try:
        found = _run_probe(spark, str(probe))
    finally:
        probe.unlink(missing_ok=True)
    for host, python, error, seen in found:
        if error:
            raise ConnectQLError(
                f"the executors' Python on {host} ({python}) cannot import connectql ({error}):"
                f" install connectql (same version as this worker) in that Python on every node"
                " of the cluster, or point spark.pyspark.python / PYSPARK_PYTHON at a Python"
                " that has it"
            )
        if seen != token:
            raise ConnectQLError(
                f"the home {home} is not visible from the executors on {host} (spark.master ="
                f" {master}): streams and checkpoints live there and every node reads and"
                " writes them, so the home must be on storage every node mounts at the same"
                " path (a shared mount such as NFS), not on a disk of this machine only"
            )


def _run_probe(spark, path: str) -> list[tuple[str, str, str, str]]:
    """(host, python, import error or '', what the probe file holds there) from a task on each
    executor core (defaultParallelism tasks spread over the executors)."""

    def task(_):
        import os as os_
        import socket as socket_
        import sys as sys_

        try:
            import connectql  # noqa: F401

            error = ""
        except Exception as e:  # reported by the driver, naming the fix
            error = f"{type(e).__name__}: {e}"
        try:
            with open(path) as f:
                seen = f.read()
        except OSError as e:
            seen = f"({e.strerror})"
        yield socket_.gethostname() + f" (pid {os_.getpid()})", sys_.executable, error, seen

    sc = spark.sparkContext
    n = max(2, sc.defaultParallelism)
    try:
        return sc.parallelize(range(n), n).mapPartitions(task).collect()
    except Exception as e:
        text = str(e).splitlines()
        detail = next((line for line in text if "Error" in line), text[0] if text else "")
        raise ConnectQLError(
            f"the executors of {sc.master} could not run a Python task ({detail.strip()[:300]}):"
            " every node needs the same Python as this worker with pyspark, pyarrow and"
            f" connectql installed (this worker runs {os.environ.get('PYSPARK_PYTHON')} on"
            f" {socket.gethostname()})"
        ) from None
