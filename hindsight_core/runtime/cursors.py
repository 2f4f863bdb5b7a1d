"""A warm connection's statements: straight on its psycopg connection, through a raw cursor.

The warm strategy of ``connections.py`` (a flow whose first statement says
``autocommit``) runs each statement in autocommit mode on the pooled psycopg
connection, past SQLAlchemy's execution layer:

- through a raw cursor (:func:`cursor`), the statement compiled once to PostgreSQL's
  ``$n`` form and cached (:func:`positional`), its rows made dicts straight from the
  result (no ``Column`` objects per statement);
- psycopg prepares a statement on the server after ``PREPARE_THRESHOLD`` runs on a
  connection (no re-planning of the long recall query);
- the cursor is kept with its warm connection (its adapters cache their parameter
  dumpers), and the rows of its last result are freed when the flow ends
  (:func:`release`), so a kept cursor holds no result in memory;
- a statement's own timeout (``Sql.timeout_ms``: recall's) is the connection's session
  setting, kept while timed statements follow and reset before the connection goes
  back to the pool (:func:`untime`);
- a driver error that means the connection is unusable, not the statement
  (:func:`broken`), has the flow run once more on a fresh one (``driver.py``).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import psycopg
import sqlalchemy as sa
from psycopg.rows import RowMaker
from sqlalchemy.dialects.postgresql import psycopg as pg_psycopg

from ..storage.engine import RESET_TIMEOUT, SET_SESSION_TIMEOUT
from .flow import Rows, Sql

if TYPE_CHECKING:  # sqlalchemy.ext.asyncio loads the ORM: imported with the first async engine
    from sqlalchemy.ext.asyncio import AsyncConnection

__all__ = [
    "afetch",
    "auntime",
    "broken",
    "cursor",
    "fetch",
    "has_rows",
    "positional",
    "release",
    "untime",
]

# ``$n`` placeholders, each name once (SQLAlchemy numbers a repeated name once).
_DIALECT = pg_psycopg.dialect(paramstyle="numeric_dollar")


@lru_cache(maxsize=1024)
def positional(statement: sa.TextClause) -> tuple[bytes, tuple[str, ...]]:
    """A ``sa.text()`` statement as PostgreSQL takes it (``$n`` parameters, encoded),
    and the parameter names in ``$n`` order.

    psycopg converts ``%(name)s`` text to this form on every execute of a statement
    longer than 4,096 characters (its cache skips those), a recall's among them, on
    every call. Compiled once here, it runs through a raw cursor
    (:func:`cursor`), which sends the text as it is.
    """
    compiled = statement.compile(dialect=_DIALECT)
    return str(compiled).encode(), tuple(compiled.positiontup or ())


def _values(names: tuple[str, ...], params: Mapping[str, Any]) -> list[Any]:
    try:
        return [params[name] for name in names]
    except KeyError as exc:  # as psycopg says it for a named placeholder
        raise psycopg.ProgrammingError(f"query parameter missing: {exc.args[0]}") from None


def _driver(conn: sa.Connection | AsyncConnection) -> Any:
    # Connected already: reaching the driver does no I/O (and needs no greenlet).
    sync = conn if isinstance(conn, sa.Connection) else conn.sync_connection
    return None if sync is None else sync.connection.driver_connection


def broken(exc: BaseException | None, conn: sa.Connection | AsyncConnection) -> bool:
    """Whether the driver error ``exc`` on ``conn`` means the connection is unusable
    (not the statement)."""
    if not isinstance(exc, psycopg.Error):
        return False
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) and not exc.sqlstate:
        return True
    try:
        driver = _driver(conn)
    except Exception:  # noqa: BLE001 - a closed/invalidated facade: broken
        return True
    return driver is None or bool(driver.closed or driver.broken)


def _dict_rows(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> RowMaker[dict[str, Any]]:
    """Rows as dicts, like psycopg's ``dict_row``, with the column names read straight
    from the result: ``dict_row`` builds a ``Column`` object per column per statement
    through ``cursor.description``, a recall's 25 of them on every call."""
    res = cursor.pgresult
    if res is None or not res.nfields:
        return lambda values: {}
    names = [(res.fname(i) or b"").decode() for i in range(res.nfields)]

    def make(values: Any) -> dict[str, Any]:
        return dict(zip(names, values, strict=True))

    return make


def cursor(conn: sa.Connection | AsyncConnection) -> Any:
    """A raw cursor (``$n`` parameters: :func:`positional`) of ``conn``'s psycopg
    connection that makes rows dicts (no I/O)."""
    driver = _driver(conn)
    if isinstance(driver, psycopg.AsyncConnection):
        return _AsyncCursor(driver, row_factory=_dict_rows)
    return _Cursor(driver, row_factory=_dict_rows)


def has_rows(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> bool:
    """Whether the statement returned a row set (``cur.description`` without building
    its ``Column`` objects, one per column on every call)."""
    res = cur.pgresult
    return res is not None and res.nfields > 0


def release(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> None:
    """Free the rows of the cursor's last result (libpq's memory; the caller has its
    own copy), so that a cursor kept with its warm connection holds no large read."""
    res = cur.pgresult
    if res is not None and res.ntuples:
        res.clear()


# The psycopg connections whose session a statement with ``Sql.timeout_ms`` gave its
# timeout (the rest have the engine's, from the connection's start-up options): reset
# before such a connection goes back to the pool.
_TIMED: weakref.WeakSet[Any] = weakref.WeakSet()


class _Cursor(psycopg.RawCursor[Any]):
    """A warm connection's raw cursor, with the timeout its session has (None: the
    engine's)."""

    timeout_ms: int | None = None


class _AsyncCursor(psycopg.AsyncRawCursor[Any]):
    """:class:`_Cursor` for asyncio."""

    timeout_ms: int | None = None


def _retime(cur: _Cursor | _AsyncCursor, ms: int | None) -> tuple[bytes, list[Any]] | None:
    """The statement that gives ``cur``'s session the timeout ``ms`` (None: the
    engine's), or None when it has it."""
    if cur.timeout_ms == ms:
        return None
    if ms is None:
        return positional(RESET_TIMEOUT)[0], []
    return positional(SET_SESSION_TIMEOUT)[0], [str(ms)]


def _timed(cur: _Cursor | _AsyncCursor, ms: int | None) -> None:
    cur.timeout_ms = ms
    if ms is None:
        _TIMED.discard(cur.connection)
    else:
        _TIMED.add(cur.connection)


def fetch(cur: _Cursor, req: Sql) -> Rows:
    """Run ``req`` on a warm connection's cursor (blocking).

    ``req.timeout_ms`` is set for the connection's session, and kept while its
    statements ask for the same (a recall's, call after call): a transaction or
    PostgreSQL's pipeline would cost round trips (BEGIN / COMMIT, or one wake-up of the
    server per message) on every call. A statement with none runs at the engine's.
    """
    sql, names = positional(req.statement)
    retime = _retime(cur, req.timeout_ms)
    if retime is not None:
        cur.execute(*retime)
        _timed(cur, req.timeout_ms)
    if isinstance(req.params, list):
        cur.executemany(sql, [_values(names, p) for p in req.params])
        return []
    cur.execute(sql, _values(names, req.params))
    return cur.fetchall() if req.fetch == "all" and has_rows(cur) else []


async def afetch(cur: _AsyncCursor, req: Sql) -> Rows:
    """:func:`fetch` for asyncio."""
    sql, names = positional(req.statement)
    retime = _retime(cur, req.timeout_ms)
    if retime is not None:
        await cur.execute(*retime)
        _timed(cur, req.timeout_ms)
    if isinstance(req.params, list):
        await cur.executemany(sql, [_values(names, p) for p in req.params])
        return []
    await cur.execute(sql, _values(names, req.params))
    return await cur.fetchall() if req.fetch == "all" and has_rows(cur) else []


def _timed_driver(conn: sa.Connection | AsyncConnection) -> Any:
    """``conn``'s psycopg connection if a statement gave its session a timeout."""
    sync = conn if isinstance(conn, sa.Connection) else conn.sync_connection
    if sync is None or sync.closed or sync.invalidated:  # reaching it would reconnect
        return None
    try:
        driver = _driver(conn)
    except Exception:  # noqa: BLE001 - closed or invalidated: nothing to reset
        return None
    return driver if driver is not None and driver in _TIMED else None


def untime(conn: sa.Connection) -> None:
    """Give ``conn``'s session the engine's timeout back before it returns to the pool
    (a transaction there must not run at a recall's); invalidated if that fails."""
    driver = _timed_driver(conn)
    if driver is not None:
        try:
            driver.execute(positional(RESET_TIMEOUT)[0], prepare=False)
            _TIMED.discard(driver)
        except psycopg.Error:
            conn.invalidate()


async def auntime(conn: AsyncConnection) -> None:
    """:func:`untime` for asyncio."""
    driver = _timed_driver(conn)
    if driver is not None:
        try:
            await driver.execute(positional(RESET_TIMEOUT)[0], prepare=False)
            _TIMED.discard(driver)
        except psycopg.Error:
            await conn.invalidate()
