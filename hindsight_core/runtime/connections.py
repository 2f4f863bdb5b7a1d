"""Where the drivers get connections: one engine's pool, and the warm ones kept from it.

A flow runs either in a transaction on a pooled connection, or, when its first
statement says ``autocommit`` (``flow.Sql``), on a warm autocommit connection: most
calls of a memory, an item store or a checkpointer are one statement (a get, a
search, a put), and a transaction costs each a pool checkout with a pre-ping round
trip, BEGIN and COMMIT round trips, and SQLAlchemy's execution layer. On the warm
strategy (carried out by ``driver.py``):

- statements run in autocommit mode, straight on the pooled psycopg connection,
  through a raw cursor: compiled once per statement to PostgreSQL's ``$n`` form and
  cached (:func:`positional`);
- psycopg prepares a statement on the server after ``PREPARE_THRESHOLD`` runs on a
  connection (no re-planning of the long recall query);
- connections used within the last ``KEEP_WARM`` seconds stay checked out (at most
  ``WARM_MAX``) and are reused without a ping, with their cursor (a cursor's
  adapters cache its parameter dumpers: a new one cost ~0.015 ms of a checkpoint put
  and ~0.025 ms of a recall); the rows of its last result are freed when the flow
  ends (:func:`release`), so a kept cursor holds no result in memory;
- a warm connection found broken (:func:`broken`) is dropped and the whole flow run
  once more on a fresh, pinged connection;
- a statement's own timeout (``Sql.timeout_ms``: recall's) is its warm connection's
  session setting, kept while timed statements follow and reset before the
  connection goes back to the pool (:func:`untime`); each timeout keeps its own warm
  connection (:meth:`_Source.take`), so recall and search in turns set nothing.

:class:`Connections` (blocking) and :class:`AsyncConnections` (asyncio) hold the
engine, the side pool of ``flow.Pipelined`` reads and the warm list; they differ only
in how connections are given back. Warm connections remain connections of the
engine's pool: ``close()`` gives them back, and disposing of the engine closes them.

A checkout that waited its pool's slice in vain asks :meth:`_Source.keep_waiting`
whether to wait again: yes while connections keep coming back to the pool (a
check-in within the settings' ``pool_timeout``) and the caller's deadline is ahead
(``driver._checkout``).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import psycopg
import sqlalchemy as sa
from psycopg.rows import RowMaker
from sqlalchemy.dialects.postgresql import psycopg as pg_psycopg

from ..storage.engine import RESET_TIMEOUT, SET_SESSION_TIMEOUT, patience
from .flow import DEADLINE, Rows, Sql

if TYPE_CHECKING:  # sqlalchemy.ext.asyncio loads the ORM: imported with the first async engine
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

__all__ = [
    "AsyncConnections",
    "Connections",
    "auntime",
    "broken",
    "cursor",
    "positional",
    "release",
    "untime",
]

# ``$n`` placeholders, each name once (SQLAlchemy numbers a repeated name once).
_DIALECT = pg_psycopg.dialect(paramstyle="numeric_dollar")
E = TypeVar("E", sa.Engine, "AsyncEngine")
C = TypeVar("C", sa.Connection, "AsyncConnection")
Self = TypeVar("Self", bound="_Source[Any, Any]")


@lru_cache(maxsize=1024)
def positional(statement: sa.TextClause) -> tuple[bytes, tuple[str, ...]]:
    """A ``sa.text()`` statement as PostgreSQL takes it (``$n`` parameters, encoded),
    and the parameter names in ``$n`` order.

    psycopg converts ``%(name)s`` text to this form on every execute of a statement
    longer than 4,096 characters (its cache skips those): ~0.1-0.2 ms of each recall,
    whose statement is longer. Compiled once here, it runs through a raw cursor
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
    through ``cursor.description`` (~0.08 ms for a recall's 25 columns)."""
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
    its ``Column`` objects: ~0.04 ms for a recall's 25 columns)."""
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


# When each engine's pool last had a connection given back (``time.monotonic()``): a
# checkout that waited its slice in vain waits on while connections keep coming back.
_RETURNED: weakref.WeakKeyDictionary[sa.Engine, list[float]] = weakref.WeakKeyDictionary()
_WATCH_LOCK = threading.Lock()


def _watch(engine: sa.Engine) -> list[float]:
    """The cell holding when ``engine``'s pool last had a connection given back."""
    with _WATCH_LOCK:
        cell = _RETURNED.get(engine)
        if cell is None:
            cell = _RETURNED[engine] = [time.monotonic()]

            def on_checkin(_dbapi_conn: Any, _record: Any) -> None:
                cell[0] = time.monotonic()

            sa.event.listen(engine, "checkin", on_checkin)
        return cell


class _Source(Generic[E, C]):
    """An engine, the side pool for ``flow.Pipelined`` reads, and the warm connections
    (with their kept cursor), shared by the sync and async variants."""

    KEEP_WARM = 10.0
    WARM_MAX = 2

    def __init__(self, engine: E, side: Callable[[], E] | None = None) -> None:
        self.engine: E = engine
        self._side: Callable[[], E] | None = side
        self._warm: list[tuple[float, C, Any]] = []
        self._lock = threading.Lock()
        sync = engine if isinstance(engine, sa.Engine) else engine.sync_engine
        self._returned = _watch(sync)
        self.patience = patience(sync)

    @staticmethod
    def clock() -> float:
        """Now, on the clock of :meth:`keep_waiting`."""
        return time.monotonic()

    def keep_waiting(self, since: float) -> tuple[bool, float]:
        """After a checkout slice timed out: whether to wait again (a connection came
        back within ``patience`` seconds, and the caller's deadline is not reached),
        and how long the call has waited since ``since``."""
        now = time.monotonic()
        deadline = DEADLINE.get()
        if deadline is not None and now >= deadline:
            return False, now - since
        return now - max(since, self._returned[0]) < self.patience, now - since

    @classmethod
    def of(
        cls: type[Self], current: Self | None, engine: E, side: Callable[[], E] | None = None
    ) -> Self:
        """``current`` if it is ``engine``'s, else new connections of ``engine`` (a
        front end whose engine was replaced)."""
        if current is not None and current.engine is engine:
            return current
        return cls(engine, side)

    def side(self) -> E | None:
        """The side pool (built on first need), or None when there is none."""
        return None if self._side is None else self._side()

    def drain(self) -> list[C]:
        """Forget every warm connection; the caller gives them back or closes them."""
        with self._lock:
            conns = [c for _, c, _ in self._warm]
            self._warm.clear()
        return conns

    def take(self, timeout_ms: int | None = None) -> tuple[C | None, Any, list[C]]:
        """A warm connection and its cursor (or None), and the cold connections to give
        back to the pool.

        The latest kept one whose session has ``timeout_ms`` (``Sql.timeout_ms``); with
        none such and room for one more warm connection, None (a new one: recall and
        search in turns keep one each, rather than setting the timeout back and forth).
        """
        now = time.monotonic()
        with self._lock:
            cold = [c for used, c, _ in self._warm if now - used >= self.KEEP_WARM]
            self._warm = [w for w in self._warm if now - w[0] < self.KEEP_WARM]
            for i in range(len(self._warm) - 1, -1, -1):
                if self._warm[i][2].timeout_ms == timeout_ms:
                    _, conn, cur = self._warm.pop(i)
                    return conn, cur, cold
            if len(self._warm) < self.WARM_MAX:
                return None, None, cold
            _, conn, cur = self._warm.pop()
            return conn, cur, cold

    def keep(self, conn: C, cur: Any) -> bool:
        """Keep ``conn`` (and its cursor) warm, if there is room."""
        with self._lock:
            if len(self._warm) < self.WARM_MAX:
                self._warm.append((time.monotonic(), conn, cur))
                return True
        return False


class Connections(_Source[sa.Engine, sa.Connection]):
    """Connections of ``engine`` for :func:`~.driver.run_sync` (blocking I/O)."""

    def __init__(self, engine: sa.Engine, side: Callable[[], sa.Engine] | None = None) -> None:
        super().__init__(engine, side)
        sa.event.listen(engine, "engine_disposed", self._on_dispose)

    def _on_dispose(self, _engine: sa.Engine) -> None:
        # The old pool is gone: giving these back would leak them.
        for conn in self.drain():
            conn.invalidate()
            conn.close()

    def close(self) -> None:
        """Give the warm connections back to the pool."""
        for conn in self.drain():
            untime(conn)
            conn.close()


class AsyncConnections(_Source["AsyncEngine", "AsyncConnection"]):
    """Connections of ``engine`` for :func:`~.driver.run_async` (asyncio)."""

    def __init__(self, engine: AsyncEngine, side: Callable[[], AsyncEngine] | None = None) -> None:
        super().__init__(engine, side)
        sa.event.listen(engine.sync_engine, "engine_disposed", self._on_dispose)

    def _on_dispose(self, _engine: sa.Engine) -> None:
        # Runs inside AsyncEngine.dispose()'s greenlet, where the sync facade can
        # close a connection of the async driver.
        for conn in self.drain():
            sync = conn.sync_connection
            if sync is not None:
                sync.invalidate()
                sync.close()

    async def aclose(self) -> None:
        """Give the warm connections back to the pool."""
        for conn in self.drain():
            await auntime(conn)
            await conn.close()
