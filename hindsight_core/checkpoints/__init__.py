"""Checkpoint storage for graph runtimes (LangGraph's checkpointer sits on it).

The core deals in bytes and JSON only: a checkpoint is a JSON object, its channel
values that are not stored inline are ``(channel, version, type, bytes)`` blobs,
and pending writes are ``(idx, channel, type, bytes)``. Serialization of framework
objects is the adapter's job (``hindsight_adapters.langgraph.checkpoint``).

Each operation is a flow (``flows.py``; see ``runtime/flow.py``), and each method is
written once, as the flow it runs (``put = _Method(put_flow)``): :class:`Checkpoints`
(sync) and :class:`AsyncCheckpoints` (asyncio) share them and differ only in how a
call is carried out (``_call``), on the pool of a
:class:`~hindsight_core.Memory` / :class:`~hindsight_core.AsyncMemory`. The flows of
one statement say ``autocommit`` and run on warm connections (one round trip each;
``runtime/connections.py``); the others in a transaction.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from types import MethodType
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar, overload

from ..embeddings.base import NoEmbedder
from ..runtime.connections import AsyncConnections, Connections
from ..runtime.driver import run_async, run_sync
from ..runtime.flow import Flow, MakeFlow, Migrate
from .flows import (
    PRUNE_STRATEGIES,
    BlobIn,
    CheckpointRow,
    WriteIn,
    copy_thread_flow,
    delete_for_runs_flow,
    delete_threads_flow,
    get_flow,
    list_flow,
    prune_flow,
    put_flow,
    put_writes_flow,
    thread_stats_flow,
)

__all__ = [
    "PRUNE_STRATEGIES",
    "AsyncCheckpoints",
    "BlobIn",
    "CheckpointRow",
    "Checkpoints",
    "WriteIn",
]

if TYPE_CHECKING:
    from ..runtime.host import AsyncFlowHost, FlowHost

_NO_EMBEDDER = NoEmbedder("checkpoints are not embedded")  # checkpoint flows never embed
CHECKPOINTS_KEY = "\x00checkpoints"  # read-your-writes session of a memory's checkpoints
P = ParamSpec("P")
R = TypeVar("R")


class _Method(Generic[P, R]):
    """A method written once, as the flow it runs: on :class:`Checkpoints` a function
    that returns the flow's result, on :class:`AsyncCheckpoints` a coroutine function
    (each front end's ``_call`` carries it out; ``read``: on a read replica when
    configured). The bound method is kept on the instance, so a call after the first
    costs no more than a plain method's."""

    def __init__(self, flow: Callable[P, Flow[R]], *, read: bool = False) -> None:
        self.flow = flow
        self.read = read
        self.name = flow.__name__.removesuffix("_flow")
        self.__doc__ = flow.__doc__
        self._functions: dict[type, Callable[..., Any]] = {}

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type) -> Callable[..., Any]: ...
    @overload
    def __get__(self, obj: Checkpoints, owner: type) -> Callable[P, R]: ...
    @overload
    def __get__(
        self, obj: AsyncCheckpoints, owner: type
    ) -> Callable[P, Coroutine[Any, Any, R]]: ...

    def __get__(self, obj: Any, owner: type) -> Any:
        function = self._functions.get(owner)
        if function is None:
            function = self._functions[owner] = self._function(owner)
        if obj is None:
            return function
        bound = obj.__dict__[self.name] = MethodType(function, obj)
        return bound

    def _function(self, owner: type) -> Callable[..., Any]:
        flow, read = self.flow, self.read
        if issubclass(owner, AsyncCheckpoints):

            async def method(self: Any, /, *args: Any, **kwargs: Any) -> Any:
                return await self._call(functools.partial(flow, *args, **kwargs), read)
        else:

            def method(self: Any, /, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
                return self._call(functools.partial(flow, *args, **kwargs), read)

        functools.update_wrapper(method, flow)
        method.__name__, method.__qualname__ = self.name, f"{owner.__name__}.{self.name}"
        return method


# ---------------------------------------------------------------------- front ends


class _Base:
    """Set-up state and the connections (warm ones kept: ``runtime/connections.py``)."""

    _migrated: bool
    _pool: Connections | AsyncConnections | None = None

    def _ready(self) -> Flow[None]:
        if not self._migrated:
            yield Migrate()
            self._migrated = True

    put = _Method(put_flow)
    put_writes = _Method(put_writes_flow)
    get = _Method(get_flow, read=True)
    list = _Method(list_flow, read=True)
    delete_threads = _Method(delete_threads_flow)
    delete_for_runs = _Method(delete_for_runs_flow)
    copy_thread = _Method(copy_thread_flow)
    prune = _Method(prune_flow)
    thread_stats = _Method(thread_stats_flow, read=True)


class Checkpoints(_Base):
    """Checkpoint storage on the connection pool of a :class:`Memory` (blocking I/O).

    Args:
        memory: whose engine (pool) and settings to use; it is not closed here.
    """

    def __init__(self, memory: FlowHost) -> None:
        self.memory = memory
        self._migrated = False
        self._pool: Connections | None = None

    def _call(self, make: MakeFlow[R], read: bool) -> R:
        """Run ``make()``'s flow: a ``read`` on a read replica when configured; after a
        write, with read replicas, the WAL position is noted (read-your-writes)."""
        reads = self.memory.replica_reads() if read and self._migrated else None
        if reads is not None:
            return reads.run(make, _NO_EMBEDDER, CHECKPOINTS_KEY, lambda: self._primary(make))
        result = self._primary(make)
        if not read:
            self.memory.note_write(CHECKPOINTS_KEY)
        return result

    def _primary(self, make: Flow[R] | MakeFlow[R]) -> R:
        if not self._migrated:
            self.setup()
        self._pool = Connections.of(self._pool, self.memory.engine)
        return run_sync(make, self._pool, _NO_EMBEDDER)

    def close(self) -> None:
        """Return the warm connections to the pool."""
        if self._pool is not None:
            self._pool.close()

    def setup(self) -> None:
        """Apply migrations (idempotent; also done on first use)."""
        self._migrated = False
        self._pool = Connections.of(self._pool, self.memory.engine)
        run_sync(self._ready(), self._pool, _NO_EMBEDDER)


class AsyncCheckpoints(_Base):
    """:class:`Checkpoints` for asyncio code, on an :class:`AsyncMemory`'s pool."""

    def __init__(self, memory: AsyncFlowHost) -> None:
        self.memory = memory
        self._migrated = False
        self._pool: AsyncConnections | None = None

    async def _call(self, make: MakeFlow[R], read: bool) -> R:
        reads = self.memory.replica_reads() if read and self._migrated else None
        if reads is not None:
            return await reads.run(make, _NO_EMBEDDER, CHECKPOINTS_KEY, lambda: self._primary(make))
        result = await self._primary(make)
        if not read:
            await self.memory.note_write(CHECKPOINTS_KEY)
        return result

    async def _primary(self, make: Flow[R] | MakeFlow[R]) -> R:
        if not self._migrated:
            await self.setup()
        return await run_async(make, await self._connections(), _NO_EMBEDDER)

    async def _connections(self) -> AsyncConnections:
        self._pool = AsyncConnections.of(self._pool, await self.memory.get_engine())
        return self._pool

    async def aclose(self) -> None:
        """Return the warm connections to the pool."""
        if self._pool is not None:
            await self._pool.aclose()

    async def setup(self) -> None:
        self._migrated = False
        await run_async(self._ready(), await self._connections(), _NO_EMBEDDER)
