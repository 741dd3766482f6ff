"""Connecting to MariaDB (connectors/mysql/client.py): every connection of a process tries TLS
with one context, not a new one (and the system's CA certificates loaded again) per connection."""

from __future__ import annotations

from connectql.connectors.mysql.client import connect, query
from tests.test_mysql import SHARED, plain_db  # noqa: F401 (fixture)


def test_connections_share_one_tls_context_and_work(plain_db):  # noqa: F811
    cfg = {**SHARED, "database": plain_db.name}
    with connect(cfg) as a, connect(cfg) as b:
        assert a.ctx is not None and a.ctx is b.ctx
        assert query(a, "SELECT 1") == [(1,)] and query(b, "SELECT 2") == [(2,)]
