"""How the `connectql` command prints results: `--format table|json|csv|vertical`.

- table: rich tables on a terminal, fitted to its width: a result too wide for it is shown one
  field per line (as vertical) with a note. Without a terminal, the table is as wide as its
  longest values: nothing wraps or is cut.
- json: one JSON document per statement, one per line: a table as an array of objects (column:
  value; timestamps, decimals and bytes as text, NULL as null), a message as {"message": ...}.
- csv: a header line and the rows (RFC 4180 quoting, NULL as an empty field); a blank line
  between two tables; messages go to standard error.
- vertical: psql's expanded display (\\x): each row as `-[ RECORD n ]-` and one `column | value`
  line per field.
"""

from __future__ import annotations

import csv
import io
import json

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from connectql.worker.results import Result, json_value

FORMATS = ("table", "json", "csv", "vertical")


class Printer:
    """Prints results in one format on `console` (notes and CSV's messages on `err`)."""

    def __init__(self, fmt: str, console: Console, err: Console):
        self.fmt, self.console, self.err = fmt, console, err
        self.tables = 0

    def __call__(self, result: Result) -> None:
        if not result.is_table:
            self._message(result)
        elif self.fmt == "json":
            self._line(json.dumps([_record(result, row) for row in result.rows]))
        elif self.fmt == "csv":
            self._csv(result)
        elif self.fmt == "vertical":
            self._line(vertical(result))
        else:
            self._table(result)
        self.tables += result.is_table

    def _message(self, result: Result) -> None:
        if self.fmt == "json":
            out = {"message": result.message, **({"warning": True} if result.warning else {})}
            self._line(json.dumps(out))
        elif self.fmt == "csv":
            self.err.print(result.message, highlight=False, soft_wrap=True)
        elif result.message:  # a pipe gets whole lines; a terminal wraps them
            mark = "[yellow]![/yellow]" if result.warning else "[green]✓[/green]"
            wrap = {"soft_wrap": not self.console.is_terminal}
            text = f"{mark} {escape(result.message)}"
            self.console.print(text, highlight=not result.warning, **wrap)

    def _line(self, text: str) -> None:
        self.console.file.write(text + "\n")
        self.console.file.flush()

    def _csv(self, result: Result) -> None:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(result.columns)
        writer.writerows([_text(v) for v in row] for row in result.rows)
        self._line(("\n" if self.tables else "") + buf.getvalue().rstrip("\n"))

    def _table(self, result: Result) -> None:
        table = rich_table(result)
        unbounded = self.console.options.update_width(1 << 20)
        needed = self.console.measure(table, options=unbounded).maximum
        if not self.console.is_terminal:  # a pipe or a file: full values, nothing wrapped
            Console(file=self.console.file, width=max(needed, 80), no_color=True).print(table)
        elif needed > self.console.width and result.rows:
            self.err.print(
                f"[dim]({len(result.columns)} columns are wider than the terminal: one field"
                " per line; --format json or csv for scripts)[/dim]"
            )
            self._line(vertical(result))
        else:
            self.console.print(table)


def rich_table(result: Result) -> Table:
    table = Table(title=result.title or None, title_justify="left", show_lines=False)
    for col in result.columns:
        table.add_column(col, overflow="fold")
    for row in result.rows:
        table.add_row(*(Text(_text(v)) for v in row))
    return table


def vertical(result: Result) -> str:
    """psql's expanded display: one `column | value` line per field, rows numbered."""
    width = max((len(c) for c in result.columns), default=0)
    lines = [result.title] if result.title else []
    for n, row in enumerate(result.rows, 1):
        lines.append(f"-[ RECORD {n} ]" + "-" * max(width - 8, 4))
        lines += [
            f"{c.ljust(width)} | {_text(v)}" for c, v in zip(result.columns, row, strict=True)
        ]
    return "\n".join(lines) if result.rows else "(0 rows)"


def _record(result: Result, row: tuple) -> dict:
    return {c: json_value(v) for c, v in zip(result.columns, row, strict=True)}


def _text(v) -> str:
    if v is None:
        return ""
    value = json_value(v)
    return value if isinstance(value, str) else json.dumps(value)
