"""The configured database URL checked, on SQLAlchemy's URL parser alone.

Apart from the engine (``engine.py``) so that a server can refuse a malformed
``HINDSIGHT_DATABASE_URL`` at start without importing the driver, numpy and the
statement modules the engine brings: the MCP server over stdio answers
``initialize`` while a background thread imports those.
"""

from __future__ import annotations

from sqlalchemy import URL
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

from ..errors import ConfigurationError


def parse_database_url(raw: str) -> URL:
    """Parse a configured database URL, or raise one clear line.

    Raises:
        ConfigurationError: not a URL, or not PostgreSQL's.
    """
    try:
        parsed = make_url(raw)
    except (sa_exc.ArgumentError, ValueError) as exc:  # ValueError: e.g. a port not a number
        raise ConfigurationError(
            f"HINDSIGHT_DATABASE_URL is not a valid URL ({exc}); expected e.g. "
            "postgresql://user:password@host:5432/dbname"
        ) from None
    if parsed.get_backend_name() != "postgresql":
        raise ConfigurationError(
            f"HINDSIGHT_DATABASE_URL must point at PostgreSQL, got {parsed.get_backend_name()!r}"
        )
    return parsed
