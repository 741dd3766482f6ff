"""What a statement returns: a table or a message, ready for printing (by the command's formats)
or JSON."""

from __future__ import annotations

import datetime
import decimal
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Result:
    message: str = ""
    columns: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    title: str = ""
    warning: bool = False  # the message says what did not happen (yet), not a success

    @property
    def is_table(self) -> bool:
        return bool(self.columns)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict: values JSON has no type for (timestamps, decimals, bytes) as text."""
        out: dict[str, Any] = {"message": self.message} if self.message else {}
        if self.is_table:
            out["columns"] = self.columns
            out["rows"] = [[json_value(v) for v in row] for row in self.rows]
        if self.title:
            out["title"] = self.title
        if self.warning:
            out["warning"] = True
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Result:
        return cls(
            d.get("message", ""),
            d.get("columns", []),
            [tuple(r) for r in d.get("rows", [])],
            d.get("title", ""),
            bool(d.get("warning")),
        )


def json_value(v: Any) -> Any:
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, (datetime.date, datetime.time, datetime.datetime)):
        return v.isoformat(sep=" ") if isinstance(v, datetime.datetime) else v.isoformat()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v).hex()
    if isinstance(v, (list, tuple)):
        return [json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): json_value(x) for k, x in v.items()}
    return str(v)
