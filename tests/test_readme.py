"""The README cannot lie: every shell and SQL block of its getting-started sections carries a
`<!-- readme-test: KIND ... -->` mark, and the blocks run here as a user runs them, in order,
against private servers on free ports.

Kinds: `run` (a shell block, run to its end), `until-stopped WHAT` (a foreground command such as
`connectql run`: started, waited on until WHAT holds, then stopped with Ctrl-C), `while-running
ID` (run while the until-stopped command runs, again until its output shows what `EXPECT[ID]`
says), `same-as FILE` (a statement block that must appear in FILE as written, FILE being what a
later block runs) and `skip REASON`. Exported variables carry from block to block, as in one
terminal; each block runs under `bash -e`, so a failing step fails the test."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
# the files whose getting-started blocks run, in this order (one terminal through all of them)
DOCS = [README, ROOT / "docs/connectors/postgres.md", ROOT / "docs/connectors/mysql.md"]
MARK = re.compile(r"<!-- readme-test: (\S+)(?: (.*?))? -->")
KINDS = ("run", "until-stopped", "while-running", "same-as", "skip")
EXPECT = {"try": r"paid\s*\|\s*99\b"}  # what a while-running block's output must show


@dataclass
class Block:
    section: str
    lang: str
    text: str
    kind: str | None
    arg: str


def blocks(readme: str = "") -> list[Block]:
    """The README's shell and SQL blocks inside `readme-test:begin`/`end` regions, in order,
    each with its mark (None when it has none) and the section heading above it."""
    out, mark, section, inside, fence = [], None, "", False, None
    text = readme or "\n".join(d.read_text() for d in DOCS)
    for line in text.splitlines():
        if fence is not None:
            if line.startswith("```"):
                if inside:
                    out.append(Block(section, fence[0], "\n".join(fence[1]), *(mark or (None, ""))))
                fence, mark = None, None
            else:
                fence[1].append(line)
        elif line.startswith("```"):
            fence = (line[3:].strip(), []) if line[3:].strip() in ("sh", "sql") else None
            if fence is None:
                mark = None
        elif line.startswith("#"):
            section = line.lstrip("#").strip()
        elif line.strip() == "<!-- readme-test:begin -->":
            inside = True
        elif line.strip() == "<!-- readme-test:end -->":
            inside = False
        elif (found := MARK.fullmatch(line.strip())) is not None:
            mark = (found.group(1), found.group(2) or "")
    return out


def test_every_getting_started_block_is_marked_and_statement_blocks_match_their_files():
    found = blocks()
    sections = {b.section for b in found}
    assert {"connectql", "MySQL / MariaDB", "PostgreSQL"} <= sections, sections
    for b in found:
        assert b.kind in KINDS, f"a {b.lang} block in '{b.section}' has no readme-test mark"
        assert b.kind != "skip" or b.arg, f"a skipped block in '{b.section}' gives no reason"
        assert b.kind != "while-running" or b.arg in EXPECT, b.arg
        if b.kind == "same-as":
            assert b.text in (ROOT / b.arg).read_text(), f"the block differs from {b.arg}"


def test_the_block_reader_sees_marks_regions_and_sections():
    text = (
        "# a\n```sh\nnot in a region\n```\n<!-- readme-test:begin -->\n## b\n"
        "<!-- readme-test: skip why not -->\n```sh\necho 1\n```\n```sql\nSELECT 1;\n```\n"
        "```text\nignored\n```\n<!-- readme-test:end -->\n```sh\nafter\n```\n"
    )
    assert blocks(text) == [
        Block("b", "sh", "echo 1", "skip", "why not"),
        Block("b", "sql", "SELECT 1;", None, ""),
    ]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Terminal:
    """One user's terminal: a work directory (the checkout's .venv and examples linked in),
    and the variables each block exports, carried to the next."""

    def __init__(self, workdir: Path, env: dict[str, str]):
        self.workdir, self.env = workdir, env
        self.state = workdir / ".exported"
        self.state.write_text("")

    def script(self, text: str, keep: bool = True) -> str:
        save = f"\nexport -p > {self.state}" if keep else ""
        return f"set -e\nsource {self.state}\n{text}{save}\n"

    def run(self, text: str, timeout: float = 300) -> str:
        r = subprocess.run(
            ["bash", "-c", self.script(text)],
            cwd=self.workdir,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert r.returncode == 0, (
            f"the block failed ({r.returncode}):\n{text}\n{r.stdout}{r.stderr}"
        )
        return r.stdout + r.stderr

    def start(self, text: str) -> subprocess.Popen:
        log = open(self.workdir / "foreground.log", "w")  # noqa: SIM115 (closed with the process)
        proc = subprocess.Popen(
            ["bash", "-c", self.script(text, keep=False)],
            cwd=self.workdir,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, as a terminal's foreground job
        )
        log.close()
        return proc

    def output(self) -> str:
        return (self.workdir / "foreground.log").read_text()


def _count(port: int, database: str, table: str):
    import psycopg

    try:
        with psycopg.connect(
            host="127.0.0.1", port=port, user="postgres", dbname=database, connect_timeout=5
        ) as conn:
            return conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
    except psycopg.Error:
        return None


# what an until-stopped block waits for, by its mark's text: (database, table, rows)
UNTIL = {
    "analytics.orders holds 100000 rows": ("analytics", "orders", 100000),
    "shop.orders_copy holds 10000 rows": ("shop", "orders_copy", 10000),
}


def walk(term: Terminal, section: list[Block], pg_port: int) -> None:
    """Run a section's shell blocks as a user does: each `run` to its end; an `until-stopped`
    command until what it says holds, the `while-running` blocks after it meanwhile, then
    Ctrl-C (it must stop cleanly)."""
    i = 0
    while i < len(section):
        b = section[i]
        i += 1
        if b.kind == "run":
            term.run(b.text, timeout=180)
        elif b.kind == "until-stopped":
            meanwhile = []
            while i < len(section) and section[i].kind == "while-running":
                meanwhile.append(section[i])
                i += 1
            _until_stopped(term, b, meanwhile, pg_port)


def _until_stopped(term: Terminal, b: Block, meanwhile: list[Block], pg_port: int) -> None:
    database, table, rows = UNTIL[b.arg]
    proc = term.start(b.text)
    try:
        wait_until(
            lambda: _count(pg_port, database, table) == rows or proc.poll() is not None,
            timeout=400,
            every=1,
            what=b.arg,
            diagnose=term.output,
        )
        assert proc.poll() is None, term.output()
        for other in meanwhile:  # the change takes a second or two: try again until it shows
            seen = []
            wait_until(
                lambda other=other, seen=seen: re.search(
                    EXPECT[other.arg], seen.append(term.run(other.text)) or seen[-1]
                ),
                timeout=60,
                every=1,
                what=f"{EXPECT[other.arg]} in the output of:\n{other.text}",
                diagnose=lambda seen=seen: seen[-1] if seen else "",
            )
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal
        proc.wait(timeout=120)
    out = term.output()
    assert proc.returncode == 0, out
    assert "created source connector" in out and "stopping" in out, out
    assert "cdc-pw" not in out


def _halt_leftovers(demo: Path) -> None:
    """Stop private servers a failed run left behind (pids from their own pid files)."""
    for pidfile in [*demo.glob("mariadb/*.pid"), demo / "pg/data/postmaster.pid"]:
        try:
            pid = int(pidfile.read_text().split()[0])
            os.kill(pid, signal.SIGKILL if "postmaster" not in pidfile.name else signal.SIGQUIT)
        except (OSError, ValueError, IndexError):
            pass


@pytest.mark.spark
def test_the_database_sections_run_as_written(tmp_path):
    """Route B's private servers, the data, `connectql run examples/mysql_to_postgres.sql`
    until the snapshot has arrived, the change tried in another terminal, Ctrl-C; then the
    PostgreSQL section's copy on the same private server; then the servers stopped: each block
    as the README writes it, on free ports."""
    found = [b for b in blocks() if b.lang == "sh"]
    mysql = [b for b in found if b.section == "MySQL / MariaDB"]
    pg = [b for b in found if b.section == "PostgreSQL"]
    assert [b.kind for b in mysql] == [
        "skip",
        "run",
        "run",
        "until-stopped",
        "while-running",
        "run",
    ]
    assert mysql[-1].text.startswith(
        "mariadb-admin --protocol=socket --socket=$DEMO/mariadb.sock -u root shutdown"
    )  # route B's stop: over its own socket, as only a local connection waits for the exit
    demo = Path(tempfile.mkdtemp(prefix="connectql-readme-", dir="/tmp"))
    demo.chmod(0o755)  # the postgres user reaches its data directory through it
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MYSQL", "PG", "CONNECTQL", "CDC_"))
    }
    env.update(DEMO=str(demo / "d"), MYSQL_TCP_PORT=str(_free_port()), PGPORT=str(_free_port()))
    term = Terminal(tmp_path, env)
    try:
        walk(term, [*mysql[:-1], *pg, mysql[-1]], int(env["PGPORT"]))
        assert not list((demo / "d").glob("mariadb/*.pid"))
        assert not (demo / "d/pg/data/postmaster.pid").exists()
    finally:
        _halt_leftovers(demo / "d")
        time.sleep(0.5)
        shutil.rmtree(demo, ignore_errors=True)
