"""`connectql shell` as a user types into it: the real process on a pseudo-terminal (pexpect)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from connectql.grammar.parser import unfinished
from connectql.shell import recordable

ROOT = Path(__file__).resolve().parents[1]
PROMPT, MORE = "connectql> ", "..> "
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
UP, CTRL_C = "\x1b[A", "\x03"


class Shell:
    """A `connectql shell` process on a terminal 200 columns wide."""

    def __init__(self, home: Path, fmt: str = "table"):
        env = {**os.environ, "TERM": "xterm", "HOME": str(home.parent), "PYTHONPATH": str(ROOT)}
        for name in ("COLUMNS", "LINES", "NO_COLOR", "CONNECTQL_HOME"):
            env.pop(name, None)
        self.child = pexpect.spawn(
            sys.executable,
            ["-m", "connectql.cli", "--home", str(home), "--format", fmt, "shell"],
            env=env,
            cwd=str(ROOT),
            encoding="utf-8",
            dimensions=(50, 200),
        )
        self.raw = ""
        self.until(PROMPT)

    def until(self, text: str, timeout: float = 60) -> str:
        """What the terminal shows up to `text` (colours stripped; `raw` keeps them)."""
        self.child.expect_exact(text, timeout=timeout)
        self.raw = self.child.before
        return ANSI.sub("", self.raw)

    def type(self, keys: str, until: str = PROMPT, timeout: float = 60) -> str:
        self.child.send(keys)
        return self.until(until, timeout)

    def run(self, line: str) -> str:
        return self.type(line + "\r")

    def leave(self, keys: str = "\x04") -> int:
        """Ctrl-D (or other keys that end the shell); the exit status."""
        self.child.send(keys)
        self.child.expect(pexpect.EOF, timeout=120)
        self.child.close()
        return self.child.exitstatus


@pytest.mark.parametrize(
    ("text", "tail"),
    [
        ("SHOW STREAMS;", None),
        ("SHOW STREAMS; -- done", None),
        ("SHOW STREAMS\n\n", "SHOW STREAMS\n\n"),
        ("SHOW STREAMS; SHOW", " SHOW"),
        ("CREATE SECRET s AS 'a;", "CREATE SECRET s AS 'a;"),
        ("CREATE SECRET s AS 'a;\nb';", None),
        ("SHOW /* ; */ STREAMS -- ;", "SHOW /* ; */ STREAMS -- ;"),
    ],
)
def test_a_statement_is_unfinished_until_a_semicolon_outside_quotes_and_comments(text, tail):
    assert unfinished(text) == tail


def test_statements_run_and_a_multiline_one_ends_at_its_semicolon(home):
    shell = Shell(home)
    assert "✓ created stream orders" in shell.run("CREATE STREAM orders;")
    shell.type("CREATE\r", MORE)
    shell.type("\r", MORE)  # a blank line does not submit
    shell.type("SECRET pw -- a comment; not the end\r", MORE)
    assert "✓ created secret pw" in shell.type("AS 'x;y';\r")
    assert "│ pw " in shell.run("SHOW SECRETS;")
    assert "│ orders " in shell.run("SHOW STREAMS;")
    assert shell.leave() == 0


def test_errors_print_in_red_and_the_prompt_goes_on(home):
    shell = Shell(home)
    shown = shell.run("CREATE STREAM a WTIH (x = 1);")
    assert "error: 1:17: unexpected 'WTIH'" in shown and "\x1b[31m" in shell.raw
    shell.type("CREATE STREAM b\r", MORE)
    assert "error: 2:1: unexpected 'WTIH'" in shell.type("WTIH (x = 1);\r")
    shown = shell.run("DROP STREAM nope;")
    assert "error: line 1:" in shown and "nope" in shown and "Traceback" not in shown
    shell.type("CREATE STREAM typed_then_cleared" + CTRL_C)
    shell.type("CREATE STREAM cleared_too\r", MORE)
    shell.type(CTRL_C)  # back at the first prompt: the pending line is gone
    assert "✓ created stream c" in shell.run("CREATE STREAM c;")
    streams = shell.run("SHOW STREAMS;")
    assert "│ c " in streams
    for gone in ("│ a ", "│ b ", "typed_then_cleared", "cleared_too"):
        assert gone not in streams
    assert shell.leave("exit\r") == 0


def test_tab_completes_keywords_and_catalog_names(home):
    shell = Shell(home)
    shell.run("CREATE STREAM orders;")
    shell.type("sh\t", "show ")
    shell.type("str\t", "streams ")
    assert "│ orders " in shell.type(";\r")
    shell.type("DESCRIBE STREAM or\t", "STREAM orders ")
    described = shell.type(";\r")  # DESCRIBE STREAM's property table, for the completed name
    assert "stream orders" in described and "│ name " in described and "│ orders " in described
    shell.run("CREATE STREAM later;")  # the names are asked again after a statement
    shell.type("DROP STREAM la\t", "STREAM later ")
    assert "dropped stream later" in shell.type(";\r")
    assert shell.leave() == 0


@pytest.mark.spark
def test_tab_completes_types_option_keys_and_connector_names(home):
    shell = Shell(home)
    shell.type("CREATE SOURCE CONNECTOR g FROM dat\t", "FROM datagen ")
    shell.type("INTO s WITH (\"initial.state\" = 'paused', rows.to\t", "rows.total ")
    created = shell.type("= 5);\r", timeout=120)  # a SparkSession starts to read the schema
    assert "created source connector g (paused)" in created
    shell.type("DESCRIBE CONNECTOR \t", "CONNECTOR g ")
    shown = shell.type(";\r")
    assert re.search(r"option rows\.total\s*│ 5 ", shown) and "PAUSED" in shown
    assert shell.leave() == 0


def test_history_is_recalled_with_the_up_arrow_in_a_new_session(home):
    shell = Shell(home)
    shell.type("CREATE STREAM\r", MORE)
    assert "created stream hist" in shell.type("  hist;\r")
    assert shell.leave() == 0
    assert (home / "shell_history").read_text().splitlines()[-1] == "CREATE STREAM hist;"
    assert (home / "shell_history").stat().st_mode & 0o777 == 0o600
    shell = Shell(home)
    shell.type(UP, "CREATE STREAM hist;")
    assert "error: line 1: stream 'hist' already exists" in shell.type("\r")
    assert shell.leave() == 0


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("CREATE STREAM s;", "CREATE STREAM s;"),
        (
            "ALTER CONNECTOR c SET (password = SECRET pw);",
            "ALTER CONNECTOR c SET (password = SECRET pw);",
        ),
        ("CREATE SECRET pw AS 'hunter2';", None),
        ("ALTER CONNECTOR c SET (password = 'hunter2');", None),
        ("SET 'fs.s3a.secret.key' = 'hunter2';", None),
        ("CREATE SECRET pw 'hunter2';", None),  # a typo: what it holds is unknown
    ],
)
def test_what_may_hold_a_secret_stays_out_of_the_history_file(text, kept):
    assert recordable(text) == kept


def test_statements_piped_in_run_without_a_prompt(home):
    def shell(text):
        command = [sys.executable, "-m", "connectql.cli", "--home", str(home), "shell"]
        return subprocess.run(command, input=text, capture_output=True, text=True, cwd=ROOT)

    r = shell("CREATE STREAM p;\nSHOW\nSTREAMS;\n")
    assert r.returncode == 0 and "│ p " in r.stdout and PROMPT not in r.stdout
    r = shell("CREATE STREAM q;\nDROP STREAM nope;\nCREATE STREAM r;\n")
    assert r.returncode == 1 and "error: line 1:" in r.stderr
    streams = shell("SHOW STREAMS").stdout  # the last statement may lack its ;
    assert "│ q " in streams and "│ r " not in streams


def test_the_shell_prints_in_the_format_the_command_was_given(home):
    """`connectql --format json|csv|vertical shell`: piped and at the prompt alike."""

    def piped(fmt, text):
        command = [sys.executable, "-m", "connectql.cli", "--home", str(home), "--format", fmt]
        return subprocess.run(
            [*command, "shell"], input=text, capture_output=True, text=True, cwd=ROOT
        )

    r = piped("json", "CREATE STREAM fj;\nSELECT name FROM streams;\n")
    lines = [json.loads(line) for line in r.stdout.splitlines()]
    assert r.returncode == 0 and lines[-1] == [{"name": "fj"}]
    assert "message" in lines[0]
    r = piped("csv", "SELECT name FROM streams;\n")
    assert r.returncode == 0 and r.stdout.splitlines() == ["name", "fj"]
    shell = Shell(home, "vertical")
    try:
        shown = shell.run("SELECT name FROM streams;")
        assert "-[ RECORD 1 ]-" in shown and re.search(r"name\s*\|\s*fj", shown)
    finally:
        assert shell.leave() == 0
