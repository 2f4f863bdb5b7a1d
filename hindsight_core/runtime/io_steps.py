"""The I/O of the two drivers (``driver.py``): one short method per step, blocking or awaited.

:func:`driver._drive` decides every step and its argument; :class:`SyncIO` carries a
step out by calling, :class:`AsyncIO` by awaiting. Nothing here decides anything:
the two classes differ only in how they wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ..embeddings import Embedder
from ..storage.engine import SET_LOCAL_TIMEOUT
from .connections import AsyncConnections, Connections
from .cursors import afetch, auntime, fetch, untime
from .flow import Embed, Flow, Rows, Sql, embed_async, embed_sync

if TYPE_CHECKING:  # loads the ORM: imported with the first async engine (storage.engine)
    from sqlalchemy.ext.asyncio import AsyncConnection

__all__ = ["AsyncIO", "SyncIO"]


def _execute(conn: sa.Connection, req: Sql) -> Rows:
    if req.timeout_ms is not None:  # until the transaction ends
        conn.execute(SET_LOCAL_TIMEOUT, {"ms": str(req.timeout_ms)})
    result = conn.execute(req.statement, req.params)
    if req.fetch == "all" and result.returns_rows:
        return [dict(row) for row in result.mappings()]
    return []


async def _aexecute(conn: AsyncConnection, req: Sql) -> Rows:
    if req.timeout_ms is not None:
        await conn.execute(SET_LOCAL_TIMEOUT, {"ms": str(req.timeout_ms)})
    result = await conn.execute(req.statement, req.params)
    if req.fetch == "all" and result.returns_rows:
        return [dict(row) for row in result.mappings()]
    return []


class SyncIO:
    """The blocking I/O of one run: each method is one step of :func:`_drive`."""

    __slots__ = ("conns", "embedder")

    def __init__(self, conns: Connections, embedder: Embedder) -> None:
        self.conns = conns
        self.embedder = embedder

    def embed(self, req: Embed) -> list[list[float]]:
        return embed_sync(self.embedder, req)

    def migrate(self, conn: sa.Connection) -> None:
        from ..storage import migrate  # Alembic: loaded by set-up only

        try:
            migrate.upgrade(conn)
        finally:
            conn.close()

    def unit(self, arg: tuple[Flow[Any], bool]) -> Any:
        from .driver import run_sync  # the driver imports this module

        flow, patient = arg
        return run_sync(flow, self.conns, self.embedder, patient=patient)

    def connect(self, autocommit: bool) -> sa.Connection:
        conn = self.conns.engine.connect()
        if autocommit:
            conn.execution_options(isolation_level="AUTOCOMMIT")
        return conn

    def execute(self, arg: tuple[sa.Connection, Sql]) -> Rows:
        return _execute(*arg)

    def fetch(self, arg: tuple[Any, Sql]) -> Rows:
        return fetch(*arg)

    def side(self, _: None) -> sa.Connection | None:
        engine = self.conns.side()
        try:
            return None if engine is None else engine.connect()
        except sa.exc.TimeoutError:  # the side pool is in use: run in the transaction
            return None

    def compute(self, arg: tuple[Callable[[int, Rows], Sql | None], int, Rows]) -> Sql | None:
        step, k, rows = arg
        return step(k, rows)

    def start(self, arg: tuple[sa.Connection, Sql]) -> Future[Rows]:
        # A thread of its own: psycopg waits for the server without the GIL, so the
        # flow's next step runs meanwhile.
        pool = ThreadPoolExecutor(max_workers=1)
        try:
            return pool.submit(_execute, *arg)
        finally:
            pool.shutdown(wait=False)

    def start_each(
        self, arg: tuple[sa.Connection, Sequence[Sql | None]]
    ) -> list[Future[Rows] | None]:
        # One thread runs the statements one after another, in order, on ``conn``.
        conn, reqs = arg
        pool = ThreadPoolExecutor(max_workers=1)
        try:
            return [None if req is None else pool.submit(_execute, conn, req) for req in reqs]
        finally:
            pool.shutdown(wait=False)

    def wait(self, started: Future[Rows]) -> Rows:
        return started.result()

    def settle(self, started: Future[Rows]) -> None:
        wait_futures([started])

    def commit(self, conn: sa.Connection) -> None:
        conn.commit()

    def invalidate(self, conn: sa.Connection) -> None:
        conn.invalidate()

    def close(self, conn: sa.Connection) -> None:
        untime(conn)
        conn.close()


class AsyncIO:
    """The asyncio I/O of one run (psycopg's async driver): :class:`SyncIO`, awaited."""

    __slots__ = ("conns", "embedder")

    def __init__(self, conns: AsyncConnections, embedder: Embedder) -> None:
        self.conns = conns
        self.embedder = embedder

    async def embed(self, req: Embed) -> list[list[float]]:
        return await embed_async(self.embedder, req)

    async def migrate(self, conn: AsyncConnection) -> None:
        from ..storage import migrate  # Alembic: loaded by set-up only

        try:
            await conn.run_sync(migrate.upgrade)
        finally:
            await conn.close()

    async def unit(self, arg: tuple[Flow[Any], bool]) -> Any:
        from .driver import run_async  # the driver imports this module

        flow, patient = arg
        return await run_async(flow, self.conns, self.embedder, patient=patient)

    async def connect(self, autocommit: bool) -> AsyncConnection:
        conn = await self.conns.engine.connect()
        try:
            if autocommit:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
        except BaseException:
            await conn.close()
            raise
        return conn

    async def execute(self, arg: tuple[AsyncConnection, Sql]) -> Rows:
        return await _aexecute(*arg)

    async def fetch(self, arg: tuple[Any, Sql]) -> Rows:
        return await afetch(*arg)

    async def side(self, _: None) -> AsyncConnection | None:
        engine = self.conns.side()
        try:
            return None if engine is None else await engine.connect()
        except sa.exc.TimeoutError:  # the side pool is in use: run in the transaction
            return None

    async def compute(self, arg: tuple[Callable[[int, Rows], Sql | None], int, Rows]) -> Sql | None:
        # On a thread, so that the event loop keeps sending and awaiting the write
        # in flight meanwhile.
        step, k, rows = arg
        return await asyncio.to_thread(step, k, rows)

    async def start(self, arg: tuple[AsyncConnection, Sql]) -> asyncio.Task[Rows]:
        return asyncio.ensure_future(_aexecute(*arg))

    async def start_each(
        self, arg: tuple[AsyncConnection, Sequence[Sql | None]]
    ) -> list[asyncio.Task[Rows] | None]:
        # A lock (FIFO) keeps the statements one after another, in order, on ``conn``.
        conn, reqs = arg
        turn = asyncio.Lock()

        async def one(req: Sql) -> Rows:
            async with turn:
                return await _aexecute(conn, req)

        return [None if req is None else asyncio.ensure_future(one(req)) for req in reqs]

    async def wait(self, started: asyncio.Task[Rows]) -> Rows:
        return await started

    async def settle(self, started: asyncio.Task[Rows]) -> None:
        await asyncio.wait([started])

    async def commit(self, conn: AsyncConnection) -> None:
        await conn.commit()

    async def invalidate(self, conn: AsyncConnection) -> None:
        await conn.invalidate()

    async def close(self, conn: AsyncConnection) -> None:
        await auntime(conn)
        await conn.close()
