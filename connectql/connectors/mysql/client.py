"""Connecting to MySQL/MariaDB with errors that name what is wrong (host, database, user,
password), and quoting of identifiers. Sessions run in UTC so TIMESTAMP values are UTC."""

from __future__ import annotations

import functools
import math
import socket
from typing import Any

import pymysql

from connectql.connectors.relational.bounds import BOUND_KEYS, Bounds
from connectql.errors import PlanError

CONNECTION_KEYS = ("host", "port", "user", "password", "database", *BOUND_KEYS)

# server error codes
ACCESS_DENIED, UNKNOWN_DATABASE, CANNOT_CONNECT, UNKNOWN_HOST = 1045, 1049, 2003, 2005


def connection_config(opts: dict[str, Any]) -> dict[str, Any]:
    """The connection part of a connector's options."""
    return {k: opts[k] for k in CONNECTION_KEYS if opts.get(k) is not None}


def where(cfg: dict[str, Any]) -> str:
    return f"mysql at {cfg.get('host', 'localhost')}:{cfg.get('port', 3306)}"


def connect_kwargs(cfg: dict[str, Any]) -> dict[str, Any]:
    """pymysql.connect's arguments for `cfg` (a connection config): the server, and the bounds
    (connect timeout, a read and write timeout on the socket, lock waits). Connect through
    `bounded_connect(cfg)` so that the TCP keepalives apply too (binlog streams included)."""
    b = Bounds.of(cfg)
    init = "SET time_zone = '+00:00'"
    if b.lock_s:
        wait = max(1, math.ceil(b.lock_s))
        init += f", SESSION innodb_lock_wait_timeout = {wait}, SESSION lock_wait_timeout = {wait}"
    return {
        "host": cfg.get("host", "localhost"),
        "port": int(cfg.get("port", 3306)),
        "user": cfg.get("user") or "root",
        "password": cfg.get("password") or "",
        "database": cfg.get("database") or None,
        "connect_timeout": b.connect_s,
        "read_timeout": b.read_s,
        "write_timeout": b.read_s,
        "charset": "utf8mb4",
        "init_command": init,
    }


def bounded_connect(cfg: dict[str, Any]):
    """pymysql.connect with the TCP keepalives of `cfg` set on the connection's socket (pymysql
    turns keepalives on but leaves their timing at the system's two hours)."""
    return functools.partial(_with_keepalive, Bounds.of(cfg).keepalive_probes())


class _Connection(pymysql.connections.Connection):
    """pymysql's connection, its 'preferred' TLS context (the one it makes when no TLS option is
    given, to try TLS and fall back) made once per process: pymysql makes a new one for every
    connection, loading the system's CA certificates each time (50 ms here), and a source or
    sink opens several connections per micro-batch."""

    def _create_ssl_ctx(self, sslp):
        if not (isinstance(sslp, dict) and not sslp):
            return super()._create_ssl_ctx(sslp)
        if _PREFERRED_TLS.get("ctx") is None:
            _PREFERRED_TLS["ctx"] = super()._create_ssl_ctx(sslp)
        return _PREFERRED_TLS["ctx"]


_PREFERRED_TLS: dict = {}


def _with_keepalive(probes, **kwargs) -> pymysql.Connection:
    conn = _Connection(**kwargs)
    sock = getattr(conn, "_sock", None)
    if probes and sock is not None and hasattr(socket, "TCP_KEEPIDLE"):
        idle, interval, count = probes
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, idle)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, interval)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, count)
    return conn


def connect(cfg: dict[str, Any], autocommit: bool = True, **kwargs) -> pymysql.Connection:
    """A bounded connection, or a PlanError saying which of host, database, user or password
    is wrong (or that the server did not answer). `kwargs` go to pymysql (e.g. cursorclass,
    conv)."""
    try:
        return bounded_connect(cfg)(**connect_kwargs(cfg), autocommit=autocommit, **kwargs)
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
    if "timed out" in text:
        return "no answer from the server in time (connect.timeout.ms, read.timeout.ms)"
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
