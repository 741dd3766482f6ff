"""What a statement returns: a table or a message, ready for rich or JSON."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Result:
    message: str = ""
    columns: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    title: str = ""

    @property
    def is_table(self) -> bool:
        return bool(self.columns)
