"""Turning Spark's long exception texts into one line a person can act on."""

from __future__ import annotations

import re

_PY_ERROR = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Exit)): (.+)$", re.MULTILINE)
_JAVA_ERROR = re.compile(
    r"^\s*(?:: |Caused by: )?([\w$]+(?:\.[\w$]+)+(?:Exception|Error)): (.+)$", re.MULTILINE
)
_TRACEBACK = "Traceback (most recent call last):"
_CONDITION = re.compile(r"\[([A-Z_]+(?:\.[A-Z_]+)*)\]")


_SPARK_LINE = re.compile(
    r"^(?:.*?([\w$]+(?:Exception|Error)): )?(\[[A-Z_.]+\] .+?)(?:\s+SQLSTATE.*)?$", re.MULTILINE
)
_CAUSE = re.compile(r"^Caused by: [\w.$]*?([\w$]+(?:Exception|Error)): (.+)$", re.MULTILINE)


def _spark_condition(text: str) -> str | None:
    """`Class: [CONDITION] message` from Spark's error text, with its deepest cause."""
    m = _SPARK_LINE.search(text)
    if not m:
        return None
    line = f"{m.group(1)}: {m.group(2)}" if m.group(1) else m.group(2)
    causes = _CAUSE.findall(text)
    if causes:
        line += f"; caused by {causes[-1][0]}: {causes[-1][1].strip()}"
    return line


def short_error(text: str | None, limit: int = 500) -> str:
    """The most specific line of a Spark/Python error: the last Python exception line when the
    text carries a Python traceback, else the first line with Spark's error condition."""
    if not text:
        return ""
    python = _python_error(text)
    spark = _spark_condition(text)
    if spark:
        if python and spark.endswith(_TRACEBACK):  # Spark's line ends where Python's begins
            spark = f"{spark[: -len(_TRACEBACK)].rstrip()} {python}"
        return spark[:limit]
    if python:
        return python[:limit]
    first = text.strip().splitlines()[0]
    if first.startswith("An error occurred while calling"):  # py4j: the Java exception follows
        m = _JAVA_ERROR.search(text)
        if m:
            return f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2).strip()}"[:limit]
    return first[:limit]


def _python_error(text: str) -> str | None:
    """'Type: message' of the last Python exception in a traceback within `text`."""
    if _TRACEBACK not in text:
        return None
    found = [m for m in _PY_ERROR.finditer(text) if "Traceback" not in m.group(0)]
    found += _exception_lines(text)
    python = [m for m in found if "py4j" not in m.group(1).lower()]
    if not python:
        return None
    m = max(python, key=lambda m: m.start())
    return f"{m.group(1).rsplit('.', 1)[-1]}: {m.group(2).strip()}"


_EXCEPTION_LINE = re.compile(r"^([A-Za-z_][\w.]*): (.+)$", re.MULTILINE)


def _exception_lines(text: str) -> list[re.Match]:
    """The line that ends each Python traceback (`module.Type: message`), whatever the type's
    name: the first unindented line after the indented frames."""
    found = []
    for block in re.finditer(r"Traceback \(most recent call last\):\n((?:[ \t].*\n)+)", text):
        m = _EXCEPTION_LINE.match(text, block.end())
        if m is not None:
            found.append(m)
    return found


def error_class(text: str | None) -> str | None:
    m = _CONDITION.search(text or "")
    return m.group(1) if m else None
