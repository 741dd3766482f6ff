"""Where the HTTP API was: it lives in connectql/api/ now; these names stay for old imports."""

from connectql.api.errors import finite, match
from connectql.api.guard import MAX_BODY
from connectql.api.serve import ApiServer, check_host, is_loopback, serve, serving

__all__ = [
    "ApiServer",
    "MAX_BODY",
    "check_host",
    "finite",
    "is_loopback",
    "match",
    "serve",
    "serving",
]
