"""A sink's `AS SELECT ... FROM stream [WHERE ...]`, checked against the stream's columns and
compiled to Spark SQL expressions (projections and a filter)."""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot
from sqlglot import exp
from sqlglot.errors import OptimizeError, SqlglotError
from sqlglot.optimizer.qualify import qualify

from connectql.errors import PlanError

_UNSUPPORTED = {
    "joins": "JOIN",
    "group": "GROUP BY",
    "having": "HAVING",
    "order": "ORDER BY",
    "limit": "LIMIT",
    "offset": "OFFSET",
    "windows": "WINDOW",
    "distinct": "DISTINCT",
    "with": "WITH",
    "qualify": "QUALIFY",
}


@dataclass(frozen=True)
class Transform:
    projections: tuple[str, ...]  # Spark SQL expressions for DataFrame.selectExpr
    where: str | None  # Spark SQL condition for DataFrame.where
    sql: str  # the SELECT as the user wrote it


def compile_select(sql: str, stream: str, columns: list[str]) -> Transform:
    """Check the SELECT reads only `stream` and known columns; return Spark expressions."""
    try:
        tree = sqlglot.parse_one(sql, read="spark")
    except SqlglotError as e:
        raise PlanError(f"AS SELECT does not parse: {e}") from None
    if not isinstance(tree, exp.Select):
        raise PlanError("AS SELECT must be a single SELECT ... FROM stream [WHERE ...]")
    for arg, clause in _UNSUPPORTED.items():
        if tree.args.get(arg):
            raise PlanError(
                f"AS SELECT supports projections and WHERE only; {clause} is not"
                " supported in a sink transform"
            )
    tables = [t.name for t in tree.find_all(exp.Table)]
    if tables != [stream]:
        raise PlanError(f"AS SELECT must read from stream '{stream}' only, not {', '.join(tables)}")
    _check_columns(tree, stream, columns)
    projections = tuple(p.sql(dialect="spark") for p in tree.expressions)
    where = tree.args.get("where")
    return Transform(projections, where.this.sql(dialect="spark") if where else None, sql)


def _check_columns(tree: exp.Select, stream: str, columns: list[str]) -> None:
    known = {c.lower() for c in columns}
    for col in tree.find_all(exp.Column):
        if col.name.lower() not in known:
            raise PlanError(
                f"AS SELECT: unknown column '{col.name}' in stream '{stream}'"
                f" (columns: {', '.join(columns)})"
            )
    try:  # also catches ambiguous or otherwise invalid references
        qualify(
            tree.copy(),
            schema={stream: {c: "STRING" for c in columns}},
            validate_qualify_columns=True,
            dialect="spark",
        )
    except OptimizeError as e:
        raise PlanError(f"AS SELECT: {e}") from None
