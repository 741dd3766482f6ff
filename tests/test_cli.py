"""The `connectql` command as a user runs it: real processes, exit codes, messages."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from connectql.connectors.docs import markdown
from tests.helpers import read_parquet_rows, wait_until

ROOT = Path(__file__).resolve().parents[1]
CONNECTQL = [sys.executable, "-m", "connectql.cli"]


def connectql(*args, home, **kw):
    return subprocess.run(
        [*CONNECTQL, "--home", str(home), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=kw.pop("cwd", ROOT),
        **kw,
    )


def test_readme_option_tables_match_the_declarations():
    assert markdown() in (ROOT / "README.md").read_text()


def test_readme_starts_with_the_two_commands_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci/run").read_text()
    blocks = [b.split("```")[0].strip() for b in readme.split("```sh\n")[1:3]]
    assert "connectql run examples/quickstart.sql" in blocks[0]
    assert blocks[1] in ci.splitlines()


def test_a_syntax_error_names_file_line_column_and_changes_nothing(tmp_path):
    script = tmp_path / "bad.sql"
    script.write_text("CREATE STREAM a;\n-- fine so far\nCREATE STREAM b WTIH (x = 1);\n")
    r = connectql("run", str(script), home=tmp_path / "h")
    assert r.returncode == 1
    assert f"{script}:3:17: unexpected 'WTIH'" in r.stderr.replace("\n", "")
    r = connectql("sql", "SHOW STREAMS", home=tmp_path / "h")
    assert r.returncode == 0 and " a " not in r.stdout


def test_a_failing_statement_stops_the_script_and_is_named(tmp_path):
    script = tmp_path / "s.sql"
    script.write_text(
        "CREATE STREAM a;\nCREATE SOURCE CONNECTOR x FROM kafka INTO a WITH ();\nCREATE STREAM c;\n"
    )
    r = connectql("run", str(script), home=tmp_path / "h")
    assert r.returncode == 1
    err = " ".join(r.stderr.split())
    assert f"{script}:2: unknown connector type 'kafka'" in err and "known types:" in err
    shown = connectql("sql", "SELECT name FROM streams ORDER BY name", home=tmp_path / "h").stdout
    assert "│ a" in shown and "│ c" not in shown


def test_unknown_option_suggests_the_nearest_key(tmp_path):
    r = connectql(
        "sql",
        "CREATE SOURCE CONNECTOR g FROM datagen INTO s WITH ('rows.totl' = 5)",
        home=tmp_path / "h",
    )
    assert r.returncode == 1
    assert "unknown option 'rows.totl' (did you mean 'rows.total'?)" in " ".join(r.stderr.split())


def test_show_plugins_prints_a_table(tmp_path):
    r = connectql("sql", "SHOW CONNECTOR PLUGINS", home=tmp_path / "h")
    assert r.returncode == 0
    for name in ("datagen", "file", "mysql", "postgres"):
        assert name in r.stdout


@pytest.mark.spark
def test_quickstart_runs_to_the_end_and_ctrl_c_keeps_offsets(tmp_path):
    r = connectql("run", str(ROOT / "examples/quickstart.sql"), home=tmp_path / "h", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "FINISHED" in r.stdout and "paid" in r.stdout

    script = tmp_path / "live.sql"
    script.write_text(
        "CREATE SOURCE CONNECTOR live FROM datagen INTO s"
        " WITH ('rows.per.second' = 400, fields = 'id BIGINT SEQUENCE');"
    )
    home = tmp_path / "h2"
    proc = subprocess.Popen(
        [*CONNECTQL, "--home", str(home), "run", str(script)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_until(
        lambda: (read_parquet_rows(home / "streams/s") or [(0,)])[0][0] > 0,
        timeout=120,
        what="rows from the live connector",
    )
    time.sleep(1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "stopping" in out
    before = read_parquet_rows(home / "streams/s")[0]
    assert before[0] == before[1]  # no duplicate ids
    status = connectql("sql", "SELECT state, desired_state FROM connectors", home=home).stdout
    assert "STOPPED" in status and "running" in status
    offsets = connectql("sql", "SELECT committed_offset FROM connector_offsets", home=home).stdout
    assert '"seq"' in offsets


def test_the_module_runs_as_a_command():
    r = subprocess.run(
        [*CONNECTQL, "--help"], capture_output=True, text=True, timeout=60, env={**os.environ}
    )
    assert r.returncode == 0 and "run" in r.stdout and "sql" in r.stdout
