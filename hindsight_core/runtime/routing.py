"""Reads on replicas: the I/O that carries out ``storage.replicas.ReadRouter`` plans.

:class:`ReplicaReads` (blocking) and :class:`AsyncReplicaReads` (asyncio) hold one
lazily built pool per replica (with warm connections, ``fastpath.py``) and drive a
read plan: probe a replica, pause, run the read there, or run it on the primary.
The decisions (which replica, how long to wait, when to skip) are the router's,
written once; these classes only do what the steps say.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, TypeVar, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from ..embeddings import Embedder
from ..errors import DatabaseError
from ..settings import Settings
from ..storage.engine import create_async, create_sync_engine
from ..storage.replicas import REPLICA_STATE, WRITE_LSN, Pause, Primary, Probe, ReadRouter, Step
from .fastpath import AsyncWarmConnections, WarmConnections
from .flow import Flow, Sql, run_async, run_sync

__all__ = ["AsyncReplicaReads", "ReplicaReads", "write_lsn_flow"]

R = TypeVar("R")
E = TypeVar("E", sa.Engine, AsyncEngine)
W = TypeVar("W", WarmConnections, AsyncWarmConnections)
_NO_EMBEDDER = cast(Embedder, None)  # probes embed nothing


def write_lsn_flow() -> Flow[int]:
    """The primary's WAL insert position, read after a write committed."""
    rows = yield from Sql(WRITE_LSN, autocommit=True)
    return int(rows[0]["lsn"])


def _probe_flow() -> Flow[dict[str, Any]]:
    rows = yield from Sql(REPLICA_STATE, autocommit=True)
    return rows[0]


def _advance(plan: Generator[Step, Any, Any], reply: Any, error: BaseException | None
             ) -> tuple[Step | None, Any]:
    """The plan's next step (``None`` and the read's result once it is done), given
    the last step's reply or error."""
    try:
        return (plan.throw(error) if error is not None else plan.send(reply)), None
    except StopIteration as stop:
        return None, stop.value


class _Pools(Generic[E, W]):
    """The router and one pool (engine + warm connections) per replica, built on
    first use."""

    def __init__(self, settings: Settings, urls: list[str]) -> None:
        self.router = ReadRouter(settings, urls)
        self.settings = settings
        self._pools: list[tuple[E, W] | None] = [None] * len(urls)
        self._lock = threading.Lock()

    def _build(self, url: str) -> tuple[E, W]:  # pragma: no cover - per variant
        raise NotImplementedError

    def pool(self, index: int) -> tuple[E, W]:
        with self._lock:
            pool = self._pools[index]
            if pool is None:
                pool = self._pools[index] = self._build(self.router.urls[index])
            return pool

    def _taken(self) -> list[tuple[E, W]]:
        with self._lock:
            pools = [p for p in self._pools if p is not None]
            self._pools = [None] * len(self._pools)
        return pools


class ReplicaReads(_Pools[sa.Engine, WarmConnections]):
    """Replica pools of a :class:`~hindsight_core.Memory` (blocking I/O)."""

    def _build(self, url: str) -> tuple[sa.Engine, WarmConnections]:
        engine = create_sync_engine(self.settings, url)
        return engine, WarmConnections(engine)

    def close(self) -> None:
        """Close every replica pool."""
        for engine, warm in self._taken():
            warm.close()
            engine.dispose()

    def run(self, make: Callable[[], Flow[R]], embedder: Embedder, key: str | None,
            primary: Callable[[], R], *, fast: bool) -> R:
        """Run ``make()``'s read flow where the router says; ``primary`` runs it on the
        primary. ``fast``: a flow of autocommit statements (warm connections), else
        it runs in a (read-only) transaction."""
        plan = self.router.plan(key)
        reply: Any = None
        error: BaseException | None = None
        while True:
            step, reply = _advance(plan, reply, error)
            if step is None:
                return cast(R, reply)
            error = None
            if isinstance(step, Primary):
                reply = primary()
            elif isinstance(step, Pause):
                time.sleep(step.seconds)  # bounded by the router's deadline
            else:
                engine, warm = self.pool(step.index)
                try:
                    if isinstance(step, Probe):
                        reply = warm.run(_probe_flow, _NO_EMBEDDER)
                    elif fast:
                        reply = warm.run(make, embedder)
                    else:
                        reply = run_sync(make(), engine, embedder)
                except DatabaseError as exc:
                    error = exc


class AsyncReplicaReads(_Pools[AsyncEngine, AsyncWarmConnections]):
    """:class:`ReplicaReads` for an :class:`~hindsight_core.AsyncMemory` (asyncio)."""

    def _build(self, url: str) -> tuple[AsyncEngine, AsyncWarmConnections]:
        engine = create_async(self.settings, url)
        return engine, AsyncWarmConnections(engine)

    async def aclose(self) -> None:
        """Close every replica pool."""
        for engine, warm in self._taken():
            await warm.aclose()
            await engine.dispose()

    async def run(self, make: Callable[[], Flow[R]], embedder: Embedder, key: str | None,
                  primary: Callable[[], Awaitable[R]], *, fast: bool) -> R:
        """:meth:`ReplicaReads.run`, awaited."""
        plan = self.router.plan(key)
        reply: Any = None
        error: BaseException | None = None
        while True:
            step, reply = _advance(plan, reply, error)
            if step is None:
                return cast(R, reply)
            error = None
            if isinstance(step, Primary):
                reply = await primary()
            elif isinstance(step, Pause):
                await asyncio.sleep(step.seconds)  # bounded by the router's deadline
            else:
                engine, warm = self.pool(step.index)
                try:
                    if isinstance(step, Probe):
                        reply = await warm.run(_probe_flow, _NO_EMBEDDER)
                    elif fast:
                        reply = await warm.run(make, embedder)
                    else:
                        reply = await run_async(make(), engine, embedder)
                except DatabaseError as exc:
                    error = exc
