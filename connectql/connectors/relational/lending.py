"""Connections lent in turn to the targets of a sink of several streams (TableSink.together): with a
target per stream, each opening its own connections, 1,000 streams cost thousands of
connections at every start and batch; a Lender keeps the few its threads need."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class Lender:
    """Free connections to one database, by autocommit. A target borrows one for a step
    (Target.session); the owner closes them all after each round of steps. Pickled (to a
    Spark task), it carries none: connections stay in the process that opened them."""

    def __init__(self):
        self._free: dict[bool, list] = {True: [], False: []}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def session(self, target, autocommit: bool) -> Iterator:
        """A connection for one step of `target` (one it opens when none is free); a step
        without autocommit is committed at its end. A step that fails closes its connection."""
        with self._lock:
            free = self._free[autocommit]
            conn = free.pop() if free else None
        if conn is None:
            conn = target.connect(autocommit)
        try:
            yield conn
            if not autocommit:
                conn.commit()
        except BaseException:
            _close(conn)
            raise
        with self._lock:
            self._free[autocommit].append(conn)

    def close(self) -> None:
        with self._lock:
            conns = self._free[True] + self._free[False]
            self._free = {True: [], False: []}
        for conn in conns:
            _close(conn)

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()


def _close(conn) -> None:
    with contextlib.suppress(Exception):  # a broken connection is closed already
        conn.close()
