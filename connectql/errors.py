"""The error types every layer raises; each message names what is wrong and where."""

import json
import re


class ConnectQLError(Exception):
    """Base of every error a user should see as a one-line message (no traceback)."""


class ParseError(ConnectQLError):
    """SQL text that does not follow the grammar; carries line, column and what was expected."""

    def __init__(self, message: str, line: int = 0, column: int = 0, source: str = ""):
        self.line, self.column, self.source = line, column, source
        where = f"{source}:" if source else ""
        super().__init__(f"{where}{line}:{column}: {message}" if line else message)


class ValidationError(ConnectQLError):
    """A statement that parses but asks for something invalid (unknown option, wrong type)."""


class PlanError(ConnectQLError):
    """A connector that cannot be planned (type not installed, schema conflict, bad transform)."""


class TableMissing(PlanError):
    """A source's table does not exist (not created yet, or dropped)."""


class CatalogError(ConnectQLError):
    """A catalog object that is missing or already there."""


class StateError(ConnectQLError):
    """An illegal lifecycle transition for the connector's current state."""


class PermanentError(ConnectQLError):
    """A connector failure that a restart cannot fix (the connector goes straight to FAILED)."""


class SchemaChanged(PermanentError):
    """The captured table's columns changed upstream and schema.change says to stop."""


class ChangeLogGone(PermanentError):
    """The change log an offset points into is gone from the server (e.g. a purged binlog)."""


class RowsRefused(ConnectQLError):
    """The target refused rows of a batch (a constraint, a value its column refuses) with
    errors.tolerance = 'none': restarts retry them (the target may be mended meanwhile); in a
    sink of several streams that stream stops alone (TableFailed) and the others go on."""


class TableFailed(ConnectQLError):
    """One table of a several-table source met a value it cannot read, with errors.tolerance =
    'none': that table stops (its later rows and changes are not read), the others go on."""

    def __init__(self, table: str, message: str):
        self.table = table
        super().__init__(f"[{json.dumps(table)}] {message}")


class SchemaEvolved(ConnectQLError):
    """The captured table gained columns and schema.change = 'evolve': widen the stream."""


def cause(text: str | None, *classes: type) -> str | None:
    """'Name: message' of an error of one of `classes` (or their subclasses) found in a
    failure's text (a Spark error carries the Python traceback of the reader that raised it)."""
    found = {c for k in classes for c in (k, *k.__subclasses__())}
    names = "|".join(sorted(c.__name__ for c in found))
    m = re.search(rf"\b({names}): (.+)", text or "")
    return f"{m.group(1)}: {m.group(2).strip()}" if m else None


def permanent_cause(text: str | None) -> str | None:
    return cause(text, PermanentError)


def table_failed(text: str | None) -> tuple[str, str] | None:
    """(table, message) of a TableFailed found in a failure's text."""
    m = re.search(r'\bTableFailed: \[("(?:[^"\\]|\\.)*")\] (.+)', text or "")
    return (json.loads(m.group(1)), m.group(2).strip()) if m else None
