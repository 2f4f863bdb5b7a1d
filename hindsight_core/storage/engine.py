"""Connections: engines for sync and async use, and driver errors mapped once.

Both engines talk psycopg 3 through SQLAlchemy 2 with a pre-ping on checkout,
so a pool recovers by itself after the server restarts.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import psycopg
import sqlalchemy as sa
from sqlalchemy import exc as sa_exc

from ..errors import (
    DatabaseBusyError,
    DatabaseError,
    DatabaseUnavailableError,
    HindsightError,
    VectorExtensionMissingError,
)
from ..settings import Settings
from . import embedded
from .experiences_sql import DEDUP_EF_SEARCH, GIVE_UP_LOCK_MS
from .urls import parse_database_url
from .vectors import ADAPTERS

if TYPE_CHECKING:  # sqlalchemy.ext.asyncio loads the ORM: imported by the async builders
    from sqlalchemy.ext.asyncio import AsyncEngine

VECTOR_HELP = (
    "the PostgreSQL server has no pgvector extension. Install it (Debian/Ubuntu: "
    "apt install postgresql-<version>-pgvector; Docker: use the pgvector/pgvector image; "
    "managed services: enable the 'vector' extension), or unset HINDSIGHT_DATABASE_URL "
    "to use the embedded PostgreSQL, which ships pgvector"
)

VECTOR_GRANT_HELP = (
    "the pgvector extension is not installed in this database and this role may not "
    "install it (CREATE EXTENSION vector needs a superuser, or a managed service's admin "
    "role): ask one to run `CREATE EXTENSION vector;` in this database once, then retry "
    "(see docs/operations.md)"
)
INSUFFICIENT_PRIVILEGE = "42501"


def resolve_url(settings: Settings, url: str | None = None) -> str:
    """The SQLAlchemy URL to use: explicit, then configured, then the embedded server.

    A configured URL is never replaced by the embedded server, even if it fails.
    """
    raw = url or settings.database_url
    if raw is None:
        return embedded.embedded_url(settings.home)
    parsed = parse_database_url(raw)
    return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)


# A pool checkout waits at most this long at a time: the driver then asks again while
# connections keep coming back (``runtime/driver.py``: ``_checkout``), and a flow that
# holds a connection and wants another for a unit of its own gives up after one such
# wait (``flow.Unit.gives_up``) instead of waiting for connections that may all be held
# by flows queued behind its own lock.
CHECKOUT_SLICE = 1.0


def _engine_args(settings: Settings) -> dict[str, Any]:
    # pgvector >= 0.8: filtered ANN scans (namespace, scene, item filters) keep scanning
    # until enough rows pass, instead of coming back short. Older pgvector ignores them.
    options = (
        f"-c statement_timeout={settings.statement_timeout_ms} "
        "-c hnsw.iterative_scan=strict_order -c ivfflat.iterative_scan=relaxed_order"
    )
    return {
        "pool_size": settings.pool_size,
        "max_overflow": settings.pool_size,
        "pool_timeout": min(settings.pool_timeout, CHECKOUT_SLICE),
        "pool_pre_ping": True,
        "pool_recycle": 1800,
        "connect_args": {
            "connect_timeout": max(1, round(settings.connect_timeout)),
            "options": options,
            "context": ADAPTERS,
        },
    }


def _side_args(settings: Settings) -> dict[str, Any]:
    # The side pool of a memory: one connection, never waited for (pool_timeout 0: a
    # flow whose side connection is busy runs its reads in its own transaction), in
    # autocommit mode, with the dedup lookup's HNSW search effort and a short lock
    # timeout: a read queued behind a reindex that waits for the flow's own transaction
    # would wait forever (a cycle through the client the server cannot see), so it
    # gives up and runs in that transaction instead (``driver._pipelined``).
    args = _engine_args(settings)
    args["connect_args"] = {
        **args["connect_args"],
        "options": (
            args["connect_args"]["options"]
            + f" -c hnsw.ef_search={DEDUP_EF_SEARCH} -c lock_timeout={GIVE_UP_LOCK_MS}"
        ),
    }
    return {
        **args,
        "pool_size": 1,
        "max_overflow": 0,
        "pool_timeout": 0,
        "isolation_level": "AUTOCOMMIT",
    }


LOCK_NOT_AVAILABLE = "55P03"


def gave_up_waiting_for_lock(exc: BaseException | None) -> bool:
    """Whether ``exc`` (a driver error, or a Hindsight error raised from one) is a
    statement ended by ``lock_timeout`` (``experiences_sql.GIVE_UP_LOCK_MS``)."""
    while exc is not None:
        orig = getattr(exc, "orig", None) or exc
        if str(getattr(orig, "sqlstate", None) or "") == LOCK_NOT_AVAILABLE:
            return True
        exc = exc.__cause__
    return False


def create_side_engine(settings: Settings, engine: sa.Engine) -> sa.Engine:
    """The side pool for ``flow.Pipelined`` reads, to ``engine``'s database (connects
    nothing yet)."""
    url = engine.url.render_as_string(hide_password=False)
    return sa.create_engine(url, **_side_args(settings))


def create_async_side_engine(settings: Settings, engine: AsyncEngine) -> AsyncEngine:
    """:func:`create_side_engine` for asyncio."""
    from sqlalchemy.ext.asyncio import create_async_engine

    url = engine.url.render_as_string(hide_password=False)
    return create_async_engine(url, **_side_args(settings))


# ``settings.pool_timeout`` of the engines made here, by engine (sync side).
_PATIENCE: weakref.WeakKeyDictionary[sa.Engine, float] = weakref.WeakKeyDictionary()


def patience(engine: sa.Engine) -> float:
    """Seconds a checkout from ``engine`` waits with no connection given back: its
    settings' ``pool_timeout`` (an engine made elsewhere: its pool's own timeout)."""
    known = _PATIENCE.get(engine)
    return known if known is not None else float(getattr(engine.pool, "_timeout", 30.0))


def create_sync_engine(settings: Settings, url: str | None = None) -> sa.Engine:
    """A pooled sync engine for the resolved URL."""
    engine = sa.create_engine(resolve_url(settings, url), **_engine_args(settings))
    _PATIENCE[engine] = settings.pool_timeout
    return engine


def create_async(settings: Settings, url: str | None = None) -> AsyncEngine:
    """A pooled async engine for the resolved URL."""
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(resolve_url(settings, url), **_engine_args(settings))
    _PATIENCE[engine.sync_engine] = settings.pool_timeout
    return engine


def translate_db_error(exc: Exception) -> HindsightError:
    """Map a psycopg, SQLAlchemy or OS error to Hindsight's hierarchy (the one place)."""
    orig = getattr(exc, "orig", None) or exc
    text = str(orig)
    if 'type "vector" does not exist' in text or (
        "extension" in text and "vector" in text and "not available" in text
    ):
        return VectorExtensionMissingError(VECTOR_HELP)
    sqlstate = str(getattr(orig, "sqlstate", None) or "")
    if sqlstate == INSUFFICIENT_PRIVILEGE and 'extension "vector"' in text:
        return VectorExtensionMissingError(VECTOR_GRANT_HELP)
    if sqlstate == INSUFFICIENT_PRIVILEGE and "for schema" in text:
        return DatabaseError(
            f"{_first_line(text)}: Hindsight's role creates its own tables; a superuser "
            "grants it with `GRANT USAGE, CREATE ON SCHEMA public TO <role>;` "
            "(see docs/operations.md)"
        )
    if sqlstate == "57014":  # query_canceled: psycopg files it under OperationalError
        return DatabaseError(f"the statement was cancelled (timeout): {_first_line(text)}")
    if sqlstate.startswith("40"):  # deadlock / serialization failure: the server is fine
        return DatabaseError(
            f"the transaction was rolled back, nothing was written; retry: {_first_line(text)}"
        )
    if isinstance(exc, sa_exc.TimeoutError):
        return busy()
    connection_error = isinstance(
        orig, psycopg.OperationalError | psycopg.InterfaceError | OSError
    ) or isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError)
    # No state (a failed connect) or connection exception / resources / shutdown classes.
    if (
        connection_error
        and (not sqlstate or sqlstate[:2] in ("08", "53") or sqlstate.startswith("57P"))
    ) or (isinstance(exc, sa_exc.DBAPIError) and exc.connection_invalidated):
        return DatabaseUnavailableError(f"the database cannot be reached: {_first_line(text)}")
    return DatabaseError(f"database error: {_first_line(text)}")


def busy(waited: float | None = None) -> DatabaseBusyError:
    """The error of a pool checkout that gave up: every connection stayed in use."""
    during = f" for {waited:.0f} s" if waited else ""
    return DatabaseBusyError(
        f"the database is busy: every pooled connection stayed in use{during} and none was "
        "given back (pool timeout); nothing was written. Retry in a moment, or raise "
        "HINDSIGHT_POOL_SIZE / HINDSIGHT_POOL_TIMEOUT"
    )


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else "unknown error"


# The statement timeout, set over the start-up option's (``-c statement_timeout``),
# written here once (``:ms`` a string of milliseconds, "0": none):
# - for the rest of a transaction: a statement with ``flow.Sql.timeout_ms`` in one, and
#   a build that takes as long as the data needs (an index over every stored row);
# - for a session: such statements on a warm connection (``runtime/cursors.py``), or a
#   migration, and back to the start-up option's.
SET_LOCAL_TIMEOUT = sa.text("SELECT set_config('statement_timeout', :ms, true)")
SET_SESSION_TIMEOUT = sa.text("SELECT set_config('statement_timeout', :ms, false)")
RESET_TIMEOUT = sa.text("RESET statement_timeout")
NO_TIMEOUT = {"ms": "0"}
"""The parameters of :data:`SET_LOCAL_TIMEOUT` / :data:`SET_SESSION_TIMEOUT` for no timeout."""

DB_ERRORS = (sa_exc.SQLAlchemyError, psycopg.Error, OSError)


@contextmanager
def db_errors() -> Iterator[None]:
    """Re-raise driver errors as Hindsight errors (``raise ... from``)."""
    try:
        yield
    except HindsightError:
        raise
    except DB_ERRORS as exc:
        raise translate_db_error(exc) from exc
