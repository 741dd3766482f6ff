"""PostgreSQL servers for tests: a private throwaway instance with wal_level=logical (for
logical decoding), the machine's shared one, and a helper to (re)create a database."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.servers import PrivateServer, shared

PG_BIN = os.environ.get("CONNECTQL_PG_BIN", "/usr/lib/postgresql/15/bin")
OS_USER = "postgres"


def _conninfo(host: str, port: int, user: str, dbname: str) -> str:
    return f"host={host} port={port} user={user} dbname={dbname}"


class PrivatePostgres(PrivateServer):
    """A throwaway PostgreSQL cluster (initdb + postgres) run as the `postgres` OS user."""

    user = "postgres"
    prefix = "connectql-pg-"

    # -- helpers --------------------------------------------------------------------------
    def conninfo(self, dbname: str = "postgres") -> str:
        if self.port is None:
            raise RuntimeError("PrivatePostgres is not started")
        return _conninfo(self.host, self.port, self.user, dbname)

    def _run_as_postgres(self, args: list[str], **kw) -> subprocess.CompletedProcess:
        cmd = list(args)
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", OS_USER, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, text=True, **kw)

    def _prepare(self) -> None:
        if os.geteuid() == 0:
            pw = pwd.getpwnam(OS_USER)
            os.chown(self.base, pw.pw_uid, pw.pw_gid)
        self.sockdir = os.path.join(self.base, "sock")
        self._run_as_postgres(["mkdir", "-p", self.sockdir], check=True)
        r = self._run_as_postgres(
            [
                os.path.join(PG_BIN, "initdb"),
                "-D",
                self.datadir,
                "-A",
                "trust",
                "-U",
                self.user,
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ]
        )
        if r.returncode != 0:
            raise RuntimeError(f"initdb failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")

    def _start_server(self, attempt: int) -> tuple[str, bool]:
        """Start the postmaster with `pg_ctl start -w` (which waits until *this* postmaster
        accepts connections, or notices it died). Returns (error message or '', whether the
        failure was a port clash, worth a retry on another port)."""
        settings = {
            "wal_level": "logical",
            "max_replication_slots": "20",
            "max_wal_senders": "20",
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            "listen_addresses": "127.0.0.1",
            **self.extra_settings,
        }
        opts = " ".join(f"-c {k}={v}" for k, v in settings.items())
        opts += f" -p {self.port} -k {self.sockdir}"
        # a log per attempt: a dying postmaster of an earlier attempt may still write to its log
        self.logfile = os.path.join(self.base, f"server-{attempt}.log")
        timeout = max(1, int(self.timeout))
        pg_ctl = [os.path.join(PG_BIN, "pg_ctl"), "start", "-w", "-t", str(timeout)]
        try:
            r = self._run_as_postgres(
                [*pg_ctl, "-D", self.datadir, "-l", self.logfile, "-o", opts],
                timeout=timeout + 30,
            )
            failed = r.returncode != 0
            detail = f"pg_ctl exited with {r.returncode}: {(r.stdout + r.stderr).strip()}"
        except subprocess.TimeoutExpired:
            failed, detail = True, "pg_ctl did not return"
        tail = self._log_tail()
        if failed:
            clash = "could not bind" in tail or "could not create any TCP/IP sockets" in tail
            return (
                f"private PostgreSQL on port {self.port} failed to start (timeout {timeout}s; "
                f"{detail})\n--- log tail ({self.logfile}) ---\n{tail}",
                clash,
            )
        import psycopg

        try:
            with psycopg.connect(self.conninfo(), connect_timeout=10) as conn:
                datadir = conn.execute("SHOW data_directory").fetchone()[0]
        except psycopg.Error as e:
            return f"private PostgreSQL on port {self.port} is up but refuses TCP: {e}", False
        if os.path.realpath(datadir) != os.path.realpath(self.datadir):
            return f"port {self.port} is served by another PostgreSQL ({datadir})", True
        return "", False

    def _halt_server(self, graceful: bool = False) -> None:
        if self.datadir and os.path.exists(os.path.join(self.datadir, "postmaster.pid")):
            mode = "fast" if graceful else "immediate"
            try:
                self._run_as_postgres(
                    [os.path.join(PG_BIN, "pg_ctl"), "stop", "-D", self.datadir, "-m", mode],
                    timeout=60 if graceful else 20,
                )
            except subprocess.TimeoutExpired:
                states = self.process_states()
                self.kill_all()  # no server left behind
                if graceful:
                    raise RuntimeError(
                        f"pg_ctl stop -m {mode} did not end in 60 s; the server's processes:"
                        f" {states}\n--- log tail ---\n{self._log_tail()}"
                    ) from None
                # an immediate stop is a crash: one by SIGKILL is the same to the tests. Seen
                # twice in CI right after a suspension (test_hangs): a child forked as the
                # server was resumed, still with the postmaster's title, outlived the
                # postmaster's own SIGKILL of its children, and the postmaster waited for it
                print(f"pg_ctl stop -m immediate hung; killed {states}", file=sys.stderr)

    def _main_pid(self) -> int | None:
        try:
            with open(os.path.join(self.datadir, "postmaster.pid")) as f:
                return int(f.readline())
        except (OSError, ValueError, TypeError):
            return None


class SharedPostgres:
    """The machine's shared PostgreSQL (wal_level=replica: no logical decoding)."""

    def __init__(self, host: str = "127.0.0.1", port: int = 5432, user: str = "postgres"):
        self.host = host
        self.port = port
        self.user = user

    def conninfo(self, dbname: str = "postgres") -> str:
        return _conninfo(self.host, self.port, self.user, dbname)


def create_database(conninfo: str, name: str) -> str:
    """Drop (WITH (FORCE)) and create database `name` on the server of `conninfo`;
    return a conninfo for the new database."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = psycopg.conninfo.conninfo_to_dict(conninfo)
    params["dbname"] = name
    return psycopg.conninfo.make_conninfo(**params)


def require_password(server, *roles: str) -> None:
    """Make the private `server` ask `roles` for their passwords (it trusts everyone otherwise)."""
    import psycopg

    with psycopg.connect(server.conninfo(), autocommit=True) as conn:
        hba = Path(conn.execute("SHOW hba_file").fetchone()[0])
        lines = hba.read_text()
        rule = f"host all {','.join(roles)} 127.0.0.1/32 scram-sha-256\n"
        if rule not in lines:
            tmp = Path(f"/tmp/hba-{uuid.uuid4().hex}")
            tmp.write_text(rule + lines)
            shutil.copyfile(tmp, hba)
            tmp.unlink()
        conn.execute("SELECT pg_reload_conf()")
    time.sleep(0.3)


@pytest.fixture(scope="session")
def pg_logical():
    """A private PostgreSQL with wal_level=logical, for the whole test session."""
    with shared("pg_logical", PrivatePostgres) as server:
        yield server


@pytest.fixture(scope="session")
def pg_shared():
    """The shared PostgreSQL at 127.0.0.1:5432."""
    return SharedPostgres()


@pytest.fixture
def pg_own():
    """A private PostgreSQL of one test's own, which the test may stop, halt or restart."""
    server = PrivatePostgres().start()
    yield server
    server.stop()


def pg_sql(info: str, statement: str):
    """Run one statement on its own autocommit connection (synchronous commit: logical decoding
    sees flushed WAL only); its rows, or None."""
    with psycopg.connect(info, autocommit=True, connect_timeout=10) as c:
        c.execute("SET synchronous_commit = on")
        cur = c.execute(statement)
        return cur.fetchall() if cur.description else None


@pytest.fixture
def cdc_databases(pg_logical):
    """({"src", "dst", "slot"}: names, {"src", "dst"}: conninfos) of a source and a target
    database on the private server with logical decoding and a slot name for a cdc source; the
    slot (its walsender ended first: a killed worker's may linger) and both are dropped after."""
    tag = uuid.uuid4().hex[:8]
    names = {"src": f"cq_cdc_src_{tag}", "dst": f"cq_cdc_dst_{tag}", "slot": f"cq_cdc_{tag}"}
    infos = {k: create_database(pg_logical.conninfo(), names[k]) for k in ("src", "dst")}
    yield names, infos
    slot = "FROM pg_replication_slots WHERE slot_name = %s"
    with psycopg.connect(pg_logical.conninfo(), autocommit=True) as c:
        deadline = time.monotonic() + 30
        while c.execute(f"SELECT 1 {slot} AND active", (names["slot"],)).fetchall():
            assert time.monotonic() < deadline, f"slot {names['slot']} still in use"
            c.execute(f"SELECT pg_terminate_backend(active_pid) {slot}", (names["slot"],))
            time.sleep(0.2)
        c.execute(f"SELECT pg_drop_replication_slot(slot_name) {slot}", (names["slot"],))
        for db in (names["src"], names["dst"]):
            c.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


ITEMS_CHECKSUM = (
    "SELECT count(*), md5(coalesce(string_agg((id, name, qty)::text, ',' ORDER BY id), ''))"
    " FROM items"
)


def items_checksum(info: str):
    """(rows, md5 of id, name, qty of every row) of items, or None before the table exists."""
    try:
        return pg_sql(info, ITEMS_CHECKSUM)[0]
    except psycopg.errors.UndefinedTable:
        return None
