"""What the HTTP API and the command line use of a worker: the one interface between them and
the process core (a Protocol: connectql.worker.worker.Worker provides it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from connectql.catalog.store import Catalog, StreamEntry
from connectql.grammar import ast
from connectql.worker.results import Result


class WorkerApi(Protocol):
    home: Path
    catalog: Catalog  # read: statuses, connectors, streams, events (changes go through statements)

    def execute(self, stmt: ast.Statement) -> Result:
        """Run one statement (the caller takes turns: one at a time)."""

    def run_statements(
        self, stmts: list[ast.Statement], source: str = ""
    ) -> Iterator[tuple[ast.Statement, Result]]:
        """Run parsed statements in order, yielding each result; stops at the first failure."""

    def run_script(self, text: str, source: str = "") -> Iterator[tuple[ast.Statement, Result]]:
        """Parse a whole script (a syntax error runs nothing), then run_statements."""

    def measure_stream(self, stream: StreamEntry) -> dict:
        """A stream's size and its sinks' progress now."""
