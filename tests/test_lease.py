"""The lease's files in the home: epochs taken once, and catalogs of earlier epochs removed
only when no process holds them."""

import subprocess
import sys

import duckdb

from connectql.worker.lease import prune_catalogs, take_epoch


def test_two_takers_never_share_an_epoch(tmp_path):
    assert [take_epoch(tmp_path) for _ in range(3)] == [1, 2, 3]
    assert sorted(p.name for p in (tmp_path / "epochs").iterdir()) == ["1", "2", "3"]


HOLD = """
import duckdb, sys
c = duckdb.connect(sys.argv[1])
print("open", flush=True)
input()
"""


def test_catalogs_of_earlier_epochs_go_once_no_process_holds_them(tmp_path):
    for name in ("catalog.duckdb", "catalog-e2.duckdb", "catalog-e3.duckdb"):
        duckdb.connect(str(tmp_path / name)).close()
    (tmp_path / "catalog-notes.duckdb").write_text("not ours")
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path / "catalog-e2.duckdb")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "open\n"
        assert prune_catalogs(tmp_path, "catalog-e3.duckdb") == ["catalog.duckdb"]
    finally:
        holder.communicate("\n", timeout=30)
    assert prune_catalogs(tmp_path, "catalog-e3.duckdb") == ["catalog-e2.duckdb"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "catalog-e3.duckdb",
        "catalog-notes.duckdb",
    ]
