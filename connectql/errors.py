"""The error types every layer raises; each message names what is wrong and where."""


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


class CatalogError(ConnectQLError):
    """A catalog object that is missing or already there."""


class StateError(ConnectQLError):
    """An illegal lifecycle transition for the connector's current state."""
