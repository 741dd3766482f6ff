"""What a PostgreSQL source reads: the captured table's columns with their Spark types and its
primary key, looked up at CREATE (unsupported types and missing tables are named there)."""

from __future__ import annotations

from connectql.connectors.multitable import matching
from connectql.connectors.postgres.cdc import keyless_refused, unidentified
from connectql.connectors.postgres.client import connect
from connectql.connectors.postgres.types import spark_type
from connectql.connectors.relational import declared
from connectql.connectors.relational.source import count_sql
from connectql.connectors.relational.tablereader import Table
from connectql.errors import PlanError, TableMissing


def describe_table(conn, schema: str, name: str, where: str) -> Table:
    rows = conn.execute(
        # a domain is read as its base type; an enum (or an array of one) gives its type's oid
        "SELECT a.attname, format_type(t.oid, CASE WHEN d.oid IS NULL THEN a.atttypmod"
        " ELSE d.typtypmod END), CASE WHEN t.typtype = 'e' THEN t.oid"
        " WHEN e.typtype = 'e' THEN e.oid END"
        " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " LEFT JOIN pg_type d ON d.oid = a.atttypid AND d.typtype = 'd'"
        " JOIN pg_type t ON t.oid = coalesce(d.typbasetype, a.atttypid)"
        " LEFT JOIN pg_type e ON e.oid = t.typelem"
        " WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped"
        " ORDER BY a.attnum",
        (schema, name),
    ).fetchall()
    if not rows:
        raise TableMissing(f"{where}: table {schema}.{name} does not exist{_similar(conn, schema)}")
    columns, notes = [], []
    for col, pg, enum in rows:
        st = spark_type(pg, enum is not None)
        if st is None:
            raise PlanError(
                f"{where}: column {col} of {schema}.{name} has type {pg}, which connectql"
                " cannot read"
            )
        columns.append((col, pg, st))
        notes.append(_declared(conn, pg, enum))
    key = _primary_key(conn, schema, name)
    return Table(schema, name, tuple(columns), key, (("__unchanged", "STRING"),), tuple(notes))


def _declared(conn, pg: str, enum: int | None) -> str:
    """The column's declared type as a DDL comment; an enum's as its bare name and labels (a
    target creates it in its own schema)."""
    if enum is None:
        return declared.comment("postgres", pg)
    name, labels = conn.execute(
        "SELECT t.typname, array_agg(e.enumlabel::text ORDER BY e.enumsortorder)"
        " FROM pg_type t JOIN pg_enum e ON e.enumtypid = t.oid WHERE t.oid = %s GROUP BY 1",
        (enum,),
    ).fetchone()
    array = "[]" if pg.endswith("[]") else ""
    return declared.comment("postgres", '"' + name.replace('"', '""') + '"' + array, tuple(labels))


def _primary_key(conn, schema: str, name: str) -> tuple[str, ...]:
    rows = conn.execute(
        "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid"
        " AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary"
        " ORDER BY array_position(i.indkey, a.attnum)",
        (f'"{schema}"."{name}"',),
    ).fetchall()
    return tuple(r[0] for r in rows)


def _similar(conn, schema: str) -> str:
    rows = conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
        " ORDER BY 1 LIMIT 10",
        (schema,),
    ).fetchall()
    names = [r[0] for r in rows]
    return (
        f" (tables in {schema}: {', '.join(names)})"
        if names
        else f" (schema {schema} has no tables)"
    )


def check_logical_decoding(conn, user: str | None, where: str) -> None:
    """Change-data capture needs wal_level = logical and a role allowed to replicate."""
    level = conn.execute("SHOW wal_level").fetchone()[0]
    if level != "logical":
        raise PlanError(
            f"{where}: mode = 'cdc' needs wal_level = logical on the server, but it is {level}"
            " (set it in postgresql.conf and restart, or use mode = 'incremental')"
        )
    allowed = conn.execute(
        "SELECT rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user"
    ).fetchone()[0]
    if not allowed:
        raise PlanError(
            f"{where}: role '{user or 'current user'}' may not replicate: it needs the"
            " REPLICATION attribute (ALTER ROLE ... REPLICATION) for mode = 'cdc'"
        )


def discover(cfg, cdc: bool, where: str) -> list[Table]:
    """At CREATE: the columns and key of each table the source reads, checking what
    change-data capture needs."""
    with connect(cfg.connection, autocommit=True) as conn:
        if cdc:
            check_logical_decoding(conn, cfg.connection.get("user"), where)
        found = tables_of(conn, cfg, where)
        if cdc and cfg.keyless != "inserts" and not cfg.query:
            without = unidentified(conn, cfg.schema, [cfg.for_table(t).table for t in found])
            if without:
                raise PlanError(keyless_refused(where, cfg.schema, without))
        return [describe_source(conn, cfg.for_table(t)) for t in found]


def tables_of(conn, cfg, where: str) -> list[str | None]:
    """The tables a source reads: its one table (None: its query), or those its patterns
    match."""
    if not cfg.patterns:
        return [cfg.table]
    names = conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = %s"
        " AND table_type = 'BASE TABLE'",
        (cfg.schema,),
    ).fetchall()
    try:
        return matching([r[0] for r in names], cfg.patterns, f"schema {cfg.schema}")
    except PlanError as e:
        raise PlanError(f"{where}: {e}") from None


def describe_source(conn, cfg) -> Table:
    """The table a source reads, or the columns of its query (which has no key)."""
    where = f"postgres source '{cfg.connector}'"
    if not cfg.query:
        return describe_table(conn, cfg.schema, cfg.table, where)
    return describe_query(conn, cfg.query, where)


def describe_query(conn, query: str, where: str) -> Table:
    try:
        cur = conn.execute(f"SELECT * FROM ({query}) q LIMIT 0")
    except Exception as e:  # psycopg's error names the problem in the query
        raise PlanError(f"{where}: the query fails: {str(e).strip().splitlines()[0]}") from None
    columns = []
    for col in cur.description:
        pg = conn.execute("SELECT format_type(%s, NULL)", (col.type_code,)).fetchone()[0]
        if pg == "numeric" and col.precision:
            pg = f"numeric({col.precision},{col.scale or 0})"
        st = spark_type(pg)
        if st is None:
            raise PlanError(
                f"{where}: query column {col.name} has type {pg}, which connectql cannot read"
            )
        columns.append((col.name, pg, st))
    return Table("", "query", tuple(columns), ())


def count(cfg, where: str) -> int:
    """At CREATE of a cdc source: the rows its snapshot reads (progress)."""
    with connect(cfg.connection, autocommit=True) as conn:
        sql = count_sql(cfg, tables_of(conn, cfg, where))
        return sum(n for (n,) in conn.execute(sql).fetchall())
