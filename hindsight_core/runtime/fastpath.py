"""The fast path: flows that need no transaction, on warm pooled connections.

Most calls of a memory, an item store or a checkpointer are one statement (a get,
a search, a put). Through the generic drivers (``flow.run_sync`` / ``run_async``)
each costs a pool checkout with a pre-ping round trip, BEGIN and COMMIT round
trips, and SQLAlchemy's execution layer. Flows whose statements are each a unit of
work can instead run here:

- statements run in autocommit mode, straight on the pooled psycopg connection
  (``%(name)s`` text compiled once per statement and cached);
- psycopg prepares a statement on the server after ``PREPARE_THRESHOLD`` runs on a
  connection (no re-planning of the long recall query);
- connections used within the last ``KEEP_WARM`` seconds stay checked out (at most
  ``WARM_MAX``) and are reused without a ping, with their cursor (a cursor's
  adapters cache its parameter dumpers: a new one cost ~0.015 ms of a checkpoint put
  and ~0.025 ms of a recall); the rows of its last result are freed when the flow
  ends, so a kept cursor holds no result in memory;
- a warm connection found broken is dropped and the whole flow retried once on a
  fresh, pinged connection; other errors are mapped to :mod:`hindsight_core.errors`.

Warm connections remain connections of the engine's pool: ``close()`` gives them
back, and disposing of the engine closes them. The connection is taken at the
flow's first ``Sql`` request, so embedding a query holds no connection.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Generic, TypeVar

import psycopg
import sqlalchemy as sa
from psycopg.rows import RowMaker
from sqlalchemy.dialects.postgresql import psycopg as pg_psycopg
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..embeddings import Embedder
from ..errors import (
    HindsightError,
)
from ..storage.engine import db_errors, translate_db_error
from .flow import Embed, Flow, Sql, embed_async, embed_sync

__all__ = ["AsyncWarmConnections", "WarmConnections", "driver_error", "pyformat"]

_DIALECT = pg_psycopg.dialect()
C = TypeVar("C", sa.Connection, AsyncConnection)
K = TypeVar("K", psycopg.Cursor[Any], psycopg.AsyncCursor[Any])
MakeFlow = Callable[[], Flow[Any]]


@lru_cache(maxsize=1024)
def pyformat(statement: sa.TextClause) -> str:
    """A ``sa.text()`` statement as psycopg runs it (``%(name)s`` parameters)."""
    return str(statement.compile(dialect=_DIALECT))


def driver_error(exc: psycopg.Error) -> HindsightError:
    """Map a psycopg error to Hindsight's hierarchy (``storage.engine.translate_db_error``)."""
    return translate_db_error(exc)


def _driver(conn: sa.Connection | AsyncConnection) -> Any:
    # Connected already: reaching the driver does no I/O (and needs no greenlet).
    sync = conn.sync_connection if isinstance(conn, AsyncConnection) else conn
    return None if sync is None else sync.connection.driver_connection


def _broken(exc: BaseException, conn: sa.Connection | AsyncConnection) -> bool:
    """Whether ``exc`` on ``conn`` means the connection is unusable (not the statement)."""
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) and not exc.sqlstate:
        return True
    try:
        driver = _driver(conn)
    except Exception:  # noqa: BLE001 - a closed/invalidated facade: broken
        return True
    return driver is None or bool(driver.closed or driver.broken)


class _Warm(Generic[C, K]):
    """The list of warm connections (with their kept cursor or None), shared by the
    sync and async variants."""

    KEEP_WARM = 10.0
    WARM_MAX = 2

    def __init__(self) -> None:
        self._warm: list[tuple[float, C, K | None]] = []
        self._lock = threading.Lock()

    def drain(self) -> list[C]:
        """Forget every warm connection; the caller gives them back or closes them."""
        with self._lock:
            conns = [c for _, c, _ in self._warm]
            self._warm.clear()
        return conns

    def _take(self) -> tuple[C | None, K | None, list[C]]:
        """A warm connection and its cursor (or None), and the cold connections to give
        back to the pool."""
        now = time.monotonic()
        with self._lock:
            cold = [c for used, c, _ in self._warm if now - used >= self.KEEP_WARM]
            self._warm = [w for w in self._warm if now - w[0] < self.KEEP_WARM]
            if not self._warm:
                return None, None, cold
            _, conn, cur = self._warm.pop()
            return conn, cur, cold

    def _keep(self, conn: C, cur: K | None) -> bool:
        with self._lock:
            if len(self._warm) < self.WARM_MAX:
                self._warm.append((time.monotonic(), conn, cur))
                return True
        return False


def _release(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> None:
    """Free the rows of the cursor's last result (libpq's memory; the caller has its
    own copy), so that a cursor kept with its warm connection holds no large read."""
    res = cur.pgresult
    if res is not None and res.ntuples:
        res.clear()


class WarmConnections(_Warm[sa.Connection, psycopg.Cursor[Any]]):
    """Run flows on recently used autocommit connections of ``engine`` (blocking I/O)."""

    def __init__(self, engine: sa.Engine) -> None:
        super().__init__()
        self.engine = engine
        sa.event.listen(engine, "engine_disposed", self._on_dispose)

    def _on_dispose(self, _engine: sa.Engine) -> None:
        # The old pool is gone: giving these back would leak them.
        for conn in self.drain():
            conn.invalidate()
            conn.close()

    def close(self) -> None:
        """Give the warm connections back to the pool."""
        for conn in self.drain():
            conn.close()

    def _connect(self) -> sa.Connection:
        with db_errors():
            conn = self.engine.connect()
            conn.execution_options(isolation_level="AUTOCOMMIT")
        return conn

    def run(self, make: MakeFlow, embedder: Embedder) -> Any:
        """Run ``make()``'s flow; on a broken warm connection, once more on a fresh one."""
        conn, cur, cold = self._take()
        for c in cold:
            c.close()
        if conn is not None:
            try:
                return self._drive(make(), conn, cur, embedder)
            except _Retry:
                pass
        return self._drive(make(), None, None, embedder)

    def _drive(self, flow: Flow[Any], conn: sa.Connection | None,
               cur: psycopg.Cursor[Any] | None, embedder: Embedder) -> Any:
        warm = conn is not None
        reply: Any = None
        try:
            while True:
                try:
                    req = flow.send(reply)
                except StopIteration as stop:
                    if conn is not None:
                        if cur is not None:
                            _release(cur)
                        if not self._keep(conn, cur):
                            conn.close()
                        conn = None
                    return stop.value
                if isinstance(req, Embed):
                    reply = embed_sync(embedder, req)
                    continue
                if not isinstance(req, Sql):  # pragma: no cover - only once set up
                    raise AssertionError(f"unexpected request {req!r} on the fast path")
                if conn is None:
                    conn = self._connect()
                if cur is None:
                    cur = _driver(conn).cursor(row_factory=_dict_rows)
                try:
                    reply = _execute(cur, req)
                except psycopg.Error as exc:
                    error = driver_error(exc)
                    if _broken(exc, conn):
                        conn.invalidate()
                        if warm:
                            raise _Retry(error) from exc
                    raise error from exc
        finally:
            flow.close()
            if conn is not None:  # an error: not kept warm
                conn.close()


def _dict_rows(cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]
               ) -> RowMaker[dict[str, Any]]:
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


def _has_rows(cur: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any]) -> bool:
    """Whether the statement returned a row set (``cur.description`` without building
    its ``Column`` objects: ~0.04 ms for a recall's 25 columns)."""
    res = cur.pgresult
    return res is not None and res.nfields > 0


def _execute(cur: psycopg.Cursor[dict[str, Any]], req: Sql) -> list[dict[str, Any]]:
    sql = pyformat(req.statement)
    if isinstance(req.params, list):
        cur.executemany(sql, req.params)
        return []
    cur.execute(sql, req.params)
    return cur.fetchall() if req.fetch == "all" and _has_rows(cur) else []


class _Retry(Exception):
    """A warm connection was found broken: run the flow again on a fresh one."""

    def __init__(self, error: HindsightError) -> None:
        super().__init__(str(error))
        self.error = error


class AsyncWarmConnections(_Warm[AsyncConnection, psycopg.AsyncCursor[Any]]):
    """:class:`WarmConnections` for asyncio (psycopg's async driver)."""

    def __init__(self, engine: AsyncEngine) -> None:
        super().__init__()
        self.engine = engine
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
            await conn.close()

    async def _connect(self) -> AsyncConnection:
        with db_errors():
            conn = await self.engine.connect()
            try:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
            except BaseException:
                await conn.close()
                raise
        return conn

    async def run(self, make: MakeFlow, embedder: Embedder) -> Any:
        """Run ``make()``'s flow; on a broken warm connection, once more on a fresh one."""
        conn, cur, cold = self._take()
        for c in cold:
            await c.close()
        if conn is not None:
            try:
                return await self._drive(make(), conn, cur, embedder)
            except _Retry:
                pass
        return await self._drive(make(), None, None, embedder)

    async def _drive(self, flow: Flow[Any], conn: AsyncConnection | None,
                     cur: psycopg.AsyncCursor[Any] | None, embedder: Embedder) -> Any:
        warm = conn is not None
        reply: Any = None
        try:
            while True:
                try:
                    req = flow.send(reply)
                except StopIteration as stop:
                    if conn is not None:
                        if cur is not None:
                            _release(cur)
                        if not self._keep(conn, cur):
                            await conn.close()
                        conn = None
                    return stop.value
                if isinstance(req, Embed):
                    reply = await embed_async(embedder, req)
                    continue
                if not isinstance(req, Sql):  # pragma: no cover - only once set up
                    raise AssertionError(f"unexpected request {req!r} on the fast path")
                if conn is None:
                    conn = await self._connect()
                if cur is None:
                    cur = _driver(conn).cursor(row_factory=_dict_rows)
                try:
                    sql = pyformat(req.statement)
                    if isinstance(req.params, list):
                        await cur.executemany(sql, req.params)
                        reply = []
                    else:
                        await cur.execute(sql, req.params)
                        reply = (await cur.fetchall()
                                 if req.fetch == "all" and _has_rows(cur) else [])
                except psycopg.Error as exc:
                    error = driver_error(exc)
                    if _broken(exc, conn):
                        await conn.invalidate()
                        if warm:
                            raise _Retry(error) from exc
                    raise error from exc
        finally:
            flow.close()
            if conn is not None:
                await conn.close()
