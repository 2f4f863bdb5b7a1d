"""The I/O of the two drivers (``driver.py``): one short method per kind of step.

:func:`driver._drive` decides every step (``steps.py``); :class:`SyncIO` carries a step
out by calling, :class:`AsyncIO` by awaiting, each method taking its step object.
Nothing here decides anything: the two classes differ only in how they wait.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from ..embeddings import Embedder
from ..storage.engine import SET_LOCAL_TIMEOUT
from . import steps
from .connections import AsyncConnections, Connections
from .cursors import afetch, auntime, fetch, untime
from .flow import Rows, Sql, embed_async, embed_sync

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
    """The blocking I/O of one run: each method carries out one kind of :class:`~.steps.Step`."""

    __slots__ = ("conns", "embedder")

    def __init__(self, conns: Connections, embedder: Embedder) -> None:
        self.conns = conns
        self.embedder = embedder

    def embed(self, step: steps.EmbedTexts) -> list[list[float]]:
        return embed_sync(self.embedder, step.req)

    def migrate(self, step: steps.MigrateOn) -> None:
        from ..storage import migrate  # Alembic: loaded by set-up only

        try:
            migrate.upgrade(step.conn)
        finally:
            step.conn.close()

    def unit(self, step: steps.RunUnit) -> Any:
        from .driver import run_sync  # the driver imports this module

        return run_sync(step.flow, self.conns, self.embedder, patient=step.patient)

    def connect(self, step: steps.Connect) -> sa.Connection:
        conn = self.conns.engine.connect()
        if step.autocommit:
            conn.execution_options(isolation_level="AUTOCOMMIT")
        return conn

    def execute(self, step: steps.Execute) -> Rows:
        return _execute(step.conn, step.req)

    def fetch(self, step: steps.Fetch) -> Rows:
        return fetch(step.cur, step.req)

    def side(self, step: steps.Side) -> sa.Connection | None:
        engine = self.conns.side()
        try:
            return None if engine is None else engine.connect()
        except sa.exc.TimeoutError:  # the side pool is in use: run in the transaction
            return None

    def compute(self, step: steps.Compute) -> Sql | None:
        return step.make(step.k, step.rows)

    def start(self, step: steps.Start) -> Future[Rows]:
        # A thread of its own: psycopg waits for the server without the GIL, so the
        # flow's next step runs meanwhile.
        pool = ThreadPoolExecutor(max_workers=1)
        try:
            return pool.submit(_execute, step.conn, step.req)
        finally:
            pool.shutdown(wait=False)

    def start_each(self, step: steps.StartEach) -> list[Future[Rows] | None]:
        # One thread runs the statements one after another, in order, on ``conn``.
        pool = ThreadPoolExecutor(max_workers=1)
        try:
            return [None if r is None else pool.submit(_execute, step.conn, r) for r in step.reqs]
        finally:
            pool.shutdown(wait=False)

    def wait(self, step: steps.Wait) -> Rows:
        rows: Rows = step.started.result()
        return rows

    def settle(self, step: steps.Settle) -> None:
        wait_futures([step.started])

    def commit(self, step: steps.Commit) -> None:
        step.conn.commit()

    def invalidate(self, step: steps.Invalidate) -> None:
        step.conn.invalidate()

    def close(self, step: steps.Close) -> None:
        untime(step.conn)
        step.conn.close()


class AsyncIO:
    """The asyncio I/O of one run (psycopg's async driver): :class:`SyncIO`, awaited."""

    __slots__ = ("conns", "embedder")

    def __init__(self, conns: AsyncConnections, embedder: Embedder) -> None:
        self.conns = conns
        self.embedder = embedder

    async def embed(self, step: steps.EmbedTexts) -> list[list[float]]:
        return await embed_async(self.embedder, step.req)

    async def migrate(self, step: steps.MigrateOn) -> None:
        from ..storage import migrate  # Alembic: loaded by set-up only

        try:
            await step.conn.run_sync(migrate.upgrade)
        finally:
            await step.conn.close()

    async def unit(self, step: steps.RunUnit) -> Any:
        from .driver import run_async  # the driver imports this module

        return await run_async(step.flow, self.conns, self.embedder, patient=step.patient)

    async def connect(self, step: steps.Connect) -> AsyncConnection:
        conn = await self.conns.engine.connect()
        try:
            if step.autocommit:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
        except BaseException:
            await conn.close()
            raise
        return conn

    async def execute(self, step: steps.Execute) -> Rows:
        return await _aexecute(step.conn, step.req)

    async def fetch(self, step: steps.Fetch) -> Rows:
        return await afetch(step.cur, step.req)

    async def side(self, step: steps.Side) -> AsyncConnection | None:
        engine = self.conns.side()
        try:
            return None if engine is None else await engine.connect()
        except sa.exc.TimeoutError:  # the side pool is in use: run in the transaction
            return None

    async def compute(self, step: steps.Compute) -> Sql | None:
        # On a thread, so that the event loop keeps sending and awaiting the write
        # in flight meanwhile.
        return await asyncio.to_thread(step.make, step.k, step.rows)

    async def start(self, step: steps.Start) -> asyncio.Task[Rows]:
        return asyncio.ensure_future(_aexecute(step.conn, step.req))

    async def start_each(self, step: steps.StartEach) -> list[asyncio.Task[Rows] | None]:
        # A lock (FIFO) keeps the statements one after another, in order, on ``conn``.
        turn = asyncio.Lock()

        async def one(req: Sql) -> Rows:
            async with turn:
                return await _aexecute(step.conn, req)

        return [None if r is None else asyncio.ensure_future(one(r)) for r in step.reqs]

    async def wait(self, step: steps.Wait) -> Rows:
        rows: Rows = await step.started
        return rows

    async def settle(self, step: steps.Settle) -> None:
        await asyncio.wait([step.started])

    async def commit(self, step: steps.Commit) -> None:
        await step.conn.commit()

    async def invalidate(self, step: steps.Invalidate) -> None:
        await step.conn.invalidate()

    async def close(self, step: steps.Close) -> None:
        await auntime(step.conn)
        await step.conn.close()
