"""`connectql server` as a user runs it: a real process on a home, driven over its HTTP API (in
Kafka Connect's shapes), by the `connectql` command, and killed with SIGKILL mid-pipeline.

Most tests share one server (module scope); the token and kill -9 tests start their own."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from connectql.catalog.streams import committed_files
from tests.crash import checkout_env, describe, kill_everything, server_process, stop_server
from tests.helpers import read_parquet_rows, wait_until
from tests.test_cli import connectql

pytestmark = pytest.mark.spark

GEN = "fields = 'id BIGINT SEQUENCE, v DOUBLE RANDOM(0, 1)'"


# ------------------------------------------------------------------ the server process


@dataclass
class Server:
    home: Path
    logs: Path
    proc: subprocess.Popen
    url: str
    pid: int
    tag: str
    token: str | None = None

    def call(self, method: str, path: str, body=None):
        return call(self.url + path, method, body, self.token)

    def ok(self, method: str, path: str, body=None, status: int = 200):
        """The body of a request that must answer `status`."""
        got, payload = self.call(method, path, body)
        assert got == status, (method, path, got, payload)
        return payload

    def state(self, name: str) -> str:
        return self.ok("GET", f"/connectors/{name}/status")["connector"]["state"]

    def alive(self) -> None:
        assert self.proc.poll() is None, "the server died\n" + describe(
            self.logs, self.home, self.tag
        )


def env(**changes: str | None) -> dict[str, str]:
    """The environment of a `connectql` process of these tests: this checkout, no home or token
    from the caller's environment, wide enough that rich does not wrap a message."""
    return checkout_env(
        **{"CONNECTQL_HOME": None, "CONNECTQL_TOKEN": None, "COLUMNS": "200", **changes}
    )


def call(url: str, method: str = "GET", body=None, token=None):
    """(status, decoded body) of one request; `body` goes as text when it is a str, else JSON."""
    sent, data = {}, None
    if body is not None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        sent["Content-Type"] = "text/plain" if isinstance(body, str) else "application/json"
    if token:
        sent["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data, sent, method=method)
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            status, raw, kind = resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        status, raw, kind = e.code, e.read(), e.headers.get("Content-Type", "")
    return status, json.loads(raw) if kind.startswith("application/json") else raw.decode()


@contextmanager
def running_server(home: Path, logs: Path, tag: str = "server", token: str | None = None):
    """`connectql --home home server --port 0` until the block ends, then SIGTERM (SIGKILL for
    it and its JVM if it has not stopped within 60 s). Waits for its server.json and /health."""
    with server_process(home, logs, tag, env(CONNECTQL_TOKEN=token), token=token) as (proc, url):
        yield Server(home, logs, proc, url, proc.pid, tag, token)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("server")
    with running_server(root / "home", root / "logs") as s:
        yield s


def cli(home: Path, *args: str, **changes: str | None) -> subprocess.CompletedProcess:
    return connectql(*args, home=home, env=env(**changes))


def states(server: Server, *names: str) -> dict[str, str]:
    listed = server.ok("GET", "/connectors?expand=status")
    return {n: listed[n]["status"]["connector"]["state"] for n in names if n in listed}


def wait_for_state(server: Server, name: str, state: str) -> None:
    def reached():
        server.alive()
        return server.state(name) == state

    wait_until(reached, timeout=120, what=f"{name} {state}")


def rows_total(server: Server, name: str) -> int:
    return server.ok("GET", f"/connectors/{name}/status")["rows_total"] or 0


def metric(text: str, name: str, **labels: str) -> float | None:
    """The value of the series `name` whose labels include `labels`, from /metrics's text."""
    for line in text.splitlines():
        found = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if found and all(f'{k}="{v}"' in found[1].split(",") for k, v in labels.items()):
            return float(found[2])
    return None


# ------------------------------------------------------------------ 1. the API


def test_the_api_creates_shows_and_steers_connectors(server, tmp_path):
    out = tmp_path / "out"
    created = server.ok(
        "POST",
        "/connectors",
        f"CREATE SOURCE CONNECTOR g1 FROM datagen INTO s1 WITH ('rows.per.second' = 200, {GEN})",
        status=201,
    )
    assert created["name"] == "g1" and created["type"] == "source"
    assert created["config"]["rows.per.second"] == 200
    sink = {"connector.class": "file-sink", "topics": "s1", "path": str(out), "format": "json"}
    created = server.ok("POST", "/connectors", {"name": "f1", "config": sink}, status=201)
    assert created["type"] == "sink"
    assert created["config"] == {
        "connector.class": "file",
        "name": "f1",
        "stream": "s1",
        "path": str(out),
        "format": "json",
    }
    assert {"f1", "g1"} <= set(server.ok("GET", "/connectors"))

    # both run, and the source's rows grow
    wait_until(
        lambda: (
            states(server, "g1", "f1") == {"g1": "RUNNING", "f1": "RUNNING"}
            and rows_total(server, "g1") > 0
        ),
        timeout=180,
        what="g1 and f1 RUNNING with rows",
    )
    seen = rows_total(server, "g1")
    wait_until(lambda: rows_total(server, "g1") > seen, timeout=60, what="g1's rows growing")
    expanded = server.ok("GET", "/connectors?expand=status,info")["f1"]
    assert expanded["info"]["config"]["stream"] == "s1"
    assert expanded["status"]["tasks"] == [
        {"id": 0, "state": "RUNNING", "worker_id": server.url.removeprefix("http://")}
    ]

    # config echoes the options; a secret is masked where the API shows a value
    config = server.ok("GET", "/connectors/g1/config")
    assert config == {
        "connector.class": "datagen",
        "name": "g1",
        "stream": "s1",
        "rows.per.second": 200,
        "fields": "id BIGINT SEQUENCE, v DOUBLE RANDOM(0, 1)",
    }
    checked = server.ok(
        "PUT",
        "/connector-plugins/postgres-source/config/validate",
        {"host": "db", "password": "hunter2", "table": "t"},
    )
    values = {c["value"]["name"]: c["value"]["value"] for c in checked["configs"]}
    assert values["password"] == "****" and values["host"] == "db"
    assert "hunter2" not in json.dumps(checked)

    # a committed offset once batches ran; metrics count the rows and show the state
    def committed_seq():
        offsets = server.ok("GET", "/connectors/g1/offsets")["offsets"]
        return offsets and offsets[0]["partition"] == {"connector": "g1"} and offsets[0]["offset"]

    assert wait_until(committed_seq, timeout=60, what="g1's committed offset")["seq"] > 0
    text = server.ok("GET", "/metrics")
    assert metric(text, "connectql_connector_rows_total", connector="g1", kind="source") > 0
    assert metric(text, "connectql_connector_state", connector="g1", state="RUNNING") == 1
    assert metric(text, "connectql_connector_state", connector="g1", state="PAUSED") == 0

    # the sink writes what the source generates, as JSON lines
    def sink_lines():
        return [json.loads(line) for f in committed_files(out) for line in open(f)]

    assert "id" in wait_until(sink_lines, timeout=120, what="JSON lines from f1")[0]

    # pause, reset offsets only when not running, resume, restart
    paused = server.ok("PUT", "/connectors/g1/pause", status=202)
    assert paused["connector"]["state"] == "PAUSED"
    assert server.state("g1") == "PAUSED"
    status, refused = server.call("DELETE", "/connectors/f1/offsets")
    assert status == 409 and "RUNNING" in refused["message"], refused
    assert server.state("f1") == "RUNNING"
    server.ok("PUT", "/connectors/g1/resume", status=202)
    wait_for_state(server, "g1", "RUNNING")
    seen = rows_total(server, "g1")
    server.ok("POST", "/connectors/g1/restart", status=202)
    wait_for_state(server, "g1", "RUNNING")
    wait_until(lambda: rows_total(server, "g1") > seen, timeout=120, what="rows after restart")

    # plugins and validation
    plugins = server.ok("GET", "/connector-plugins")
    assert {"class": "datagen", "type": "source"} in [
        {k: p[k] for k in ("class", "type")} for p in plugins
    ]
    good = {"rows.per.second": 10, "fields": "id BIGINT SEQUENCE"}
    assert server.ok("PUT", "/connector-plugins/datagen/config/validate", good)["error_count"] == 0
    bad = server.ok("PUT", "/connector-plugins/datagen/config/validate", {"rows.totl": 5})
    assert bad["error_count"] == 1
    errors = {c["value"]["name"]: c["value"]["errors"] for c in bad["configs"]}
    assert errors["rows.totl"] == ["unknown option 'rows.totl' (did you mean 'rows.total'?)"]

    # /sql: every statement's result; the first failure stops the script with the results so far
    script = "CREATE STREAM t1; SELECT count(*), count(DISTINCT id) FROM s1"
    results = server.ok("POST", "/sql", script)["results"]
    assert [r["statement"] for r in results] == ["CREATE STREAM t1", script.split("; ")[1]]
    assert results[0]["message"] == "created stream t1"
    [[count, distinct]] = results[1]["rows"]
    assert count > 0 and count == distinct
    status, failed = server.call("POST", "/sql", {"sql": "SHOW STREAMS; SELECT x FROM nowhere"})
    assert status == 400 and "unknown table or stream 'nowhere'" in failed["message"], failed
    assert [r["statement"] for r in failed["results"]] == ["SHOW STREAMS"]
    assert ["t1"] in [row[:1] for row in failed["results"][0]["rows"]]

    # delete: gone
    for name in ("g1", "f1"):
        assert "dropped" in server.ok("DELETE", f"/connectors/{name}")["message"]
        assert server.call("GET", f"/connectors/{name}")[0] == 404
    assert not {"f1", "g1"} & set(server.ok("GET", "/connectors"))


# ------------------------------------------------------------------ 2. bad requests


BAD_REQUESTS = [
    ("POST", "/connectors", '{"name": "x", "config": {', 400, "the body is not valid JSON"),
    ("POST", "/connectors", {"name": "x"}, 400, '{"name": ..., "config": {...}}'),
    (
        "POST",
        "/connectors",
        {"name": "x", "config": {"connector.class": "pulsar", "stream": "xs"}},
        400,
        "unknown connector type 'pulsar'",
    ),
    (
        "POST",
        "/connectors",
        "CREATE SOURCE CONNECTOR x FROM pulsar INTO xs WITH ()",
        400,
        "unknown connector type 'pulsar'",
    ),
    (
        "POST",
        "/connectors",
        {"name": "x", "config": {"connector.class": "datagen", "stream": "xs", "rows.totl": 5}},
        400,
        "did you mean 'rows.total'",
    ),
    ("POST", "/connectors", "CREATE STREAM xs", 400, "one CREATE SOURCE/SINK CONNECTOR"),
    ("POST", "/connectors", {"name": "no way", "config": {}}, 400, "must be a word"),
    ("GET", "/connectors?expand=everything", None, 400, "expand takes status and/or info"),
    ("GET", "/nowhere", None, 404, "no such endpoint: /nowhere"),
    ("DELETE", "/connectors", None, 405, "DELETE is not allowed on /connectors; use GET, POST"),
    ("GET", "/connectors/ghost/status", None, 404, "connector 'ghost' not found"),
    ("PUT", "/connectors/ghost/pause", None, 404, "connector 'ghost' not found"),
    ("DELETE", "/connectors/ghost", None, 404, "connector 'ghost' not found"),
    (
        "POST",
        "/connectors",
        f"CREATE SOURCE CONNECTOR b2 FROM datagen INTO s2 WITH ({GEN})",
        409,
        "connector 'b2' already exists",
    ),
    (
        "POST",
        "/sql",
        "SHOW STREAMS;\nCREATE STREAM xs WTIH (a = 1)",
        400,
        "2:18: unexpected 'WTIH'",
    ),
    ("POST", "/sql", "CREATE STREAM s2", 409, "already exists"),
]


def test_bad_requests_are_named_and_change_nothing(server):
    server.ok(
        "POST",
        "/connectors",
        f"CREATE SOURCE CONNECTOR b2 FROM datagen INTO s2 WITH ('rows.total' = 10, run = 'once',"
        f" {GEN})",
        status=201,
    )
    wait_for_state(server, "b2", "FINISHED")
    before = server.ok("GET", "/connectors?expand=info"), server.ok("GET", "/streams")

    for method, path, body, status, named in BAD_REQUESTS:
        got, payload = server.call(method, path, body)
        assert (got, payload["error_code"]) == (status, status), (method, path, body, payload)
        assert named in payload["message"], (method, path, body, payload)
    assert (server.ok("GET", "/connectors?expand=info"), server.ok("GET", "/streams")) == before
    assert server.state("b2") == "FINISHED"


def test_a_refused_request_leaves_the_connection_usable(server):
    """On one keep-alive connection, what follows a refused request is answered as itself: the
    refused request's body is not read as the next request."""
    port = int(server.url.rsplit(":", 1)[1])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        smuggled = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        for method, path, status in [("POST", "/nowhere", 404), ("PUT", "/health", 405)]:
            conn.request(method, path, smuggled)
            response = conn.getresponse()
            assert response.status == status, response.read()
            response.read()
            conn.request("GET", "/connectors")
            response = conn.getresponse()
            assert response.status == 200
            assert isinstance(json.loads(response.read()), list)
        conn.request("GET", "/connectors", headers={"Content-Length": "many"})
        response = conn.getresponse()
        assert response.status == 400, response.read()
        assert "Content-Length" in json.loads(response.read())["message"]
    finally:
        conn.close()
    # a body the server does not read (too large; no length) ends the connection after the answer
    for header, status in [
        (("Content-Length", str(2 << 20)), 413),
        (("Transfer-Encoding", "chunked"), 411),
    ]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.putrequest("POST", "/sql")
            conn.putheader(*header)
            conn.endheaders()
            response = conn.getresponse()
            assert response.status == status, response.read()
            assert response.getheader("Connection") == "close"
            assert json.loads(response.read())["error_code"] == status
        finally:
            conn.close()


def test_kafka_connect_clients_drive_every_endpoint(server):
    """Each endpoint as Kafka Connect's REST API documentation shows it, on a paused source."""
    assert server.ok("GET", "/")["version"]
    config = {
        "connector.class": "datagen",
        "stream": "k7s",
        "rows.total": "10",
        "run": "once",
        "initial.state": "paused",
        "fields": "id BIGINT SEQUENCE",
    }
    # PUT config: create, then an idempotent apply, then a change
    created = server.ok("PUT", "/connectors/k7/config", config, status=201)
    assert created["name"] == "k7" and created["type"] == "source"
    assert server.ok("PUT", "/connectors/k7/config", config)["config"]["rows.total"] == "10"
    changed = server.ok("PUT", "/connectors/k7/config", {**config, "rows.total": "20"})
    assert changed["config"]["rows.total"] == "20"
    patched = server.ok("PATCH", "/connectors/k7/config", {"rows.total": "30"})
    assert patched["config"]["rows.total"] == "30" and patched["config"]["run"] == "once"
    got, refused = server.call("PATCH", "/connectors/k7/config", {"connector.class": "file"})
    assert got == 400 and "drop and re-create" in refused["message"]

    tasks = server.ok("GET", "/connectors/k7/tasks")
    assert [t["id"] for t in tasks] == [{"connector": "k7", "task": 0}]
    assert tasks[0]["config"]["rows.total"] == "30"
    assert server.ok("GET", "/connectors/k7/tasks/0/status")["state"] == "PAUSED"
    assert server.call("GET", "/connectors/k7/tasks/3/status")[0] == 404
    assert server.ok("GET", "/connectors/k7/topics") == {"k7": {"topics": ["k7s"]}}
    assert "no set of active topics" in server.ok("PUT", "/connectors/k7/topics/reset")["message"]
    assert server.ok("PUT", "/connectors/k7/stop", status=202)["connector"]["state"] == "PAUSED"

    offsets = {"offsets": [{"partition": {"connector": "k7"}, "offset": {"seq": 5}}]}
    got, refused = server.call("PATCH", "/connectors/k7/offsets", offsets)
    assert got == 400 and "can only reset" in refused["message"]
    offsets["offsets"][0]["offset"] = None
    assert server.ok("PATCH", "/connectors/k7/offsets", offsets)["message"]

    kept = server.ok("POST", "/connectors/k7/restart?includeTasks=true&onlyFailed=true", status=202)
    assert "has not failed" in kept["message"] and kept["connector"]["state"] == "PAUSED"
    assert server.call("POST", "/connectors/k7/restart?onlyFailed=maybe")[0] == 400
    server.ok("POST", "/connectors/k7/tasks/0/restart", status=202)
    wait_for_state(server, "k7", "FINISHED")

    definitions = server.ok("GET", "/connector-plugins/datagen/config")
    assert {"rows.total", "fields"} <= {d["name"] for d in definitions}
    server.ok("DELETE", "/connectors/k7")


# ------------------------------------------------------------------ 3. the CLI


def test_the_cli_talks_to_the_running_server(server, tmp_path):
    home = server.home
    created = cli(
        home,
        "sql",
        f"CREATE SOURCE CONNECTOR c3 FROM datagen INTO s3 WITH ('rows.per.second' = 50, {GEN})",
    )
    assert created.returncode == 0, created.stderr
    assert server.ok("GET", "/connectors/c3")["config"]["stream"] == "s3"
    wait_for_state(server, "c3", "RUNNING")

    shown = cli(home, "sql", "SHOW CONNECTORS")
    assert shown.returncode == 0 and re.search(r"│ c3 +│ source +│ datagen", shown.stdout)
    status = cli(home, "status")
    assert status.returncode == 0 and re.search(r"│ c3 .*│ RUNNING", status.stdout), status.stdout
    described = cli(home, "status", "c3")
    assert described.returncode == 0 and re.search(
        r"option rows.per.second +│ 50", described.stdout
    )

    # an explicit --server from anywhere: the home it names is not opened
    elsewhere = tmp_path / "elsewhere"
    remote = cli(elsewhere, "--server", server.url, "sql", "SHOW CONNECTORS")
    assert remote.returncode == 0 and "│ c3 " in remote.stdout, remote.stderr
    assert not elsewhere.exists()

    assert cli(home, "pause", "c3").returncode == 0
    assert server.state("c3") == "PAUSED"
    assert cli(home, "resume", "c3").returncode == 0
    wait_for_state(server, "c3", "RUNNING")
    restarted = cli(home, "restart", "c3")
    assert restarted.returncode == 0 and "restarted connector c3" in restarted.stdout
    wait_for_state(server, "c3", "RUNNING")
    dropped = cli(home, "drop", "c3")
    assert dropped.returncode == 0, dropped.stderr
    assert server.call("GET", "/connectors/c3")[0] == 404

    missing = cli(home, "pause", "c3")
    assert missing.returncode == 1 and "c3" in missing.stderr


# ------------------------------------------------------------------ 4. one worker per home


def test_one_worker_per_home_and_run_goes_to_the_server(server, tmp_path):
    second = cli(server.home, "server", "--port", "0")
    assert second.returncode == 1
    said = " ".join(second.stderr.split())
    assert f"another connectql worker (pid {server.pid}, serving {server.url})" in said, said
    assert json.loads((server.home / "server.json").read_text())["pid"] == server.pid
    server.alive()

    script = tmp_path / "script.sql"
    script.write_text(
        "CREATE STREAM from_script;\n"
        "CREATE STREAM from_script_too WITH ('merge.target.bytes' = '1 MB');\n"
    )
    ran = cli(server.home, "run", str(script))
    assert ran.returncode == 0, ran.stderr
    assert "created stream from_script_too" in ran.stdout
    streams = {s["name"]: s for s in server.ok("GET", "/streams")}
    assert {"from_script", "from_script_too"} <= set(streams)
    shown = streams["from_script_too"]  # with the `streams` table's measures
    assert shown["options"]["merge.target.bytes"] == "1 MB"
    assert (shown["records"], shown["files"], shown["bytes"], shown["readers"]) == (0, 0, 0, {})


# ------------------------------------------------------------------ 5. the token


def test_a_token_guards_the_server(tmp_path):
    exposed = cli(tmp_path / "exposed", "server", "--host", "0.0.0.0", "--port", "0")
    assert exposed.returncode == 1
    said = " ".join(exposed.stderr.split())
    assert "0.0.0.0 is not a loopback address" in said and "needs a token" in said, said
    assert not (tmp_path / "exposed/server.json").exists()

    home = tmp_path / "home"
    with running_server(home, tmp_path / "logs", token="xyz") as server:
        assert call(server.url + "/connectors")[0] == 401
        status, refused = call(server.url + "/sql", "POST", "CREATE STREAM sneaky")
        assert status == 401 and "token" in refused["message"]
        assert call(server.url + "/connectors", token="abc")[0] == 401
        assert call(server.url + "/connectors", token="xyz") == (200, [])

        with_token = cli(home, "sql", "CREATE STREAM guarded", CONNECTQL_TOKEN="xyz")
        assert with_token.returncode == 0, with_token.stderr
        token_file = tmp_path / "token"
        token_file.write_text("xyz\n")
        from_file = cli(home, "--token-file", str(token_file), "sql", "SHOW STREAMS")
        assert from_file.returncode == 0 and "│ guarded" in from_file.stdout, from_file.stderr
        for given in (None, "abc"):
            refused = cli(home, "sql", "SHOW STREAMS", CONNECTQL_TOKEN=given)
            assert refused.returncode == 1
            assert "wants a token" in " ".join(refused.stderr.split()), refused.stderr
        assert [s["name"] for s in server.ok("GET", "/streams")] == ["guarded"]

        # SIGTERM: a clean stop, which takes the address away
        assert stop_server(server.proc), "the server did not stop within 60 s of SIGTERM"
        assert server.proc.returncode == 0, describe(server.logs, home, server.tag)
    assert not (home / "server.json").exists()

    # without a server the command runs a worker of its own on the home
    embedded = cli(home, "sql", "SHOW STREAMS")
    assert embedded.returncode == 0 and "│ guarded" in embedded.stdout, embedded.stderr


# ------------------------------------------------------------------ 6. kill -9


def count_ids(path: Path) -> tuple[int, int, int]:
    """(rows, distinct ids, max id + 1) over the committed files of a stream or file sink."""
    got = read_parquet_rows(path, "SELECT count(*), count(DISTINCT id), max(id) + 1 FROM t")
    return tuple(got[0]) if got else (0, 0, 0)


def test_a_server_killed_mid_pipeline_resumes_both_connectors_exactly_once(tmp_path):
    home, logs, sink = tmp_path / "home", tmp_path / "logs", tmp_path / "sink"
    stream = home / "streams/s6"
    with running_server(home, logs, "first") as first:
        first.ok(
            "POST",
            "/sql",
            f"CREATE SOURCE CONNECTOR g6 FROM datagen INTO s6 WITH ('rows.per.second' = 200, {GEN});"
            f" CREATE SINK CONNECTOR f6 TO file FROM s6 WITH (path = '{sink}', format = 'parquet')",
        )

        def both_committed():
            first.alive()
            return count_ids(stream)[0] > 0 and count_ids(sink)[0] > 0

        wait_until(both_committed, timeout=180, what="rows in the stream and the sink")
        os.kill(first.pid, signal.SIGKILL)
        kill_everything(first.proc)
        assert first.proc.returncode == -signal.SIGKILL
    at_kill = count_ids(stream), count_ids(sink)
    assert (home / "server.json").exists()  # left behind: the next server replaces it

    with running_server(home, logs, "second") as second:

        def resumed():
            second.alive()
            return (
                states(second, "g6", "f6") == {"g6": "RUNNING", "f6": "RUNNING"}
                and count_ids(stream)[0] > at_kill[0][0]
                and count_ids(sink)[0] > at_kill[1][0]
            )

        wait_until(resumed, timeout=180, what="both connectors RUNNING and rows past the kill")
        said = " ".join((logs / "second.out").read_text().split())
        assert re.search(r"resumed from checkpoints: (f6, g6|g6, f6)", said), said

        # stop the source; the sink catches up with the stream
        second.ok("PUT", "/connectors/g6/pause", status=202)
        wait_for_state(second, "g6", "PAUSED")
        wait_until(
            lambda: count_ids(sink) == count_ids(stream),
            timeout=120,
            what="the sink caught up with the stream",
        )
        assert second.state("f6") == "RUNNING"
    rows, distinct, ids = count_ids(stream)
    assert rows == distinct == ids > at_kill[0][0]
    assert count_ids(sink) == (rows, rows, rows)


def test_the_server_freezes_what_it_holds_once_its_session_is_up(worker):
    """The objects of a started server leave the garbage collector's full passes (api/serve.py:
    their walk paused every request)."""
    import gc

    from connectql.api.serve import freeze_when_started

    gc.unfreeze()
    try:
        freeze_when_started(worker).join(60)
        assert gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()
