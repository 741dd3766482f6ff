"""The API under concurrent load while connectors move data (a small bench.api run): 8 clients
send 300 requests - lists, statuses, metrics, health, streams, SQL and pause/resume pairs - to a
real `connectql server` process while 2 datagen sources and a file sink run; every request must
get a 2xx and every stream and sink output must hold each generated id exactly once. Timings
are printed by the bench, never asserted here."""

from __future__ import annotations

import pytest

from bench.api import run

pytestmark = pytest.mark.spark

ROWS = 2000


@pytest.mark.scenario
def test_concurrent_requests_fail_none_and_lose_no_record(tmp_path):
    report = run(tmp_path, requests=300, clients=8, connectors=3, rows=ROWS, pairs=2, say=print)
    assert report.moving_s is not None, "not every connector committed rows"
    failed = [s for s in report.samples if not s.ok]
    assert report.failed == 0, f"{report.failed} failed, e.g. {failed[:3]}"
    assert report.lost(ROWS) == [], [(o.connector, o.got) for o in report.outputs]
