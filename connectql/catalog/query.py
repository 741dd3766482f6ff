"""User SELECTs: only the public catalog tables and streams (by name) may be read; a stream
name is replaced by its committed Parquet files; the query runs in DuckDB."""

from __future__ import annotations

import duckdb
import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from connectql.catalog.schema import PUBLIC_TABLES
from connectql.catalog.store import Catalog
from connectql.catalog.streams import committed_files, empty_relation
from connectql.errors import ValidationError


def _stream_source(catalog: Catalog, name: str) -> exp.Expression:
    s = catalog.get_stream(name)
    files = committed_files(s.path)
    if not files:
        sql = empty_relation(s.schema_json)
    else:
        listed = ", ".join("'" + f.replace("'", "''") + "'" for f in files)
        sql = f"SELECT * FROM read_parquet([{listed}], union_by_name = true)"
    return exp.paren(sqlglot.parse_one(sql, read="duckdb"), copy=False)


def rewrite(catalog: Catalog, sql: str) -> str:
    """The SELECT with stream names replaced by their committed files; an error names any
    table that is neither a catalog table nor a stream."""
    try:
        tree = sqlglot.parse_one(sql, read="duckdb")
    except SqlglotError as e:
        raise ValidationError(f"SELECT does not parse: {e}") from None
    ctes = {c.alias_or_name for c in tree.find_all(exp.CTE)}
    streams = {s.name for s in catalog.streams()}
    for table in list(tree.find_all(exp.Table)):
        name = table.name
        if not isinstance(table.this, exp.Identifier) or table.args.get("db"):
            raise ValidationError(
                f"SELECT may read only the catalog tables ({', '.join(PUBLIC_TABLES)})"
                f" and streams by name, not {table.sql(dialect='duckdb')}"
            )
        if name in ctes or name in PUBLIC_TABLES:
            continue
        if name not in streams:
            known = ", ".join([*PUBLIC_TABLES, *sorted(streams)])
            raise ValidationError(f"SELECT: unknown table or stream '{name}' (known: {known})")
        sub = exp.Subquery(
            this=_stream_source(catalog, name).unnest(),
            alias=exp.TableAlias(this=exp.to_identifier(table.alias_or_name)),
        )
        table.replace(sub)
    return tree.sql(dialect="duckdb")


# what DuckDB raises for a query that is wrong (not for a fault of the server)
USER_ERRORS = (duckdb.ProgrammingError, duckdb.DataError, duckdb.NotSupportedError)


def run_select(catalog: Catalog, sql: str) -> tuple[list[str], list[tuple]]:
    try:
        return catalog.read(rewrite(catalog, sql), memo=False)
    except USER_ERRORS as e:
        raise ValidationError(f"SELECT failed: {e}") from None
