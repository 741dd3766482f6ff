"""Connecting to PostgreSQL with errors that name what is wrong (host, database, password, role),
and quoting of identifiers."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg import sql

from connectql.errors import PlanError

CONNECTION_KEYS = ("host", "port", "user", "password", "database")
CONNECT_TIMEOUT_S = 10


def connection_config(opts: dict[str, Any]) -> dict[str, Any]:
    """The connection part of a connector's options."""
    return {k: opts[k] for k in CONNECTION_KEYS if opts.get(k) is not None}


def connect(cfg: dict[str, Any], autocommit: bool = False, **kwargs) -> psycopg.Connection:
    """A connection, or a PlanError saying which of host, database, user or password is wrong."""
    where = f"postgres at {cfg.get('host', 'localhost')}:{cfg.get('port', 5432)}"
    try:
        return psycopg.connect(
            host=cfg.get("host", "localhost"),
            port=int(cfg.get("port", 5432)),
            user=cfg.get("user") or None,
            password=cfg.get("password") or None,
            dbname=cfg.get("database") or None,
            connect_timeout=CONNECT_TIMEOUT_S,
            autocommit=autocommit,
            application_name="connectql",
            # how logical decoding prints values depends on the reading session (pgdecode)
            options="-c DateStyle=ISO -c TimeZone=UTC -c extra_float_digits=3",
            **kwargs,
        )
    except psycopg.OperationalError as e:
        raise PlanError(f"cannot connect to {where}: {_reason(e, cfg)}") from None


def _reason(e: psycopg.OperationalError, cfg: dict[str, Any]) -> str:
    text = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
    if cfg.get("password"):
        text = text.replace(str(cfg["password"]), "****")
    low = text.lower()
    if "password authentication failed" in low:
        return f"password authentication failed for user '{cfg.get('user')}'"
    if "does not exist" in low and "database" in low:
        return f"database '{cfg.get('database')}' does not exist"
    if "connection refused" in low or "could not connect" in low:
        return "connection refused (is the server running and listening there?)"
    if "timeout" in low:
        return f"no answer within {CONNECT_TIMEOUT_S} s"
    return text.removeprefix("connection failed: ").strip()


def split_table(name: str, default_schema: str) -> tuple[str, str]:
    """'s.t' -> ('s', 't'); 't' -> (default_schema, 't')."""
    schema, _, table = name.rpartition(".")
    return (schema or default_schema), table


def qualified(schema: str, table: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)
