"""Connecting to MySQL/MariaDB with errors that name what is wrong (host, database, user,
password), and quoting of identifiers. Sessions run in UTC so TIMESTAMP values are UTC."""

from __future__ import annotations

from typing import Any

import pymysql

from connectql.errors import PlanError

CONNECTION_KEYS = ("host", "port", "user", "password", "database")
CONNECT_TIMEOUT_S = 10

# server error codes
ACCESS_DENIED, UNKNOWN_DATABASE, CANNOT_CONNECT, UNKNOWN_HOST = 1045, 1049, 2003, 2005


def connection_config(opts: dict[str, Any]) -> dict[str, Any]:
    """The connection part of a connector's options."""
    return {k: opts[k] for k in CONNECTION_KEYS if opts.get(k) is not None}


def where(cfg: dict[str, Any]) -> str:
    return f"mysql at {cfg.get('host', 'localhost')}:{cfg.get('port', 3306)}"


def connect(cfg: dict[str, Any], autocommit: bool = True, **kwargs) -> pymysql.Connection:
    """A connection, or a PlanError saying which of host, database, user or password is wrong.
    `kwargs` go to pymysql (e.g. cursorclass, conv)."""
    try:
        return pymysql.connect(
            host=cfg.get("host", "localhost"),
            port=int(cfg.get("port", 3306)),
            user=cfg.get("user") or "root",
            password=cfg.get("password") or "",
            database=cfg.get("database") or None,
            connect_timeout=CONNECT_TIMEOUT_S,
            autocommit=autocommit,
            charset="utf8mb4",
            init_command="SET time_zone = '+00:00'",
            **kwargs,
        )
    except pymysql.err.MySQLError as e:
        raise PlanError(f"cannot connect to {where(cfg)}: {reason(e, cfg)}") from None


def reason(e: Exception, cfg: dict[str, Any]) -> str:
    """A one-line cause of a connection error, with the password never in it."""
    code = e.args[0] if e.args and isinstance(e.args[0], int) else None
    text = str(e.args[1] if len(e.args) > 1 else e).strip().splitlines()[0]
    if cfg.get("password"):
        text = text.replace(str(cfg["password"]), "****")
    if code == ACCESS_DENIED:
        return (
            f"access denied for user '{cfg.get('user') or 'root'}' (wrong password or no such user)"
        )
    if code == UNKNOWN_DATABASE:
        return f"database '{cfg.get('database')}' does not exist"
    if code in (CANNOT_CONNECT, UNKNOWN_HOST):
        return "connection refused (is the server running and listening there?)"
    return text


def quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def qualified(database: str, table: str) -> str:
    return f"{quote(database)}.{quote(table)}"


def split_table(name: str, default_database: str) -> tuple[str, str]:
    """'db.t' -> ('db', 't'); 't' -> (default_database, 't')."""
    database, _, table = name.rpartition(".")
    return (database or default_database), table


def query(conn, sql: str, params=None) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(sql, params)
        return list(cur.fetchall())
