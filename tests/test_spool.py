"""The toolkit's spool: positions count every record ever appended, a read gives exactly the
records of (start, end], committed segments go and the end survives them."""

from __future__ import annotations

from connectql.toolkit.spool import Spool


def test_positions_reads_and_drops(tmp_path):
    spool = Spool(tmp_path / "spool")
    assert spool.end() == 0 and list(spool.read(0, 10)) == []
    assert spool.append([b"a", b"bb"]) == 2
    assert spool.append([]) == 2  # nothing: no segment
    assert spool.append([b"c", b"", b"e" * 70_000]) == 5
    assert list(spool.read(0, 5)) == [b"a", b"bb", b"c", b"", b"e" * 70_000]
    assert list(spool.read(1, 3)) == [b"bb", b"c"]  # across segments
    spool.drop_through(3)  # the first segment (0, 1) is committed, the second (2..4) is not
    assert len(list(spool.folder.glob("*.seg"))) == 1
    assert list(spool.read(2, 5))[0] == b"c"
    spool.drop_through(5)  # every segment committed: none left, the end is kept
    assert list(spool.folder.glob("*.seg")) == [] and spool.end() == 5
    assert spool.append([b"f"]) == 6 and list(spool.read(5, 6)) == [b"f"]
    assert Spool(tmp_path / "spool").end() == 6  # as another process sees it
