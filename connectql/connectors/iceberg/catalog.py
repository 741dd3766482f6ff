"""The iceberg connector's catalog: its options (a SQL or REST catalog, a warehouse local or on
S3), a pyiceberg catalog made from them, and pyiceberg's calls pooled with their errors named."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from connectql.config import Option
from connectql.connectors.lake import S3_OPTIONS, Store
from connectql.toolkit import Retryable, ValidationError

_POOLED = threading.Lock()


@contextlib.contextmanager
def pooled() -> Iterator[None]:
    """pyiceberg's work inside, on a thread pool of its own that is shut down after (pyiceberg
    keeps one pool for the process's life otherwise, whose threads outlive the connector).
    One at a time in a process: the pool is pyiceberg's global."""
    from pyiceberg.utils.concurrent import ExecutorFactory

    with _POOLED, ThreadPoolExecutor(ExecutorFactory.max_workers()) as pool:
        ExecutorFactory._instance, ExecutorFactory._instance_pid = pool, os.getpid()
        try:
            yield
        finally:
            ExecutorFactory._instance = None


CATALOG_OPTIONS = (
    Option(
        "catalog.type",
        "enum",
        "sql",
        choices=("sql", "rest"),
        doc="sql: a SQL catalog (a table of SQLite or PostgreSQL); rest: an Iceberg REST catalog",
    ),
    Option(
        "catalog.uri",
        required=True,
        doc="sql: the catalog's SQLAlchemy URL, e.g. 'sqlite:////data/lake/catalog.db' (one"
        " machine) or 'postgresql+psycopg://user@host/db' (shared); rest: the catalog's URL,"
        " e.g. 'http://127.0.0.1:8181'",
    ),
    Option(
        "catalog.name",
        default="connectql",
        doc="the catalog's name in the SQL catalog's tables (a reader opens it by this name)",
    ),
    Option(
        "catalog.credential",
        secret=True,
        doc="rest: OAuth2 client credentials 'client_id:client_secret', exchanged for a token"
        " at the catalog (a secret: never shown)",
    ),
    Option("catalog.token", secret=True, doc="rest: a bearer token (a secret: never shown)"),
    Option(
        "warehouse",
        doc="where the tables' files go: a directory (a path or file:// URL) or an s3:// URL"
        " (then endpoint, region and keys reach its server); required for a SQL catalog, for a"
        " REST catalog the warehouse it names (absent: its default)",
    ),
    *S3_OPTIONS,
)


def catalog_of(options: dict, who: str):
    """The pyiceberg catalog the options name (`who` says whose, in errors)."""
    kind = options.get("catalog.type") or "sql"
    warehouse = options.get("warehouse") or ""
    files = Store(options, warehouse, who).iceberg()
    name = options.get("catalog.name") or "connectql"
    if kind == "rest":
        from pyiceberg.catalog.rest import RestCatalog

        uri = options["catalog.uri"].rstrip("/")
        given = {
            "credential": options.get("catalog.credential"),
            "token": options.get("catalog.token"),
            "warehouse": warehouse,
        }
        if given["credential"]:  # the REST spec's token endpoint, said (else a warning)
            given["oauth2-server-uri"] = f"{uri}/v1/oauth/tokens"
        return RestCatalog(name, uri=uri, **{k: v for k, v in given.items() if v}, **files)
    from pyiceberg.catalog.sql import SqlCatalog

    if not warehouse:
        raise ValidationError(f"{who}: a SQL catalog needs warehouse = '...'")
    if "://" not in warehouse:
        warehouse = f"file://{warehouse}"
    return SqlCatalog(name, uri=options["catalog.uri"], warehouse=warehouse, **files)


@contextlib.contextmanager
def calls(options: dict, who: str) -> Iterator[None]:
    """pyiceberg's work, pooled, its catalog's refusals and absences as connectql's errors:
    refused credentials a ValidationError, a catalog that does not answer Retryable."""
    import requests
    from pyiceberg import exceptions as ice

    where = f"{who}: the catalog at {options['catalog.uri']}"
    try:
        with pooled():
            yield
    except (ice.UnauthorizedError, ice.ForbiddenError, ice.OAuthError) as e:
        raise ValidationError(f"{where} refused the credentials: {e}") from None
    except (requests.ConnectionError, ice.ServiceUnavailableError, ice.ServerError) as e:
        raise Retryable(f"{where} does not answer: {e}") from None
