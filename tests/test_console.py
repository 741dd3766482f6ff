"""The web console at /ui in a real browser: Debian's chromium driven by Playwright, against a
`connectql server` with a datagen -> stream -> file sink pipeline (what the page shows is checked
against the API), and against an in-thread server with a token (the login). Screenshots go to
each test's tmp dir."""

from __future__ import annotations

import shutil
import threading
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import expect, sync_playwright

from connectql.api.routes import Routes
from connectql.api.serve import ApiServer
from connectql.catalog.store import Catalog
from tests.helpers import wait_until
from tests.test_api_app import CatalogOnly
from tests.test_server import rows_total, running_server

CHROMIUM = next(
    (p for p in ("/usr/lib/chromium/chromium", shutil.which("chromium")) if p and Path(p).exists()),
    None,
)
WAIT_MS = 60_000  # a loaded machine's Spark is slow to answer a click
expect.set_options(timeout=WAIT_MS)
GEN = "fields = 'id BIGINT SEQUENCE, v DOUBLE RANDOM(0, 1)'"


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: apt-get install chromium (.ci/run does)")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(WAIT_MS)
    said = []  # the page's console errors and exceptions, shown when a test fails
    page.on("console", lambda m: m.type == "error" and said.append(m.text))
    page.on("pageerror", lambda e: said.append(f"uncaught: {e}"))
    yield page
    if said:
        print("the page said:", *said, sep="\n  ")
    context.close()


@contextmanager
def guarded_server(tmp_path: Path, token: str):
    """An API server with `token` over an empty catalog, on a free port, in a thread."""
    catalog = Catalog(tmp_path / "c.duckdb")
    httpd = ApiServer(("127.0.0.1", 0), Routes(CatalogOnly(tmp_path, catalog), "t"), token)
    thread = threading.Thread(target=httpd.serve_forever)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(30)
        catalog.close()


def get(url: str, accept: str):
    """(status, final URL, content type) of a GET that follows redirects."""
    req = urllib.request.Request(url, headers={"Accept": accept})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.url, resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.url, e.headers.get("Content-Type", "")


def snap(page, path: Path) -> None:
    """A screenshot of the whole page, written here (Playwright's own writing leaves a thread)."""
    path.write_bytes(page.screenshot(full_page=True))


def test_the_console_logs_in_with_the_servers_token(page, tmp_path):
    token = "t0ken-for-the-console"
    with guarded_server(tmp_path, token) as url:
        # a browser's GET / goes to the console; an API client still gets the token's 401 JSON
        assert get(url + "/", "text/html,application/xhtml+xml")[1] == url + "/ui/"
        assert get(url + "/", "application/json")[0:3:2] == (401, "application/json")
        status, _, kind = get(url + "/ui/console.js", "*/*")
        assert status == 200 and "javascript" in kind

        page.goto(url + "/")
        assert page.url == url + "/ui/"
        login = page.locator("#login")
        login.wait_for(state="visible")
        page.fill("#login-token", "wrong")
        page.click("#login-submit")
        expect(page.locator("#login-error")).to_contain_text("refused")
        snap(page, tmp_path / "login.png")
        page.fill("#login-token", token)
        page.click("#login-submit")
        login.wait_for(state="hidden")
        page.locator("#no-connectors").wait_for(state="visible")
        page.locator("#live.on").wait_for()  # the event feed is read with the token too
        assert page.evaluate("sessionStorage.getItem('connectql.token')") == token
        assert token not in page.url

        page.click("#logout")
        login.wait_for(state="visible")
        assert page.evaluate("sessionStorage.getItem('connectql.token')") is None


@pytest.mark.spark
def test_the_console_shows_and_steers_a_pipeline(page, tmp_path):
    out = tmp_path / "out"
    with running_server(tmp_path / "home", tmp_path / "logs") as server:
        page.goto(server.url + "/ui/")  # open before the pipeline exists: it arrives live
        page.locator("#live.on").wait_for()
        server.ok(
            "POST",
            "/connectors",
            f"CREATE SOURCE CONNECTOR gen FROM datagen INTO nums WITH ('rows.per.second' = 50, {GEN})",
            status=201,
        )
        server.ok(
            "POST",
            "/connectors",
            f"CREATE SINK CONNECTOR out TO file FROM nums WITH (path = '{out}', format = 'json')",
            status=201,
        )
        try:
            shows(page, server, tmp_path)
            steers(page, server, tmp_path)
            details(page, server, tmp_path)
            runs_sql(page, server, tmp_path)
        except Exception:
            snap(page, tmp_path / "failed.png")
            raise


def shown_number(cell) -> float:
    """A count as the page prints it (1234, 12.3k, 1.2M; – for none)."""
    text = cell.inner_text().strip()
    scale = {"k": 1e3, "M": 1e6}.get(text[-1:], 1)
    try:
        return float(text.rstrip("kM")) * scale
    except ValueError:
        return -1


def badge(page, name: str):
    return page.locator(f'#connectors tr[data-name="{name}"] [data-cell="state"]')


def shows(page, server, tmp_path):
    """Every connector with the state, counts and graph the API has, as they change."""
    for name in ("gen", "out"):
        expect(badge(page, name)).to_have_text("RUNNING", timeout=180_000)
    listed = server.ok("GET", "/connectors?expand=status")
    assert {n: s["status"]["connector"]["state"] for n, s in listed.items()} == {
        "gen": "RUNNING",
        "out": "RUNNING",
    }
    for node in ("source:gen", "stream:nums", "sink:out"):
        page.locator(f'svg.graph [data-node="{node}"]').wait_for()
    assert page.locator("svg.graph path.edge").count() == 2
    # the rows read the API counts reach the page, without a reload
    counted = wait_until(lambda: rows_total(server, "gen"), timeout=180, what="gen's rows")
    read = page.locator('tr[data-name="gen"] [data-cell="read"]')
    wait_until(lambda: shown_number(read) >= counted, timeout=60, what="gen's rows on the page")
    page.locator('tr[data-name="gen"] svg.spark.rate polyline').wait_for()
    snap(page, tmp_path / "overview.png")


def steers(page, server, tmp_path):
    """Pause and resume from the page, seen on the page and in the API; refused actions show the
    server's error; drop and reset offsets ask first."""
    row = page.locator('tr[data-name="gen"]')
    # only what the state allows is offered: a running connector pauses, a paused one resumes
    for action in ("resume", "reset"):
        expect(row.locator(f'[data-action="{action}"]')).to_be_hidden()
    row.locator('[data-action="pause"]').click()
    expect(badge(page, "gen")).to_have_text("PAUSED")
    assert server.state("gen") == "PAUSED"
    expect(row.locator('[data-action="pause"]')).to_be_hidden()
    expect(row.locator('[data-action="reset"]')).to_be_visible()
    row.locator('[data-action="resume"]').click()
    wait_until(lambda: server.state("gen") == "RUNNING", timeout=120, what="gen RUNNING")
    expect(badge(page, "gen")).to_have_text("RUNNING")
    expect(row.locator('[data-action="resume"]')).to_be_hidden()

    # reset offsets of a running connector (a page that has not seen its state change yet):
    # confirmed, then refused with the server's words
    page.evaluate("() => { act('reset', 'gen'); }")  # not awaited: it waits for the dialog
    page.locator("#confirm").wait_for(state="visible")
    assert "Reset the offsets of gen" in page.inner_text("#confirm-text")
    page.click("#confirm-ok")
    notice = page.locator("#notice.error")
    notice.wait_for()
    refused = server.call("DELETE", "/connectors/gen/offsets")
    assert refused[0] == 409
    assert refused[1]["message"] in notice.inner_text()
    snap(page, tmp_path / "refused.png")

    # drop, cancelled: nothing changes
    page.locator('tr[data-name="out"] [data-action="drop"]').click()
    page.click("#confirm-cancel")
    assert server.state("out") == "RUNNING"

    # create from a statement: a bad one shows the server's error, a good one appears
    bad = "CREATE SOURCE CONNECTOR gen2 FROM datagen INTO nums WITH ("
    page.fill("#create-sql", bad)
    page.click("#create")
    refused = server.call("POST", "/connectors", bad)
    assert refused[0] == 400
    expect(page.locator("#create-error")).to_have_text(refused[1]["message"])
    page.fill(
        "#create-sql",
        f"CREATE SOURCE CONNECTOR later FROM datagen INTO more WITH ('initial.state' = 'paused', {GEN})",
    )
    page.click("#create")
    expect(badge(page, "later")).to_have_text("PAUSED")
    page.locator('svg.graph [data-node="stream:more"]').wait_for()
    assert server.state("later") == "PAUSED"

    # drop, confirmed: gone from the page and from the server
    page.locator('tr[data-name="later"] [data-action="drop"]').click()
    page.click("#confirm-ok")
    page.locator('tr[data-name="later"]').wait_for(state="detached")
    assert "later" not in server.ok("GET", "/connectors")


def details(page, server, tmp_path):
    """A connector's page (options, offsets, events, history) and a stream's (schema, sample)."""
    page.goto(server.url + "/ui/#/connector/gen")
    page.locator("#detail-options td", has_text="rows.per.second").wait_for()
    assert page.locator("#detail-state").inner_text() == server.state("gen")
    page.locator("#detail-events td", has_text="PAUSED").first.wait_for()
    page.locator("#detail-history svg.chart polyline").wait_for()
    offset = server.ok("GET", "/connectors/gen/offsets")["offsets"][0]["offset"]
    assert '"seq"' in page.inner_text("#detail-offsets") and offset["seq"] > 0
    snap(page, tmp_path / "connector.png")

    # a sink's page at 1,400 px: its lag charted with axes over the last minutes, and the
    # events table (long reasons and errors) wrapped inside its card, nothing cut off
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(server.url + "/ui/#/connector/out")
    page.locator("#detail-lag svg.chart polyline").wait_for()
    assert page.locator("#detail-lag svg.chart line.axis").count() == 2
    assert page.locator("#detail-lag svg.chart text").count() >= 3  # top, 0, first time
    page.locator("#detail-events td").first.wait_for()
    table = page.locator("#detail-events table").bounding_box()
    card = page.locator("#detail-events").bounding_box()
    assert table["x"] + table["width"] <= card["x"] + card["width"] + 1, (table, card)
    assert page.evaluate("document.documentElement.scrollWidth") <= 1400
    snap(page, tmp_path / "sink.png")
    page.set_viewport_size({"width": 1280, "height": 900})

    page.goto(server.url + "/ui/#/streams/nums")
    page.locator("table.grid td", has_text="BIGINT").first.wait_for()
    sample = page.locator("#stream-sample table")
    sample.wait_for()
    columns = [c.strip() for c in sample.locator("th").all_inner_texts()]
    assert columns[:2] == ["id", "v"]
    assert sample.locator("tbody tr").count() > 0
    snap(page, tmp_path / "stream.png")


def runs_sql(page, server, tmp_path):
    """The SQL box: results as a table, a refused statement's error as the server words it."""
    page.goto(server.url + "/ui/#/sql")
    page.fill("#sql-text", "SELECT name, state FROM connectors ORDER BY name")
    page.click("#sql-run")
    result = page.locator("#sql-results table")
    result.wait_for()
    shown = [r.split("\t") for r in result.locator("tbody tr").all_inner_texts()]
    assert [tuple(r) for r in shown] == [("gen", server.state("gen")), ("out", server.state("out"))]

    page.fill("#sql-text", "PAUSE CONNECTOR nosuch")
    page.click("#sql-run")
    page.locator("#sql-error").wait_for()
    refused = server.call("POST", "/sql", "PAUSE CONNECTOR nosuch")
    assert refused[0] == 400 and page.inner_text("#sql-error") == refused[1]["message"]
    snap(page, tmp_path / "sql.png")


def test_the_consoles_actions_are_allowed_in_the_states_the_worker_allows():
    """console.js offers each action only in the states catalog/states.py allows it in."""
    import json
    import re

    from connectql.catalog import states

    text = (Path(__file__).parents[1] / "connectql/api/console/console.js").read_text()
    block = re.search(r"const ALLOWED = \{(.*?)\};", text, re.S).group(1)
    found = {k: json.loads(v) for k, v in re.findall(r"(\w+): (null|\[[^\]]*\])", block)}
    assert found == {
        "pause": sorted(states.ACTIONS["pause"]),
        "resume": sorted(states.ACTIONS["resume"]),
        "restart": None if states.ACTIONS["restart"] == frozenset(states.STATES) else [],
        "reset": sorted(states.ACTIONS["reset_offsets"]),
        "drop": None,
    }
