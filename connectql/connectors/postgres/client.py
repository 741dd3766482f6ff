"""Connecting to PostgreSQL with errors that name what is wrong (host, database, password, role),
and quoting of identifiers."""

from __future__ import annotations

import json
from typing import Any

import psycopg
from psycopg import errors, sql

from connectql.connectors.relational.bounds import BOUND_KEYS, Bounds
from connectql.errors import PlanError

CONNECTION_KEYS = ("host", "port", "user", "password", "database", *BOUND_KEYS)


def connection_config(opts: dict[str, Any]) -> dict[str, Any]:
    """The connection part of a connector's options (with its bounds)."""
    return {k: opts[k] for k in CONNECTION_KEYS if opts.get(k) is not None}


def where(cfg: dict[str, Any]) -> str:
    return f"postgres at {cfg.get('host', 'localhost')}:{cfg.get('port', 5432)}"


class BoundedConnection(psycopg.Connection):
    """A connection whose every wait on the server (a query, a COPY chunk, a commit, a read
    of the replication stream) gives up after `read_s` seconds without an answer: the server's
    own statement_timeout cannot fire when the server itself is frozen or unreachable."""

    read_s: float | None = None
    place: str = "postgres"

    def wait(self, gen, interval=0.1, timeout=None):
        if timeout is not None or self.read_s is None:
            return super().wait(gen, interval, timeout)
        try:
            return super().wait(gen, interval, self.read_s)
        except errors._WaitTimeout:
            self.pgconn.finish()  # mid-protocol: the connection cannot be used again
            raise psycopg.OperationalError(
                f"no answer from {self.place} within {self.read_s:g} s (read.timeout.ms)"
            ) from None


def connect_kwargs(cfg: dict[str, Any], replication: bool = False) -> dict[str, Any]:
    """psycopg.connect's arguments for `cfg` (a connection config): the server, and the bounds
    (connect timeout, TCP keepalives, statement and lock timeouts; a replication connection has
    no statement timeout, which would end its long START_REPLICATION). For every connection to
    PostgreSQL; connect with BoundedConnection.connect so that a wait on a silent server ends too."""
    b = Bounds.of(cfg)
    settings = ["DateStyle=ISO", "TimeZone=UTC", "extra_float_digits=3"]
    if b.read_s and not replication:
        settings.append(f"statement_timeout={int(b.read_s * 1000)}")
    if b.lock_s:
        settings.append(f"lock_timeout={int(b.lock_s * 1000)}")
    out = {
        "host": cfg.get("host", "localhost"),
        "port": int(cfg.get("port", 5432)),
        "user": cfg.get("user") or None,
        "password": cfg.get("password") or None,
        "dbname": cfg.get("database") or None,
        "connect_timeout": max(1, round(b.connect_s)),
        "application_name": "connectql",
        # how values are printed (COPY, logical decoding) depends on the reading session
        "options": " ".join(f"-c {setting}" for setting in settings),
    }
    probes = b.keepalive_probes()
    if probes:
        idle, interval, count = probes
        out |= {"keepalives": 1, "keepalives_idle": idle, "keepalives_interval": interval}
        out |= {"keepalives_count": count, "tcp_user_timeout": int(b.keepalive_s * 1000)}
    return out


def connect(cfg: dict[str, Any], autocommit: bool = False, **kwargs) -> psycopg.Connection:
    """A bounded connection (`kwargs`: more or other psycopg.connect arguments), or a
    PlanError saying which of host, database, user or password is wrong (or that the server
    did not answer)."""
    try:
        conn = BoundedConnection.connect(**(connect_kwargs(cfg) | kwargs), autocommit=autocommit)
    except psycopg.OperationalError as e:
        raise connect_error(e, cfg) from None
    conn.read_s, conn.place = Bounds.of(cfg).read_s, where(cfg)
    return conn


def libpq_params(cfg: dict[str, Any], application: str) -> dict[str, Any]:
    """The libpq parameters of a replication connection (psycopg2's)."""
    return connect_kwargs(cfg, replication=True) | {"application_name": application}


def connect_error(e: Exception, cfg: dict[str, Any]) -> PlanError:
    return PlanError(f"cannot connect to {where(cfg)}: {_reason(e, cfg)}")


def _reason(e: Exception, cfg: dict[str, Any]) -> str:
    text = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
    if cfg.get("password"):
        text = text.replace(str(cfg["password"]), "****")
    low = str(e).lower()  # psycopg2 puts the reason on the first line, psycopg on the last
    if "password authentication failed" in low:
        return f"password authentication failed for user '{cfg.get('user')}'"
    if "does not exist" in low and "database" in low:
        return f"database '{cfg.get('database')}' does not exist"
    if "connection refused" in low or "could not connect" in low:
        return "connection refused (is the server running and listening there?)"
    if "timeout" in low:
        return f"no answer within {Bounds.of(cfg).connect_s:g} s (connect.timeout.ms)"
    return text.removeprefix("connection failed: ").strip()


def split_table(name: str, default_schema: str) -> tuple[str, str]:
    """'s.t' -> ('s', 't'); 't' -> (default_schema, 't')."""
    schema, _, table = name.rpartition(".")
    return (schema or default_schema), table


def qualified(schema: str, table: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table))


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)
