"""The FastAPI application without Spark: over a real catalog (a worker's only part these routes
read), its generated OpenAPI document, its docs pages, HEAD, 405 with Allow, the token, and the
request latencies /metrics adds per route; and TLS on uvicorn."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from connectql.api import guard
from connectql.api.app import build
from connectql.api.routes import ROUTES, Routes
from connectql.api.serve import ApiServer, Tls
from connectql.catalog.store import Catalog, ConnectorEntry
from connectql.errors import ConnectQLError


@dataclass
class CatalogOnly:
    home: Path
    catalog: Catalog


@pytest.fixture
def routes(tmp_path):
    catalog = Catalog(tmp_path / "c.duckdb")
    yield Routes(CatalogOnly(tmp_path, catalog), "test")
    catalog.close()


def test_the_openapi_document_is_generated_from_the_routes(routes):
    client = TestClient(build(routes, None))
    spec = client.get("/openapi.json").json()
    served = {(m.upper(), p) for p, ops in spec["paths"].items() for m in ops}
    routed = {(m, p) for m, p, handler in ROUTES if handler != "openapi"}
    assert served == routed | {("GET", "/events")}
    pause = spec["paths"]["/connectors/{name}/pause"]["put"]
    assert pause["operationId"] == "pause" and "202" in pause["responses"]
    assert spec["components"]["schemas"]["ConnectorStatus"]["required"] == [
        "name",
        "connector",
        "tasks",
        "type",
    ]
    for page in ("/docs", "/redoc"):
        got = client.get(page)
        assert got.status_code == 200 and "openapi.json" in got.text


def test_head_405_and_token_answer_as_the_old_server_did(routes):
    client = TestClient(build(routes, "xyz"))
    assert client.get("/connectors").status_code == 401
    assert client.get("/metrics").status_code == 401
    # /health answers without the token, saying only that the worker is up and its role
    anonymous = client.get("/health")
    assert anonymous.status_code == 200
    assert anonymous.json() == {"status": "ok", "role": "active", "epoch": None}
    assert int(anonymous.headers["content-length"]) == len(anonymous.content)
    assert client.head("/health").content == b""
    auth = {"Authorization": "Bearer xyz"}
    assert client.get("/health", headers=auth).json()["home"] == str(routes.worker.home)
    assert client.put("/health").status_code == 401
    head = client.head("/health", headers=auth)
    assert head.status_code == 200 and head.content == b""
    assert int(head.headers["content-length"]) > 0
    refused = client.put("/health", headers=auth)
    assert refused.status_code == 405 and refused.headers["allow"] == "GET"
    assert refused.json() == {
        "error_code": 405,
        "message": "PUT is not allowed on /health; use GET",
    }
    events = client.post("/events", headers=auth)
    assert events.status_code == 405 and events.headers["allow"] == "GET"


def test_metrics_time_each_route(routes):
    client = TestClient(build(routes, None))
    for _ in range(3):
        assert client.get("/health/").status_code == 200
    assert client.get("/connectors/ghost").status_code == 404
    text = client.get("/metrics").text
    assert "connectql_connectors 0.0\n" in text
    count = "connectql_http_request_duration_seconds_count"
    assert f'{count}{{method="GET",route="/health",status="200"}} 3.0\n' in text
    assert f'{count}{{method="GET",route="/connectors/{{name}}",status="404"}} 1.0\n' in text


def test_tls_serves_https_with_the_given_certificate(routes, tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    with pytest.raises(ConnectQLError, match="needs both --tls-cert and --tls-key"):
        Tls.of(str(cert), None)
    with pytest.raises(ConnectQLError, match="cannot use --tls-cert"):
        Tls.of(str(key), str(key))
    with serving_in_thread(routes, Tls.of(str(cert), str(key))) as port:
        url = f"https://127.0.0.1:{port}/health"
        trusted = ssl.create_default_context(cafile=str(cert))
        with urllib.request.urlopen(url, timeout=30, context=trusted) as resp:
            assert json.load(resp)["status"] == "ok"
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            urllib.request.urlopen(url, timeout=30)  # a certificate nobody vouched for
        with pytest.raises((http.client.HTTPException, OSError)):
            urllib.request.urlopen(url.replace("https", "http"), timeout=30).read()


def test_a_body_that_stops_arriving_gets_408_and_the_connection_closed(routes, monkeypatch):
    monkeypatch.setattr(guard, "BODY_TIMEOUT_S", 0.5)
    with serving_in_thread(routes) as port, socket.create_connection(("127.0.0.1", port)) as s:
        s.settimeout(30)
        s.sendall(b'POST /sql HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n{"sql"')
        answer = b""
        while chunk := s.recv(4096):  # the server closes the connection after its answer
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408"), answer
    assert json.loads(body) == {
        "error_code": 408,
        "message": "the body did not arrive within 0.5 s",
    }


def test_events_stream_a_snapshot_then_state_changes_and_progress(routes):
    catalog = routes.worker.catalog
    catalog.add_connector(ConnectorEntry("g", "source", "datagen", "s", {}))
    with serving_in_thread(routes) as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("GET", "/events?interval=oops")
            refused = conn.getresponse()
            assert refused.status == 400 and "interval" in json.loads(refused.read())["message"]
            conn.request("GET", "/events?interval=0.2")
            resp = conn.getresponse()
            assert resp.status == 200
            assert resp.getheader("Content-Type").startswith("text/event-stream")
            event, snapshot = next_event(resp)
            assert event == "snapshot" and [c["name"] for c in snapshot] == ["g"]
            catalog.execute("UPDATE connectors SET state = 'RUNNING', rows_total = 7")
            seen = dict(next_event(resp) for _ in range(2))  # one tick: state, then progress
            assert seen["state"] == {"connector": "g", "from": "CREATED", "to": "RUNNING",
                                     "error": None}  # fmt: skip
            assert seen["progress"]["rows_total"] == 7
            catalog.execute("DELETE FROM connectors")
            assert next_event(resp) == ("state", {"connector": "g", "from": "RUNNING",
                                                  "to": "DELETED", "error": None})  # fmt: skip
        finally:
            conn.close()


def next_event(resp) -> tuple[str, object]:
    """The next Server-Sent Event's name and decoded data."""
    event = data = None
    while True:
        line = resp.fp.readline().decode().rstrip("\n")
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
        elif not line and event:
            return event, data


@contextmanager
def serving_in_thread(routes, tls=None):
    """An ApiServer over `routes` on a free port in a thread while the block runs."""
    httpd = ApiServer(("127.0.0.1", 0), routes, None, tls)
    thread = threading.Thread(target=httpd.serve_forever)
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(30)
