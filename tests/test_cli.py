"""The `connectql` command as a user runs it: real processes, exit codes, messages."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from connectql import docsite
from tests.helpers import interrupt, read_parquet_rows, wait_until

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


LIVE = (
    "CREATE SOURCE CONNECTOR live FROM datagen INTO s"
    " WITH ('rows.per.second' = 200, fields = 'id BIGINT SEQUENCE')"
)


def run_in_background(tmp_path, home, sql: str) -> subprocess.Popen:
    """`connectql run` of a script holding `sql`, as in a second terminal."""
    script = tmp_path / "live.sql"
    script.write_text(sql + ";")
    return subprocess.Popen(
        [*CONNECTQL, "--home", str(home), "run", str(script)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_generated_docs_match_the_declarations_parser_and_api():
    """Option tables, the connector list, the CLI and API references and the site's home are
    generated (`python -m connectql.docsite`): none is stale."""
    assert docsite.stale(ROOT / "docs") == []


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
        "CREATE STREAM a;\nCREATE SOURCE CONNECTOR x FROM pulsar INTO a WITH ();\nCREATE STREAM c;\n"
    )
    r = connectql("run", str(script), home=tmp_path / "h")
    assert r.returncode == 1
    line = next(x for x in r.stderr.splitlines() if "error:" in x)  # a pipe: one whole line
    assert f"error: {script}:2: unknown connector type 'pulsar'; known types: " in line, line
    shown = connectql("sql", "SELECT name FROM streams ORDER BY name", home=tmp_path / "h").stdout
    assert "│ a" in shown and "│ c" not in shown


def test_messages_are_printed_as_they_are_not_as_markup():
    """A message with square brackets (a table name, JSON) is text: rich must neither eat it
    nor fail on it (a closing tag it cannot match)."""
    from rich.console import Console

    from connectql.formats import Printer
    from connectql.worker.results import Result

    out = Console(record=True, width=200)
    Printer("table", out, out)(Result(message='stream ["f_b"] stopped [/x] [bold]y'))
    assert 'stream ["f_b"] stopped [/x] [bold]y' in out.export_text()


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
def cells(line: str) -> list[str]:
    """A printed table row's cells (rich's box characters), [] for other lines."""
    return [c.strip() for c in line.strip().strip("│┃").split("│")] if "│" in line else []


def tour_rows() -> list[tuple[str, ...]]:
    """The table rows the README's 30-second tour says the quickstart prints."""
    readme = (ROOT / "README.md").read_text()
    tour = readme.split("## A 30-second tour", 1)[1].split("```text\n", 1)[1].split("```")[0]
    return [tuple(cells(line)) for line in tour.splitlines() if cells(line)]


def test_the_examples_meet_no_other_so_each_runs_after_any_other():
    """In one home (./.connectql by default) an example's connectors and the streams its
    sources write are its own, and its sinks read only its own streams."""
    from connectql.grammar import parser

    owner: dict[str, str] = {}
    for path in sorted((ROOT / "examples").glob("*.sql")):
        statements = parser.parse_script(path.read_text())
        made = [s for s in statements if type(s).__name__.startswith("Create")]
        written = {s.stream for s in made if type(s).__name__ == "CreateSourceConnector"}
        for name in [s.name for s in made if hasattr(s, "stream")] + sorted(written):
            assert owner.setdefault(name, path.name) == path.name, (name, owner[name], path.name)
        for sink in [s for s in made if type(s).__name__ == "CreateSinkConnector"]:
            assert sink.stream in written, f"{path.name}: {sink.name} reads another's stream"


def test_quickstart_runs_to_the_end_and_ctrl_c_keeps_offsets(tmp_path):
    r = r_first = connectql(
        "run", str(ROOT / "examples/quickstart.sql"), home=tmp_path / "h", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    assert "FINISHED" in r.stdout and "paid" in r.stdout
    assert "WARNING" not in r.stdout + r.stderr  # the JVM's warnings stay in the home
    assert "incubator" in (tmp_path / "h/jvm.log").read_text()
    r = connectql("--format", "json", "status", home=tmp_path / "h")
    status = {row["name"]: row for row in json.loads(r.stdout)}
    assert status["orders_gen"]["rows_read"] == status["orders_gen"]["rows_written"] == 100000
    assert status["big_orders"]["rows_read"] == 100000  # read from the stream, and filtered:
    assert 0 < status["big_orders"]["rows_written"] < 50000  # only paid orders over 500
    assert {row["state"] for row in status.values()} == {"FINISHED"}
    assert {row["rows_per_sec"] for row in status.values()} == {0}  # nothing runs
    printed = {tuple(cells(line)) for line in r_first.stdout.splitlines() if cells(line)}
    for row in tour_rows():  # the README's tour shows what the quickstart prints
        assert row in printed, (row, r_first.stdout)

    home = tmp_path / "h2"
    proc = run_in_background(tmp_path, home, LIVE.replace("200", "400"))
    try:
        wait_until(
            lambda: (read_parquet_rows(home / "streams/s") or [(0,)])[0][0] > 0,
            timeout=120,
            what="rows from the live connector",
        )
        time.sleep(1)
    finally:  # a failed wait leaves no worker behind
        out, err = interrupt(proc)
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


def _status(home) -> list[dict]:
    r = connectql("--format", "json", "status", home=home)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _state(home, name: str = "live") -> tuple | None:
    """The connector's (state, desired_state); None before a running script has created it
    (a SELECT does not wait for the script's statements)."""
    query = f"SELECT state, desired_state FROM connectors WHERE name = '{name}'"
    r = connectql("--format", "csv", "sql", query, home=home)
    assert r.returncode == 0, r.stderr
    rows = list(csv.reader(io.StringIO(r.stdout)))
    assert rows[0] == ["state", "desired_state"], r.stdout
    return tuple(rows[1]) if len(rows) > 1 else None


@pytest.mark.spark
def test_without_a_worker_nothing_claims_to_run_and_start_stop_serve_the_home(tmp_path):
    home = tmp_path / "h"
    r = connectql("sql", LIVE, home=home)
    assert r.returncode == 0, r.stderr
    assert "✓" not in r.stdout and "created source connector live" in r.stdout
    assert "no worker serves this home" in " ".join(r.stdout.split())
    assert _state(home) == ("CREATED", "running")

    r = connectql("start", "--port", "0", home=home)
    assert r.returncode == 0, r.stderr
    assert "connectql server on http://127.0.0.1:" in r.stdout and "server.log" in r.stdout
    pid = int(r.stdout.split("(pid ")[1].split(",")[0])
    try:
        again = connectql("start", "--port", "0", home=home)
        assert again.returncode == 1 and "already serves" in again.stderr
        wait_until(lambda: _state(home) == ("RUNNING", "running"), timeout=120, what="RUNNING")
        r = connectql("pause", "live", home=home)  # reaches the server from another process
        assert r.returncode == 0 and "✓ paused connector live" in r.stdout
        assert _state(home) == ("PAUSED", "paused")
    finally:
        r = connectql("stop", home=home)
    assert r.returncode == 0, r.stderr
    assert f"stopped the connectql server (pid {pid})" in r.stdout
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()
    assert not (home / "server.json").exists()
    assert "connectql server on" in (home / "server.log").read_text()

    r = connectql("resume", "live", home=home)  # no worker: recorded, and said so
    assert r.returncode == 0, r.stderr
    assert "✓" not in r.stdout and "no worker serves this home" in " ".join(r.stdout.split())
    assert _state(home) == ("PAUSED", "running")
    r = connectql("stop", home=home)
    assert r.returncode == 1 and "no connectql server serves" in r.stderr


@pytest.mark.spark
def test_run_serves_the_api_so_other_commands_manage_its_connectors(tmp_path):
    home = tmp_path / "h"
    proc = run_in_background(tmp_path, home, LIVE)
    try:
        wait_until(lambda: (home / "server.json").exists(), timeout=120, what="server.json")
        wait_until(lambda: _state(home) == ("RUNNING", "running"), timeout=120, what="RUNNING")
        wait_until(lambda: _status(home)[0]["rows_written"] > 0, timeout=120, what="rows")
        r = connectql("pause", "live", home=home)
        assert r.returncode == 0 and "✓ paused connector live" in r.stdout, r.stderr
        assert _state(home) == ("PAUSED", "paused")
        time.sleep(1)
        assert proc.poll() is None  # a paused connector may be resumed: run goes on
        status = _status(home)
        assert status[0]["state"] == "PAUSED" and status[0]["rows_per_sec"] == 0
        assert status[0]["rows_read"] == status[0]["rows_written"] > 0
        r = connectql("resume", "live", home=home)
        assert r.returncode == 0 and "✓ resumed connector live" in r.stdout, r.stderr
        assert _state(home) == ("RUNNING", "running")
    finally:
        out, err = interrupt(proc)
    assert proc.returncode == 0, err
    assert "serving http://127.0.0.1:" in out
    assert not (home / "server.json").exists()


def test_secret_set_reads_the_value_without_echo_or_from_stdin(tmp_path):
    home = tmp_path / "h"
    r = connectql("secret", "set", "pw", home=home, input="it's-S3cret-1\n")
    assert r.returncode == 0, r.stderr
    assert "stored secret pw" in r.stdout and "S3cret" not in r.stdout + r.stderr
    assert json.loads((home / "secrets.json").read_text()) == {"pw": "it's-S3cret-1"}

    main, side = os.openpty()  # a terminal: the prompt, and the typed value not echoed
    proc = subprocess.Popen(
        [*CONNECTQL, "--home", str(home), "secret", "set", "pw"],
        cwd=ROOT,
        stdin=side,
        stdout=side,
        stderr=side,
        start_new_session=True,
    )
    os.close(side)
    seen = b""
    while b"value of secret pw" not in seen:
        seen += os.read(main, 1024)
    time.sleep(0.3)  # the prompt is out; getpass turns echo off before it reads
    os.write(main, b"typed-S3cret-2\n")
    assert proc.wait(timeout=120) == 0
    try:
        while chunk := os.read(main, 1024):
            seen += chunk
    except OSError:  # the terminal is gone with the process
        pass
    os.close(main)
    assert b"stored secret pw" in seen and b"typed-S3cret-2" not in seen, seen
    assert json.loads((home / "secrets.json").read_text()) == {"pw": "typed-S3cret-2"}

    r = connectql("secret", "set", "pw", home=home, input="")
    assert r.returncode == 1 and "no value given for secret pw: nothing stored" in r.stderr
    assert json.loads((home / "secrets.json").read_text()) == {"pw": "typed-S3cret-2"}


def test_a_progress_bar_is_full_exactly_when_it_says_100_percent(monkeypatch):
    from connectql import cli

    monkeypatch.setattr(cli, "_total", lambda worker, name: 100250)  # an estimated row count
    assert cli._progress(None, "x", 99000) == "█" * 15 + "░  99%"
    assert cli._progress(None, "x", 100000) == "█" * 16 + " 100%"
    assert cli._progress(None, "x", 0) == "░" * 16 + "   0%"


def test_formats_print_rows_exactly_for_scripts(tmp_path):
    home = tmp_path / "h"
    long_path = "/tmp/" + "p" * 150  # wider than any terminal
    r = connectql("sql", "CREATE STREAM a", "CREATE STREAM b;", home=home)  # two arguments
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("✓ created stream") == 2
    query = "SELECT name, NULL AS nothing, 1.5 AS x, '" + long_path + "' AS p FROM streams"
    r = connectql("--format", "json", "sql", query + " ORDER BY name", "SHOW STREAMS", home=home)
    assert r.returncode == 0, r.stderr
    first, second = (json.loads(line) for line in r.stdout.splitlines())
    assert first == [
        {"name": "a", "nothing": None, "x": "1.5", "p": long_path},
        {"name": "b", "nothing": None, "x": "1.5", "p": long_path},
    ]
    assert [s["name"] for s in second] == ["a", "b"]
    r = connectql("--format", "json", "sql", "CREATE STREAM c", home=home)
    assert json.loads(r.stdout) == {"message": "created stream c"}

    r = connectql("--format", "csv", "sql", query + " WHERE name = 'a'", home=home)
    assert list(csv.reader(io.StringIO(r.stdout))) == [
        ["name", "nothing", "x", "p"],
        ["a", "", "1.5", long_path],
    ]
    r = connectql("--format", "vertical", "sql", query + " WHERE name = 'a'", home=home)
    assert r.stdout.splitlines() == [
        "-[ RECORD 1 ]----",
        "name    | a",
        "nothing | ",
        "x       | 1.5",
        f"p       | {long_path}",
    ]
    r = connectql("sql", query + " WHERE name = 'a'", home=home)  # a pipe: nothing cut
    assert long_path in r.stdout and "…" not in r.stdout


def test_a_table_too_wide_for_the_terminal_is_shown_one_field_per_line(tmp_path):
    home = tmp_path / "h"
    connectql("sql", "CREATE STREAM a", home=home)
    main, side = os.openpty()
    proc = subprocess.Popen(
        [*CONNECTQL, "--home", str(home), "sql", "SELECT name, path FROM streams"],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        stdout=side,
        stderr=side,
        env={**os.environ, "COLUMNS": "40", "LINES": "20", "TERM": "dumb"},
    )
    os.close(side)
    assert proc.wait(timeout=120) == 0
    seen = b""
    try:
        while chunk := os.read(main, 4096):
            seen += chunk
    except OSError:
        pass
    os.close(main)
    text = seen.decode()
    assert "one field per line" in text and "-[ RECORD 1 ]" in text
    assert f"path | {home / 'streams' / 'a'}" in text


def test_the_live_view_shows_a_line_per_busy_table_with_its_snapshot_bar(tmp_path):
    """`connectql run`'s status table: under a source of several tables, the table being
    snapshotted (rows read of the estimate, as a bar), one stopped (its error), and a count of
    those following the log."""
    from types import SimpleNamespace

    from rich.console import Console

    from connectql import cli
    from connectql.catalog.store import Catalog, ConnectorEntry

    cat = Catalog(tmp_path / "c.duckdb")
    try:
        tables = ("a", "b", "c", "d")
        cat.add_connector(ConnectorEntry("shop", "source", "postgres", "shop", {}, tables=tables))
        cat.fail_table("shop", "d", "dropped, its stream's changes end")
        again = {
            "phase": "stream",
            "tables": ["a", "c"],
            "catchup": ["b", ["7"], ["9"], 1, 25, 100],
        }
        cat.record_progress("shop", {
            "batch_id": 0, "started_at": None, "duration_ms": 5, "input_rows": 10,
            "input_rows_per_sec": 1.0, "processed_rows_per_sec": 2.0, "written_rows": 10,
            "filtered_rows": 0, "dead_lettered_rows": 0, "latest_offset": None,
            "end_offset": json.dumps(again),
        })  # fmt: skip
        worker = SimpleNamespace(catalog=cat, engine=SimpleNamespace(plans={}))
        out = Console(width=220, record=True, file=io.StringIO())
        out.print(cli.status_table(worker))
        text = out.export_text()
    finally:
        cat.close()
    lines = [line for line in text.splitlines() if "  └ " in line]
    assert len(lines) == 3, text
    assert "└ b" in lines[0] and "snapshotting" in lines[0] and "25%" in lines[0], lines[0]
    assert "└ d" in lines[1] and "stopped" in lines[1] and "dropped" in lines[1], lines[1]
    assert "└ 2 more" in lines[2] and "streaming" in lines[2], lines[2]
