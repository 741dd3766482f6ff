"""What a MySQL source reads: the table's columns with their Spark types and its primary key, from
information_schema, and at CREATE what change-data capture needs from the server (binary log on,
ROW format, FULL row images, replication privileges), each named when missing."""

from __future__ import annotations

from connectql.connectors.multitable import matching
from connectql.connectors.mysql.client import qualified, query
from connectql.connectors.mysql.types import Column, spark_type
from connectql.connectors.relational import declared
from connectql.connectors.relational.tablereader import Table
from connectql.errors import PlanError, TableMissing

# server variable -> the value change-data capture needs
BINLOG_SETTINGS = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL"}


def columns_of(conn, database: str, table: str) -> list[Column]:
    rows = query(
        conn,
        "SELECT COLUMN_NAME, COLUMN_TYPE, CHARACTER_SET_NAME FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (database, table),
    )
    return [Column(_text(n), _text(t), c and _text(c)) for n, t, c in rows]


def describe_table(conn, database: str, table: str, where: str) -> Table:
    columns = columns_of(conn, database, table)
    if not columns:
        raise TableMissing(
            f"{where}: table {database}.{table} does not exist{_similar(conn, database)}"
        )
    key = primary_key(conn, database, table)
    typed = _typed(columns, where, f" of {database}.{table}", key)
    return Table(database, table, typed, key, declared=_declared(conn, database, table))


def _declared(conn, database: str, table: str) -> tuple[str, ...]:
    """Each column's declared type as a DDL comment: its COLUMN_TYPE, with a text column's
    character set and collation."""
    rows = query(
        conn,
        "SELECT COLUMN_TYPE, CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLUMNS"
        " WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (database, table),
    )
    out = []
    for column_type, charset, collation in rows:
        text = _text(column_type)
        if collation is not None:
            text += f" CHARACTER SET {_text(charset)} COLLATE {_text(collation)}"
        out.append(declared.comment("mysql", text))
    return tuple(out)


def _typed(
    columns: list[Column], where: str, of: str, key: tuple[str, ...] = ()
) -> tuple[tuple[str, str, str], ...]:
    """(name, column type, Spark type) of each column (`key`: the primary key's), or a
    PlanError naming one unreadable."""
    out = []
    for c in columns:
        st = spark_type(c, c.name in key)
        if st is None:
            raise PlanError(
                f"{where}: column {c.name}{of} has type {c.column_type}, which connectql"
                " cannot read"
            )
        out.append((c.name, c.column_type, st))
    return tuple(out)


def primary_key(conn, database: str, table: str) -> tuple[str, ...]:
    rows = query(
        conn,
        "SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s"
        " AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
        (database, table),
    )
    return tuple(_text(r[0]) for r in rows)


def _similar(conn, database: str) -> str:
    rows = query(
        conn,
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s"
        " ORDER BY 1 LIMIT 10",
        (database,),
    )
    names = [_text(r[0]) for r in rows]
    if not names:
        return f" (database {database} has no tables)"
    return f" (tables in {database}: {', '.join(names)})"


def describe_query(conn, sql: str, where: str) -> Table:
    """The columns of a query's rows (it has no key), typed from the result's field metadata."""
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT * FROM ({sql}) q LIMIT 0")
            fields = cur._result.fields  # pymysql's field packets: type, flags, charset
    except Exception as e:  # the server's message names the problem in the query
        raise PlanError(f"{where}: the query fails: {_first_line(e)}") from None
    columns = [Column(f.name, _field_type(f)) for f in fields]
    return Table("", "query", _typed(columns, where, " of the query"), ())


_FIELD_TYPES = {
    1: "tinyint", 2: "smallint", 3: "int", 4: "float", 5: "double", 7: "timestamp",
    8: "bigint", 9: "mediumint", 10: "date", 11: "time", 12: "datetime", 13: "year",
    16: "bit", 245: "json", 247: "enum", 248: "set",
}  # fmt: skip
BINARY_CHARSET, UNSIGNED_FLAG = 63, 32


def _field_type(f) -> str:
    """A result field's type written as information_schema's COLUMN_TYPE would write it."""
    code = f.type_code
    if code in (0, 246):
        return f"decimal({f.length - (f.scale > 0) - (not f.flags & UNSIGNED_FLAG)},{f.scale})"
    if code == 16:
        return f"bit({f.length})"
    if code in _FIELD_TYPES:
        unsigned = " unsigned" if f.flags & UNSIGNED_FLAG else ""
        fsp = f"({f.scale})" if code in (7, 11, 12) and 0 < f.scale <= 6 else ""
        return _FIELD_TYPES[code] + fsp + unsigned
    binary = f.charsetnr == BINARY_CHARSET
    if code in (249, 250, 251, 252):
        return "longblob" if binary else "longtext"
    return "varbinary" if binary else "varchar"


def _first_line(e: Exception) -> str:
    return str(e.args[1] if len(e.args) > 1 else e).strip().splitlines()[0]


def check_binlog(conn, where: str) -> None:
    """Change-data capture needs the binary log in ROW format with full row images."""
    names = ", ".join(f"@@{k}" for k in BINLOG_SETTINGS)
    values = [_text(v) for v in query(conn, f"SELECT {names}")[0]]
    for (name, needed), value in zip(BINLOG_SETTINGS.items(), values, strict=True):
        value = {"1": "ON", "0": "OFF"}.get(value, value).upper()
        if value != needed:
            raise PlanError(
                f"{where}: mode = 'cdc' needs the server variable {name} = {needed}, but it is"
                f" {value} (set it in the server's configuration and restart, or use"
                " mode = 'incremental')"
            )


def check_table_readable(conn, database: str, table: str, where: str) -> None:
    try:
        query(conn, f"SELECT 1 FROM {qualified(database, table)} LIMIT 0")
    except Exception as e:
        raise PlanError(f"{where}: cannot read {database}.{table}: {_first_line(e)}") from None


def tables_of(conn, cfg, where: str) -> list[str | None]:
    """The tables a source reads: its one table (None: its query), or those its patterns
    match."""
    if not cfg.patterns:
        return [cfg.table]
    names = query(
        conn,
        "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s"
        " AND TABLE_TYPE = 'BASE TABLE'",
        (cfg.schema,),
    )
    try:
        return matching([_text(r[0]) for r in names], cfg.patterns, f"database {cfg.schema}")
    except PlanError as e:
        raise PlanError(f"{where}: {e}") from None


def describe_source(conn, cfg, where: str | None = None) -> Table:
    where = where or f"mysql source '{cfg.connector}'"
    if cfg.query:
        return describe_query(conn, cfg.query, where)
    return describe_table(conn, cfg.schema, cfg.table, where)


def _text(value) -> str:
    """information_schema text, whether the connection decodes it or not."""
    return value.decode() if isinstance(value, (bytes, bytearray)) else str(value)
