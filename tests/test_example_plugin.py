"""The example plugin package (examples/plugins/sqlite), installed into this environment and run
end to end by `connectql run`: found through its entry point, no change to connectql."""

from __future__ import annotations

import importlib.metadata
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from tests.helpers import read_parquet_rows
from tests.test_cli import connectql

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "examples/plugins/sqlite"


@pytest.fixture(scope="module")
def installed():
    """The package installed (.ci/run installs it; a local run installs it here once)."""
    try:
        importlib.metadata.distribution("connectql-sqlite")
    except importlib.metadata.PackageNotFoundError:
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e", str(PLUGIN)]
        subprocess.run(pip, check=True, capture_output=True, timeout=300)


SCRIPT = """
CREATE SOURCE CONNECTOR items_in FROM sqlite INTO items
  WITH (path = '{shop}', table = 'items', 'incrementing.column' = 'id', run = 'once',
        'batch.max.records' = 40, 'errors.tolerance' = 'all',
        'errors.deadletter.stream' = 'items_bad');
CREATE SINK CONNECTOR items_out TO sqlite FROM items
  WITH (path = '{copy}', table = 'items', key = 'id', run = 'once');
SHOW CONNECTOR PLUGINS;
SELECT count(*) AS bad FROM items_bad;
"""


@pytest.mark.spark
def test_the_sqlite_plugin_copies_a_table_through_connectql_run(installed, tmp_path):
    shop, copy = tmp_path / "shop.db", tmp_path / "copy.db"
    with closing(sqlite3.connect(shop)) as con, con:
        con.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL)")
        con.executemany(
            "INSERT INTO items VALUES (?, ?, ?)", [(i, f"item {i}", i / 4) for i in range(1, 101)]
        )
        con.execute("INSERT INTO items VALUES (101, 'broken', 'n/a')")
    script = tmp_path / "copy.sql"
    script.write_text(SCRIPT.format(shop=shop, copy=copy))
    r = connectql("run", str(script), home=tmp_path / "h", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "connectql-sqlite 0.1.0" in r.stdout
    with closing(sqlite3.connect(copy)) as con:
        rows = con.execute("SELECT count(*), min(id), max(id), sum(price) FROM items").fetchone()
        progress = con.execute("SELECT count(*) FROM connectql_sink_progress").fetchone()
    assert rows == (100, 1, 100, sum(i / 4 for i in range(1, 101)))
    assert progress == (1,)
    dead = read_parquet_rows(
        tmp_path / "h/streams/items_bad", "SELECT source_offset, raw_record FROM t"
    )
    assert dead == [('{"after": 101}', '{"id": 101, "name": "broken", "price": "n/a"}')]
