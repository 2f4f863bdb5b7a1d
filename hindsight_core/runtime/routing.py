"""Reads on replicas: the I/O that carries out ``storage.replicas.ReadRouter`` plans.

:class:`ReplicaReads` (blocking) and :class:`AsyncReplicaReads` (asyncio) hold one
lazily built pool per replica (``connections.py``) and drive a read plan: probe a
replica, pause, run the read there, or run it on the primary. The decisions (which
replica, how long to wait, when to skip) are the router's, written once; these
classes only do what the steps say, each step with the flow driver of their I/O style
(a read flow whose first statement says ``autocommit`` runs on a warm connection).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar, cast

from ..embeddings import Embedder
from ..errors import DatabaseError
from ..settings import Settings
from ..storage.engine import create_async, create_sync_engine
from ..storage.replicas import REPLICA_STATE, WRITE_LSN, Pause, Primary, Probe, ReadRouter, Step
from .connections import AsyncConnections, Connections
from .driver import Plan, run_async, run_sync
from .flow import Flow, MakeFlow, Sql

__all__ = ["AsyncReplicaReads", "ReplicaReads", "write_lsn_flow"]

R = TypeVar("R")
P = TypeVar("P", Connections, AsyncConnections)


def write_lsn_flow() -> Flow[int]:
    """The primary's WAL insert position, read after a write committed."""
    rows = yield from Sql(WRITE_LSN, autocommit=True)
    return int(rows[0]["lsn"])


def _probe_flow() -> Flow[dict[str, Any]]:
    rows = yield from Sql(REPLICA_STATE, autocommit=True)
    return rows[0]


class _Pools(Generic[P]):
    """The router and one pool (engine + warm connections) per replica, built on
    first use."""

    def __init__(self, settings: Settings, urls: list[str]) -> None:
        self.router = ReadRouter(settings, urls)
        self.settings = settings
        self._pools: list[P | None] = [None] * len(urls)
        self._lock = threading.Lock()

    def _build(self, url: str) -> P:  # pragma: no cover - per variant
        raise NotImplementedError

    def pool(self, index: int) -> P:
        with self._lock:
            pool = self._pools[index]
            if pool is None:
                pool = self._pools[index] = self._build(self.router.urls[index])
            return pool

    def _taken(self) -> list[P]:
        with self._lock:
            pools = [p for p in self._pools if p is not None]
            self._pools = [None] * len(self._pools)
        return pools

    def _plan(self, key: str | None) -> Plan[Step, Any]:
        """The router's plan for a read of ``key``, stepped by :meth:`run`; a step's
        :class:`DatabaseError` goes back into it (``plan.error``)."""
        return Plan(self.router.plan(key))

    def _flow(self, step: Step, make: MakeFlow[Any]) -> MakeFlow[Any]:
        """What runs on the replica for a probe or read step."""
        return _probe_flow if isinstance(step, Probe) else make


class ReplicaReads(_Pools[Connections]):
    """Replica pools of a :class:`~hindsight_core.Memory` (blocking I/O)."""

    def _build(self, url: str) -> Connections:
        return Connections(create_sync_engine(self.settings, url))

    def close(self) -> None:
        """Close every replica pool."""
        for conns in self._taken():
            conns.close()
            conns.engine.dispose()

    def run(
        self, make: MakeFlow[R], embedder: Embedder, key: str | None, primary: Callable[[], R]
    ) -> R:
        """Run ``make()``'s read flow where the router says; ``primary`` runs it on the
        primary."""
        plan = self._plan(key)
        for step in plan:
            if isinstance(step, Primary):
                plan.reply = primary()
            elif isinstance(step, Pause):
                time.sleep(step.seconds)  # bounded by the router's deadline
            else:
                try:
                    plan.reply = run_sync(self._flow(step, make), self.pool(step.index), embedder)
                except DatabaseError as exc:
                    plan.error = exc
        return cast(R, plan.result)


class AsyncReplicaReads(_Pools[AsyncConnections]):
    """:class:`ReplicaReads` for an :class:`~hindsight_core.AsyncMemory` (asyncio)."""

    def _build(self, url: str) -> AsyncConnections:
        return AsyncConnections(create_async(self.settings, url))

    async def aclose(self) -> None:
        """Close every replica pool."""
        for conns in self._taken():
            await conns.aclose()
            await conns.engine.dispose()

    async def run(
        self,
        make: MakeFlow[R],
        embedder: Embedder,
        key: str | None,
        primary: Callable[[], Awaitable[R]],
    ) -> R:
        """:meth:`ReplicaReads.run`, awaited."""
        plan = self._plan(key)
        for step in plan:
            if isinstance(step, Primary):
                plan.reply = await primary()
            elif isinstance(step, Pause):
                await asyncio.sleep(step.seconds)  # bounded by the router's deadline
            else:
                try:
                    plan.reply = await run_async(
                        self._flow(step, make), self.pool(step.index), embedder
                    )
                except DatabaseError as exc:
                    plan.error = exc
        return cast(R, plan.result)
