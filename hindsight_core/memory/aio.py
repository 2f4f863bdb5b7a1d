"""The asyncio front end: :class:`AsyncMemory` (same API as ``Memory``, awaited).

Its operations are ``Memory``'s methods, awaited (``runtime/twin.py``): each body is
one call of the front end's runner, and this one holds an
:class:`~hindsight_core.runtime.runner.AsyncRunner`. What is its own is the I/O
set-up: the async engine, its side pool and replicas, and closing them.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..runtime.flow import Flow, MakeFlow, R
from ..runtime.routing import AsyncReplicaReads
from ..runtime.runner import AsyncRunner
from ..runtime.twin import awaited
from ..storage.embedded import exit_on_signals
from ..storage.engine import create_async, create_async_side_engine
from ..storage.vectors import adopt_engine
from .inspection import AsyncInspectMethods
from .store_methods import AsyncStoreMethods
from .sync import Memory

if TYPE_CHECKING:  # loads the ORM: imported when the engine is built (storage.engine)
    from sqlalchemy.ext.asyncio import AsyncEngine


class AsyncMemory(AsyncStoreMethods, AsyncInspectMethods):
    """Hindsight memory for asyncio code; see :class:`~hindsight_core.Memory` for the API.

    I/O is natively async (psycopg's async driver); the local embedding model runs
    in a worker thread so the event loop stays responsive.
    """

    def __init__(self, *args: Any, engine: AsyncEngine | None = None, **kwargs: Any) -> None:
        """Arguments as :class:`~hindsight_core.Memory`'s; ``engine``: an async engine to share (not
        disposed of by :meth:`aclose`)."""
        super().__init__(*args, **kwargs)
        self._engine = engine
        self._owns_engine = engine is None
        if engine is not None:
            adopt_engine(engine.sync_engine)
        self._side: AsyncEngine | None = None  # flow.Pipelined reads (write_many's lookups)
        self._reads: AsyncReplicaReads | None = None  # read replicas, when configured
        self._runner = AsyncRunner(
            self,
            lambda: self.embedder,
            ready=lambda: self._ready,
            check=self._read_check_flow,
            side=self._side_engine if self._owns_engine else None,
        )

    async def get_engine(self) -> AsyncEngine:
        """The async engine (connection pool), created on first use off the loop."""
        if self._engine is None:
            if self.database_url is None:
                # From the loop's thread: the worker thread below cannot install handlers.
                exit_on_signals()
            # Resolving the URL may start the embedded server: keep it off the loop.
            loop = asyncio.get_running_loop()
            engine = await loop.run_in_executor(
                None, create_async, self.settings, self._database_url
            )
            if self._engine is None:
                self._engine = engine
            else:
                await engine.dispose()
        return self._engine

    @property
    def engine(self) -> AsyncEngine | None:
        """The async engine, once created (it is created on first use)."""
        return self._engine

    async def run_flow(self, flow: Flow[R] | MakeFlow[R]) -> R:
        """``Memory.run_flow``, awaited."""
        return await self._runner.run(flow)

    def _side_engine(self) -> AsyncEngine:
        """The one-connection pool for ``flow.Pipelined`` reads, built on first need
        (called by the driver, so after ``get_engine``)."""
        if self._side is None:
            assert self._engine is not None
            self._side = create_async_side_engine(self.settings, self._engine)
        return self._side

    def replica_reads(self) -> AsyncReplicaReads | None:
        """The read replicas (``settings.read_database_urls``), or None."""
        if self._reads is None and self._replica_urls():
            self._reads = AsyncReplicaReads(self.settings, self._replica_urls())
        return self._reads

    async def note_write(self, key: str | None) -> None:
        """``Memory.note_write``, awaited."""
        await self._runner.note_write(key)

    async def aclose(self) -> None:
        """Close the connection pool (if this object created it)."""
        await self._runner.aclose()
        if self._reads is not None:
            await self._reads.aclose()
            self._reads = None
        if self._side is not None:
            await self._side.dispose()
            self._side = None
        if self._engine is not None and self._owns_engine:
            await self._engine.dispose()
            self._engine = None

    async def __aenter__(self) -> AsyncMemory:
        """This memory, for ``async with``."""
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Close it (:meth:`aclose`)."""
        await self.aclose()

    # The operations: Memory's, awaited (``runtime/twin.py``): one signature, docstring
    # and body each, run on this memory's AsyncRunner.
    setup = awaited(Memory.setup)
    write = awaited(Memory.write)
    write_many = awaited(Memory.write_many)
    search = awaited(Memory.search)
    recall = awaited(Memory.recall)
    get = awaited(Memory.get)
    list_records = awaited(Memory.list_records)
    mark_used = awaited(Memory.mark_used)
    feedback = awaited(Memory.feedback)
    locate = awaited(Memory.locate)
    forget = awaited(Memory.forget)
    archive = awaited(Memory.archive)
    restore = awaited(Memory.restore)
    set_critical = awaited(Memory.set_critical)
    edit = awaited(Memory.edit)
    merge = awaited(Memory.merge)
    supersede = awaited(Memory.supersede)
    history = awaited(Memory.history)
