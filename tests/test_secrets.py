"""Secret values never leak: one full run, through every way a user drives connectql, with
distinctive secrets given inline, as `SECRET name`, as `${env:NAME}` / `${file:PATH}`, as a
wrong password, as a `SET` of a secret Spark key and inside statements with syntax errors; then
every output channel is searched for them: each process's stdout and stderr (`connectql run`,
embedded `connectql sql`, `connectql server` and the commands that talk to it), what `connectql
shell` shows on its terminal, every HTTP response body, SHOW / DESCRIBE / EXPLAIN and the public
catalog tables, the error messages of failed CREATEs and of a connector that fails at run time,
the shell's history files, and every file in the home (logs, checkpoints, streams, the server's
address) but the two that hold secrets by design: secrets.json and catalog.duckdb (whose public
tables are read through SELECT; both must be readable by their owner only).

The connectors really log in with those passwords: PostgreSQL roles on the private server that
must give them (the shared server trusts every local connection, so a wrong one would pass)."""

from __future__ import annotations

import json
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pyarrow.parquet as pq
import pytest

from connectql.catalog.schema import PUBLIC_TABLES
from connectql.grammar.printer import value_sql
from tests.helpers import read_parquet_rows, wait_until
from tests.pgserver import create_database, require_password
from tests.test_server import Server, cli, running_server
from tests.test_shell import Shell

pytestmark = pytest.mark.spark

SECRETS = {
    "inline": "inl1ne-S3cret-4711",
    "stored": "st0red-S3cret-4711",
    "env": "env-S3cret-4711",
    "wrong": "wr0ng-S3cret-4711",
    "setting": "s3a-S3cret-4711",
}
ROLES = {"cq_inline": SECRETS["inline"], "cq_stored": SECRETS["stored"], "cq_env": SECRETS["env"]}
PRIVATE = ("secrets.json", "catalog.duckdb")  # (and its .wal): where secrets are kept
ROWS = 200  # datagen rows into the sinks
AUTH_FAILED = "password authentication failed for user"
S3_SECRET = "SET 'spark.hadoop.fs.s3a.secret.key' = '{}'".format(SECRETS["setting"])


class Outputs:
    """Every text the run showed or wrote, by channel, to search for the secret values."""

    def __init__(self):
        self.texts: list[tuple[str, str]] = []

    def add(self, channel: str, text) -> None:
        self.texts.append((channel, text if isinstance(text, str) else json.dumps(text)))

    def process(self, channel: str, r: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
        self.add(f"{channel}: stdout", r.stdout)
        self.add(f"{channel}: stderr", r.stderr)
        return r

    def home(self, home: Path) -> None:
        for path in sorted(p for p in home.rglob("*") if p.is_file()):
            name = f"$HOME/{path.relative_to(home)}"
            if not path.name.startswith(PRIVATE):
                self.add(f"file {name}", path.read_bytes().decode(errors="replace"))
            if path.suffix == ".parquet":  # the values, in case compression hides them
                self.add(f"rows of {name}", str(pq.read_table(path).to_pylist()))

    def leaks(self) -> list[str]:
        return [
            f"the {kind} secret {value!r} leaked in {channel}"
            for channel, text in self.texts
            for kind, value in SECRETS.items()
            if value in text
        ]


@pytest.fixture
def pg(pg_logical):
    """(server, database) on the private server, with a role per password of ROLES that must
    log in with it, and a table `src` of 30 rows."""
    name = f"cq_{uuid.uuid4().hex[:8]}"
    info = create_database(pg_logical.conninfo(), name)
    roles = ", ".join(ROLES)
    with psycopg.connect(info, autocommit=True) as c:
        for role, password in ROLES.items():
            c.execute(f"DROP ROLE IF EXISTS {role}")
            c.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
        c.execute(f"GRANT ALL ON SCHEMA public TO {roles}")
        # the sinks share one progress table, which the first of them creates
        c.execute(f"GRANT pg_read_all_data, pg_write_all_data TO {roles}")
        c.execute("CREATE TABLE src AS SELECT i AS id, 'v' || i AS v FROM generate_series(1, 30) i")
    require_password(pg_logical, *ROLES)
    yield pg_logical, name
    with psycopg.connect(pg_logical.conninfo(), autocommit=True) as c:
        c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        for role in ROLES:
            c.execute(f"DROP ROLE IF EXISTS {role}")


@dataclass
class Run:
    """One home driven through every command, with what it showed in `seen`."""

    home: Path
    seen: Outputs
    server: Any  # the PostgreSQL server
    database: str

    def cli(self, channel: str, *args: str) -> subprocess.CompletedProcess:
        # COLUMNS: rich folds a table's cells to the width, which would split a leaked value
        return self.seen.process(channel, cli(self.home, *args, COLUMNS="100000"))

    def login(self, role: str) -> dict[str, Any]:
        """The options of a postgres connector logging in as `role`, its password apart."""
        s = self.server
        return {"host": s.host, "port": s.port, "user": role, "database": self.database}

    def conn(self, role: str) -> str:
        return ", ".join(f"{k} = {value_sql(v)}" for k, v in self.login(role).items())

    def rows_in(self, table: str) -> int:
        with psycopg.connect(self.server.conninfo(self.database), autocommit=True) as c:
            return c.execute(f"SELECT count(*) FROM {table}").fetchone()[0]

    def wrong_create(self) -> str:
        """A CREATE whose password is wrong: it fails, naming the role."""
        return (
            f"CREATE SINK CONNECTOR wrong TO postgres FROM nums WITH ({self.conn('cq_stored')},"
            f" password = '{SECRETS['wrong']}', table = 'w')"
        )


def inspect(*connectors: str) -> str:
    """Statements that show the connectors every way there is."""
    describe = "".join(f"DESCRIBE CONNECTOR {n}; " for n in connectors)
    tables = "; ".join(f"SELECT * FROM {t}" for t in PUBLIC_TABLES)
    return f"SHOW CONNECTORS; SHOW SECRETS; SHOW STREAMS; {describe}{tables};"


def pipeline(run: Run, password_file: Path) -> str:
    """What `connectql run` runs: datagen -> stream nums -> two postgres sinks (password as
    SECRET, inline), a postgres source with its password from the environment, EXPLAIN with
    each kind of password, then everything SHOW, DESCRIBE and SELECT show."""
    return f"""
    {S3_SECRET};
    CREATE SECRET pw AS '{SECRETS["stored"]}';
    CREATE SOURCE CONNECTOR gen FROM datagen INTO nums WITH ('rows.total' = {ROWS}, run = 'once',
      seed = 7, fields = 'id BIGINT SEQUENCE, qty INT RANDOM(1, 9)');
    CREATE SINK CONNECTOR stored TO postgres FROM nums WITH ({run.conn("cq_stored")},
      password = SECRET pw, table = 'stored', run = 'once');
    CREATE SINK CONNECTOR inline TO postgres FROM nums WITH ({run.conn("cq_inline")},
      password = '{SECRETS["inline"]}', table = 'inline', run = 'once', 'errors.retry.max' = 0);
    CREATE SOURCE CONNECTOR fromenv FROM postgres INTO pgrows WITH ({run.conn("cq_env")},
      password = ${{env:CQL_TEST_PW}}, table = 'src', mode = 'bulk', run = 'once');
    EXPLAIN CREATE SINK CONNECTOR x TO postgres FROM nums WITH ({run.conn("cq_stored")},
      password = SECRET pw, table = 'x');
    EXPLAIN CREATE SINK CONNECTOR y TO postgres FROM nums WITH ({run.conn("cq_inline")},
      password = '{SECRETS["inline"]}', table = 'y');
    EXPLAIN CREATE SOURCE CONNECTOR z FROM postgres INTO z WITH ({run.conn("cq_env")},
      password = '${{file:{password_file}}}', table = 'src', mode = 'bulk');
    {inspect("gen", "stored", "inline", "fromenv")}
    """


class Api:
    """The API of a running server (tests/test_server.py); every response body goes to `seen`."""

    def __init__(self, server: Server, seen: Outputs):
        self.server, self.seen = server, seen

    def __call__(self, method: str, path: str, body=None, status: int = 200) -> Any:
        got, payload = self.server.call(method, path, body)
        self.seen.add(f"HTTP {method} {path} ({got})", payload)
        assert got == status, (method, path, got, payload)
        return payload

    def sql(self, statements: str, status: int = 200) -> dict:
        return self("POST", "/sql", {"sql": statements}, status)

    def state(self, name: str) -> dict:
        return self("GET", f"/connectors/{name}/status")["connector"]

    def read_everything(self) -> None:
        for path in ("/health", "/connectors?expand=status,info", "/metrics", "/streams"):
            self("GET", path)
        for name in self("GET", "/connectors"):
            for part in ("", "/config", "/status", "/offsets"):
                self("GET", f"/connectors/{name}{part}")


def through_the_api(run: Run, api: Api) -> None:
    """Connectors failing at run time and at CREATE, Kafka Connect's way in, validation, SQL
    with secrets in it, typos; then every GET there is."""
    api.read_everything()
    api.sql("RESET CONNECTOR inline OFFSETS; RESTART CONNECTOR inline")
    wait_until(lambda: api.state("inline")["state"] == "FAILED", 120, what="inline FAILED")
    assert f"{AUTH_FAILED} 'cq_inline'" in api.state("inline")["trace"]
    config = {
        "connector.class": "PostgresSinkConnector",
        "topics": "nums",
        **run.login("cq_stored"),
        "password": SECRETS["stored"],
        "table": "kc",
        "run": "once",
    }
    api("POST", "/connectors", {"name": "kc", "config": config}, 201)
    bad = {**config, "password": SECRETS["wrong"]}
    assert AUTH_FAILED in api("POST", "/connectors", {"name": "x", "config": bad}, 400)["message"]
    validate = "/connector-plugins/postgres-sink/config/validate"
    assert api("PUT", validate, {**bad, "port": "x"})["error_count"] == 1
    api.sql(
        f"{S3_SECRET}; CREATE SECRET IF NOT EXISTS pw AS '{SECRETS['stored']}';"
        f" EXPLAIN {run.wrong_create()}; {inspect('stored', 'inline', 'fromenv', 'kc')}"
    )
    assert AUTH_FAILED in api.sql(run.wrong_create(), 400)["message"]
    for typo in (
        f"CREATE SECRET pw2 '{SECRETS['stored']}'",
        f"CREATE SINK CONNECTOR t TO postgres FROM nums WITH (password '{SECRETS['inline']}')",
    ):
        assert "unexpected string '****'" in api.sql(typo, 400)["message"]
    wait_until(lambda: api.state("kc")["state"] == "FINISHED", 120, what="kc FINISHED")
    api.read_everything()


def in_the_shell(run: Run, where: str) -> None:
    """Statements with secrets typed into `connectql shell` (on a terminal, so it keeps a
    history file), one a typo; what the terminal shows besides their echo goes to `seen`."""
    shell = Shell(run.home)
    for line in (
        f"CREATE SECRET IF NOT EXISTS pw AS '{SECRETS['stored']}';",
        f"{S3_SECRET};",
        f"ALTER CONNECTOR inline SET (password = '{SECRETS['inline']}');",
        f"CREATE SECRET typo '{SECRETS['wrong']}';",
        "DESCRIBE CONNECTOR inline;",
    ):
        shown = shell.run(line).replace(line, "", 1)
        run.seen.add(f"connectql shell ({where}) after {line[:30]}...", shown)
    assert shell.leave() == 0


def test_no_secret_value_reaches_any_output(tmp_path, pg, monkeypatch):
    monkeypatch.setenv("CQL_TEST_PW", SECRETS["env"])  # for every process started here
    run = Run(tmp_path / "home", Outputs(), *pg)
    password_file = tmp_path / "password"
    password_file.write_text(SECRETS["env"])

    # 1. a script in an embedded worker: each kind of password logs in (the rows arrive)
    script = tmp_path / "pipeline.sql"
    script.write_text(pipeline(run, password_file))
    r = run.cli("connectql run", "run", str(script))
    assert r.returncode == 0, r.stderr
    assert "****" in r.stdout and "SECRET pw" in r.stdout
    assert run.rows_in("stored") == run.rows_in("inline") == ROWS
    assert read_parquet_rows(run.home / "streams/pgrows")[0][0] == 30

    # 2. embedded statements, the last a CREATE with a wrong password
    r = run.cli("connectql sql", "sql", inspect("gen", "stored", "inline"), run.wrong_create())
    assert r.returncode == 1 and f"{AUTH_FAILED} 'cq_stored'" in " ".join(r.stderr.split())
    in_the_shell(run, "embedded")

    # 3. the server, after the inline password stopped working (`inline` fails when run)
    with psycopg.connect(run.server.conninfo(run.database), autocommit=True) as c:
        c.execute("ALTER ROLE cq_inline PASSWORD 'rotated'")
    logs = tmp_path / "logs"
    with running_server(run.home, logs) as server:
        through_the_api(run, Api(server, run.seen))
        # 4. the commands a user types, talking to the server
        run.cli("connectql status", "status")
        run.cli("connectql status inline", "status", "inline")
        for statements in (
            "SHOW CONNECTORS; DESCRIBE CONNECTOR inline; SELECT * FROM connectors;"
            " SELECT * FROM connector_events",
            f"EXPLAIN {run.wrong_create()}; {inspect('stored', 'inline', 'fromenv', 'kc')}",
        ):
            r = run.cli(f"connectql sql {statements[:40]}...", "sql", statements)
            assert r.returncode == 0, r.stderr
        r = run.cli("connectql sql (a typo)", "sql", f"CREATE SECRET pw3 AS {SECRETS['stored']}")
        assert r.returncode == 1 and "unexpected '****'" in r.stderr
        in_the_shell(run, "through the server")
    assert run.rows_in("kc") == ROWS
    for stream in ("out", "err"):
        run.seen.add(f"connectql server: std{stream}", (logs / f"server.{stream}").read_text())

    run.seen.home(run.home)  # with the embedded shell's history
    remote_history = tmp_path / ".connectql_history"  # the shell's $HOME is tmp_path
    run.seen.add("file ~/.connectql_history", remote_history.read_text())
    channels = {c for c, _ in run.seen.texts}
    assert {"file $HOME/worker.log", "file $HOME/spark.log", "file $HOME/shell_history"} <= channels
    assert any(c.startswith("file $HOME/checkpoints/inline/") for c in channels)
    leaks = run.seen.leaks()
    assert not leaks, "\n".join(leaks)
    for kept in (".", *PRIVATE):  # where secrets are kept, only their owner may look
        mode = (run.home / kept).stat().st_mode & 0o777
        assert mode & 0o077 == 0, f"$HOME/{kept} has mode {mode:o}"


LOGGING_WORKER = """
import logging, sys
from connectql.grammar.parser import parse_script
from connectql.worker.worker import Worker

worker = Worker(sys.argv[1])
try:
    for stmt in parse_script(sys.argv[2]):
        worker.execute(stmt)
    secrets = sys.argv[3].split(",")
    client = logging.getLogger("some.client.library")
    try:
        raise ConnectionError(f"login with {secrets[0]} refused")
    except ConnectionError:
        client.exception("connect to db as %s failed", secrets[1])
    client.warning("dsn: password=%s key=%s", secrets[2], secrets[3])
    jvm = worker.engine.spark._jvm
    spark_log = jvm.org.apache.logging.log4j.LogManager.getLogger("connectql.probe")
    spark_log.error("spark saw " + " and ".join(secrets))
    jvm.java.lang.System.err.println("jvm saw " + " and ".join(secrets))
    jvm.java.lang.System.err.flush()
    for stmt in parse_script("CREATE SECRET later AS 'l4ter-L0g-S3cret'"):
        worker.execute(stmt)
    spark_log.error("and then l4ter-L0g-S3cret")
finally:
    worker.close()
"""


def test_logs_mask_secrets_whoever_writes_them(tmp_path, pg_shared):
    """A client library (any Python logger), Spark or the JVM writing a secret into a log: the
    line reaches worker.log, spark.log and jvm.log with the value masked (stored, inline, ${env:..} and
    SET values); secrets made later count too. A worker process of its own, so that Spark logs
    to its home as `connectql` does."""
    import os
    import sys

    create_database(pg_shared.conninfo(), "cq_log_secrets")
    target = (
        f"host = '{pg_shared.host}', port = {pg_shared.port}, user = '{pg_shared.user}',"
        " database = 'cq_log_secrets', 'initial.state' = 'paused'"
    )
    script = ";".join(
        (
            "CREATE SECRET logpw AS 'st0red-L0g-S3cret'",
            "CREATE SOURCE CONNECTOR lg FROM datagen INTO lg WITH ('rows.total' = 10, run = 'once')",
            f"CREATE SINK CONNECTOR a TO postgres FROM lg WITH ({target}, table = 'a',"
            " password = 'inl1ne-L0g-S3cret')",
            f"CREATE SINK CONNECTOR b TO postgres FROM lg WITH ({target}, table = 'b',"
            " password = '${env:CQ_LOG_PW}')",
            "SET 'spark.hadoop.fs.s3a.secret.key' = 's3t-L0g-S3cret'",
        )
    )
    secrets = ("st0red-L0g-S3cret", "inl1ne-L0g-S3cret", "env-L0g-S3cret", "s3t-L0g-S3cret")
    home = tmp_path / "home"
    r = subprocess.run(
        [sys.executable, "-c", LOGGING_WORKER, str(home), script, ",".join(secrets)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "CQ_LOG_PW": "env-L0g-S3cret"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    logs = ("worker.log", "spark.log", "jvm.log")
    texts = {name: (home / name).read_text() for name in logs}
    assert "connect to db as **** failed" in texts["worker.log"]
    assert "login with **** refused" in texts["worker.log"]  # the traceback too
    assert "dsn: password=**** key=****" in texts["worker.log"]
    assert "spark saw **** and **** and **** and ****" in texts["spark.log"]
    assert "and then ****" in texts["spark.log"]
    assert "jvm saw **** and **** and **** and ****" in texts["jvm.log"]
    for name, text in (*texts.items(), ("stdout", r.stdout), ("stderr", r.stderr)):
        for secret in (*secrets, "l4ter-L0g-S3cret"):
            assert secret not in text, f"{secret} in {name}"
