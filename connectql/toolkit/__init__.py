"""The public connector API: subclass Source and/or Sink, declare them in a Connector, and list
that in the entry-point group `connectql.connectors` (README, "Writing a connector").

    from connectql.toolkit import Connector, Option, Sink, Source
"""

from connectql.config import Option
from connectql.errors import PermanentError, SchemaEvolved, TableFailed, ValidationError
from connectql.toolkit.connector import Connector
from connectql.toolkit.envelope import META_COLUMNS, OP, POS, SOURCE, TS_MS
from connectql.toolkit.sink import Rejected, Sink
from connectql.toolkit.source import DeadLetter, Retryable, Source, Table

__all__ = [
    "META_COLUMNS",
    "OP",
    "POS",
    "SOURCE",
    "TS_MS",
    "Connector",
    "DeadLetter",
    "Option",
    "PermanentError",
    "Rejected",
    "Retryable",
    "SchemaEvolved",
    "Sink",
    "Source",
    "Table",
    "TableFailed",
    "ValidationError",
]
