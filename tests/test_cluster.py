"""connectql on a Spark standalone cluster (a master and two workers started from pyspark's jars,
tests/sparkcluster.py): the quickstart and a PostgreSQL cdc pipeline run through `connectql run`
with the home on a path every node sees, their results checked by value, and the tasks shown by
Spark's event log to have run on the cluster's executors, not in the driver."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from tests.crash import CONNECTQL, ROOT, checkout_env, kill_everything
from tests.helpers import read_parquet_rows, wait_until
from tests.pgserver import items_checksum, pg_sql
from tests.sparkcluster import executor_tasks, on_cluster_env

pytestmark = pytest.mark.spark


def settings(events: Path, master: str | None = None) -> str:
    """SET statements for a script run on the cluster: small executors, an event log."""
    events.mkdir(exist_ok=True)
    lines = [
        "SET spark.executor.memory = '512m'",
        "SET spark.eventLog.enabled = true",
        "SET spark.eventLog.compress = false",
        f"SET spark.eventLog.dir = 'file://{events}'",
    ]
    if master:
        lines.insert(0, f"SET spark.master = '{master}'")
    return ";\n".join(lines) + ";\n"


def assert_executors_ran_tasks(events: Path) -> None:
    tasks = executor_tasks(events)
    assert "driver" not in tasks, tasks
    assert len(tasks) == 2 and all(n > 0 for n in tasks.values()), tasks


def connectql(home: Path, *args: str, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CONNECTQL, "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd=cwd,
    )


def test_the_quickstart_runs_on_the_cluster_executors(spark_cluster, tmp_path):
    events = tmp_path / "events"
    script = tmp_path / "quickstart.sql"
    script.write_text(settings(events) + (ROOT / "examples/quickstart.sql").read_text())
    env = on_cluster_env(spark_cluster)
    home = tmp_path / "home"
    r = connectql(home, "run", str(script), env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    r = connectql(home, "--format", "json", "status", env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    status = {row["name"]: row for row in json.loads(r.stdout)}
    assert {row["state"] for row in status.values()} == {"FINISHED"}, status
    assert status["orders_gen"]["rows_written"] == 100000
    assert read_parquet_rows(home / "streams/demo_orders") == [(100000, 100000)]
    paid = read_parquet_rows(
        home / "streams/demo_orders",
        "SELECT count(*) FROM t WHERE status = 'paid' AND amount > 500",
    )[0][0]
    out = tmp_path / ".connectql/out/big_orders"  # the script's relative path, from its cwd
    assert read_parquet_rows(out) == [(paid, paid)]
    assert status["big_orders"]["rows_written"] == paid
    apps = spark_cluster.status()["completedapps"]
    assert [a["name"] for a in apps if a["name"] == "connectql"], apps
    assert_executors_ran_tasks(events)


TABLE = "CREATE TABLE items (id bigint PRIMARY KEY, name text, qty int)"
PIPELINE = """
CREATE SOURCE CONNECTOR src FROM postgres INTO changes WITH (host = '{host}', port = {port},
  user = 'postgres', database = '{src}', table = 'items', 'slot.name' = '{slot}');
CREATE SINK CONNECTOR dst TO postgres FROM changes WITH (host = '{host}', port = {port},
  user = 'postgres', database = '{dst}', table = 'items', 'tasks.max' = 2);
"""


@pytest.mark.scenario
def test_a_postgres_cdc_pipeline_runs_on_the_cluster(
    spark_cluster, pg_logical, cdc_databases, tmp_path
):
    names, infos = cdc_databases
    pg_sql(infos["src"], TABLE)
    pg_sql(
        infos["src"],
        "INSERT INTO items SELECT g, 'item ' || g, g % 7 FROM generate_series(1, 3000) g",
    )
    events = tmp_path / "events"
    script = tmp_path / "pipeline.sql"
    script.write_text(
        settings(events, spark_cluster.url)
        + PIPELINE.format(host=pg_logical.host, port=pg_logical.port, **names)
    )
    home, logs = tmp_path / "home", tmp_path / "logs"
    logs.mkdir()
    with (logs / "out").open("w") as out, (logs / "err").open("w") as err:
        proc = subprocess.Popen(
            [*CONNECTQL, "--home", str(home), "run", str(script)],
            env=on_cluster_env(spark_cluster, CONNECTQL_SPARK_MASTER=None),  # the script's SET
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
    try:

        def alive_and(check):
            def probe():
                assert proc.poll() is None, (logs / "out").read_text() + (logs / "err").read_text()
                return check()

            return probe

        def diagnose():
            return f"target {items_checksum(infos['dst'])}\n{spark_cluster.logs()}"

        source = items_checksum(infos["src"])
        wait_until(
            alive_and(lambda: items_checksum(infos["dst"]) == source),
            240,
            1,
            "the snapshot",
            diagnose,
        )
        pg_sql(infos["src"], "UPDATE items SET qty = qty + 1, name = name || '+' WHERE id % 3 = 0")
        pg_sql(infos["src"], "DELETE FROM items WHERE id % 10 = 0")
        pg_sql(
            infos["src"],
            "INSERT INTO items SELECT g, 'new ' || g, 1 FROM generate_series(5001, 5500) g",
        )
        source = items_checksum(infos["src"])
        assert source[0] == 3000 - 300 + 500
        wait_until(
            alive_and(lambda: items_checksum(infos["dst"]) == source),
            90,
            1,
            "the changes",
            diagnose,
        )
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=90) == 0, (logs / "err").read_text()
    finally:
        kill_everything(proc)
    changes = read_parquet_rows(
        home / "streams/changes", "SELECT __op, count(*) FROM t GROUP BY 1 ORDER BY 1"
    )
    assert changes == [("c", 500), ("d", 300), ("r", 3000), ("u", 1000)]
    assert_executors_ran_tasks(events)


# ------------------------------------------------------------------ checks at the worker's start


def test_a_home_the_executors_cannot_see_is_refused_at_start(partial_cluster, tmp_path):
    home = partial_cluster.hide / "home"
    env = on_cluster_env(partial_cluster)
    r = connectql(home, "server", "--port", "0", env=env, cwd=tmp_path)
    assert r.returncode == 1
    error = " ".join(r.stderr.split())
    assert f"the home {home} is not visible from the executors" in error, r.stderr
    assert "storage every node mounts at the same path" in error
    assert not (home / "server.json").exists()


def test_executors_that_cannot_import_connectql_are_refused_at_start(partial_cluster, tmp_path):
    shadow = tmp_path / "shadow/connectql"  # first on the executors' path, failing to import
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no connectql here')\n")
    script = tmp_path / "script.sql"
    script.write_text(
        f"SET spark.executorEnv.PYTHONPATH = '{shadow.parent}';\n"
        "CREATE SOURCE CONNECTOR g FROM datagen INTO s WITH ('rows.total' = 10, run = 'once');\n"
    )
    home = tmp_path / "home"
    r = connectql(home, "run", str(script), env=on_cluster_env(partial_cluster), cwd=tmp_path)
    assert r.returncode == 1
    error = " ".join(r.stderr.split())
    assert "cannot import connectql (ImportError: no connectql here)" in error, r.stderr
    assert "install connectql (same version as this worker)" in error
    r = connectql(home, "sql", "SHOW CONNECTORS", env=checkout_env(), cwd=tmp_path)
    assert "g" not in r.stdout.split()  # the failed statement created nothing


def test_a_relative_home_is_refused_on_a_cluster(partial_cluster, tmp_path):
    r = connectql(
        Path("relative-home"),
        "server",
        "--port",
        "0",
        env=on_cluster_env(partial_cluster),
        cwd=tmp_path,
    )
    assert r.returncode == 1
    error = " ".join(r.stderr.split())
    assert "the home is given as the relative path 'relative-home'" in error, r.stderr
    assert "an absolute path on storage every node mounts" in error
