"""MariaDB servers for tests: a private throwaway instance with row-based binary logging (for
change data capture from the binlog), and a helper to (re)create a database.

The private server is made by `mariadb-install-db` into a temp datadir and run as
`mariadbd --user=root` (we run as root in CI; as another user `--user` is ignored) with
`--log-bin --binlog-format=ROW --binlog-row-image=FULL --server-id=1`. Grant tables are
real (no --skip-grant-tables): root@127.0.0.1 has an empty password and all privileges, so
tests can create less privileged users to provoke privilege errors. `binlog_row_metadata`
is left at the server default (NO_LOG: row events carry no column names); it is dynamic,
`SET GLOBAL binlog_row_metadata=FULL` turns names on for sessions started afterwards."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time

import pytest

from tests.servers import PrivateServer, shared

MARIADBD = os.environ.get("CONNECTQL_MARIADBD", shutil.which("mariadbd") or "/usr/sbin/mariadbd")
INSTALL_DB = os.environ.get(
    "CONNECTQL_MARIADB_INSTALL_DB",
    shutil.which("mariadb-install-db") or "/usr/bin/mariadb-install-db",
)


def _quote_ident(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


class PrivateMariaDB(PrivateServer):
    """A throwaway MariaDB server (mariadb-install-db + mariadbd) with ROW binary logging."""

    user = "root"
    password = ""
    prefix = "connectql-mariadb-"
    proc: subprocess.Popen | None = None

    # -- helpers --------------------------------------------------------------------------
    def connect(self, database: str | None = None, **kwargs):
        """A pymysql connection (autocommit on unless told otherwise) as root over TCP."""
        import pymysql

        if self.port is None:
            raise RuntimeError("PrivateMariaDB is not started")
        kwargs.setdefault("autocommit", True)
        kwargs.setdefault("connect_timeout", 10)
        kwargs.setdefault("charset", "utf8mb4")
        return pymysql.connect(
            host=self.host,
            port=self.port,
            user=self.user,
            password=self.password,
            database=database,
            **kwargs,
        )

    def connection_settings(self) -> dict:
        """Settings for pymysqlreplication.BinLogStreamReader(connection_settings=...)."""
        if self.port is None:
            raise RuntimeError("PrivateMariaDB is not started")
        return {"host": self.host, "port": self.port, "user": self.user, "password": self.password}

    def _prepare(self) -> None:
        self.socket = os.path.join(self.base, "mysqld.sock")
        try:
            r = subprocess.run(
                [
                    INSTALL_DB,
                    "--no-defaults",
                    f"--datadir={self.datadir}",
                    "--user=root",
                    "--auth-root-authentication-method=normal",
                    "--skip-test-db",
                    "--skip-name-resolve",
                ],
                capture_output=True,
                text=True,
                timeout=self.timeout + 60,
            )
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(f"mariadb-install-db did not return: {e}") from None
        if r.returncode != 0:
            raise RuntimeError(
                f"mariadb-install-db failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
            )

    def _server_args(self) -> list[str]:
        settings = {
            "datadir": self.datadir,
            "user": "root",
            "port": str(self.port),
            "bind-address": self.host,
            "socket": self.socket,
            "pid-file": os.path.join(self.base, "mysqld.pid"),
            "tmpdir": self.base,
            "log-bin": os.path.join(self.datadir, "binlog"),
            "binlog-format": "ROW",
            "binlog-row-image": "FULL",
            "server-id": "1",
            "skip-name-resolve": None,
            "character-set-server": "utf8mb4",
            "collation-server": "utf8mb4_general_ci",
            "innodb-buffer-pool-size": "64M",
            "innodb-flush-log-at-trx-commit": "2",
            "sync-binlog": "0",
            **self.extra_settings,
        }
        args = [MARIADBD, "--no-defaults"]  # --no-defaults must come first
        for k, v in settings.items():
            args.append(f"--{k}" if v is None else f"--{k}={v}")
        args.append(f"--log-error={self.logfile}")
        return args

    def _start_server(self, attempt: int) -> tuple[str, bool]:
        """Start mariadbd and wait until *this* server accepts TCP connections, or died, or
        the timeout passed. Returns (error message or '', whether the failure was a port
        clash, worth a retry on another port)."""
        import pymysql

        # a log per attempt: a dying server of an earlier attempt may still write to its log
        self.logfile = os.path.join(self.base, f"server-{attempt}.log")
        out = open(os.path.join(self.base, f"server-{attempt}.out"), "ab")
        try:
            self.proc = subprocess.Popen(
                self._server_args(),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C in the terminal is for pytest, not for us
            )
        finally:
            out.close()
        deadline = time.monotonic() + self.timeout
        last_error: Exception | None = None
        while True:
            code = self.proc.poll()
            if code is not None:
                tail = self._log_tail()
                clash = "Bind on TCP/IP port" in tail or "Address already in use" in tail
                return (
                    f"private MariaDB on port {self.port} exited with {code} while starting"
                    f"\n--- log tail ({self.logfile}) ---\n{tail}",
                    clash,
                )
            try:
                conn = pymysql.connect(
                    host=self.host,
                    port=self.port,
                    user=self.user,
                    password=self.password,
                    connect_timeout=2,
                )
            except pymysql.err.OperationalError as e:
                last_error = e
            else:
                try:
                    with conn.cursor() as cur:
                        cur.execute("SELECT @@datadir, @@log_bin")
                        datadir, log_bin = cur.fetchone()
                finally:
                    conn.close()
                if os.path.realpath(datadir) != os.path.realpath(self.datadir):
                    return f"port {self.port} is served by another MariaDB ({datadir})", True
                if not log_bin:
                    return f"private MariaDB on port {self.port} has no binary log", False
                return "", False
            if time.monotonic() > deadline:
                return (
                    f"private MariaDB on port {self.port} did not accept connections within "
                    f"{self.timeout}s (last error: {last_error})"
                    f"\n--- log tail ({self.logfile}) ---\n{self._log_tail()}",
                    False,
                )
            time.sleep(0.1)

    def _halt_server(self, graceful: bool = False) -> None:
        """Stop our mariadbd: SIGTERM (clean shutdown) if graceful, else SIGKILL (a crash);
        SIGKILL anyway when a clean shutdown takes longer than the timeout."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            proc.send_signal(signal.SIGTERM if graceful else signal.SIGKILL)
            proc.wait(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        except ProcessLookupError:
            pass

    def _main_pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return  # not halted
        super().resume()


def create_database(conn_or_server, name: str) -> str:
    """Drop and create database `name`, through a pymysql connection or on a server (anything
    with a connect() method, like PrivateMariaDB); return the name."""
    own = hasattr(conn_or_server, "connect") and not hasattr(conn_or_server, "cursor")
    conn = conn_or_server.connect() if own else conn_or_server
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {_quote_ident(name)}")
            cur.execute(f"CREATE DATABASE {_quote_ident(name)}")
        if not own and not conn.get_autocommit():
            conn.commit()
    finally:
        if own:
            conn.close()
    return name


@pytest.fixture(scope="session")
def mariadb_binlog():
    """A private MariaDB with ROW binary logging, for the whole test session."""
    with shared("mariadb_binlog", PrivateMariaDB) as server:
        yield server
