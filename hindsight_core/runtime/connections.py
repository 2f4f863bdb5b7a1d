"""Where the drivers get connections: one engine's pool, and the warm ones kept from it.

A flow runs either in a transaction on a pooled connection, or, when its first
statement says ``autocommit`` (``flow.Sql``), on a warm autocommit connection: most
calls of a memory, an item store or a checkpointer are one statement (a get, a
search, a put), and a transaction costs each a pool checkout with a pre-ping round
trip, BEGIN and COMMIT round trips, and SQLAlchemy's execution layer. On the warm
strategy (carried out by ``driver.py``; how its statements run: ``cursors.py``):

- connections used within the last ``KEEP_WARM`` seconds stay checked out (at most
  ``WARM_MAX``) and are reused without a ping, with their cursor (whose adapters
  cache their parameter dumpers, which a new cursor resolves again on every call);
- a warm connection found broken (``cursors.broken``) is dropped and the whole flow
  run once more on a fresh, pinged connection;
- each statement timeout (``Sql.timeout_ms``: recall's) keeps its own warm connection
  (:meth:`_Source.take`), so recall and search in turns set nothing.

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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import sqlalchemy as sa

from ..storage.engine import patience
from .cursors import auntime, untime
from .flow import DEADLINE

if TYPE_CHECKING:  # sqlalchemy.ext.asyncio loads the ORM: imported with the first async engine
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

__all__ = ["AsyncConnections", "Connections"]

E = TypeVar("E", sa.Engine, "AsyncEngine")
C = TypeVar("C", sa.Connection, "AsyncConnection")
Self = TypeVar("Self", bound="_Source[Any, Any]")


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
