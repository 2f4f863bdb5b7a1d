"""The runners: where a front end's operation runs, and what is noted after it.

Every front end binds its operations the same way. A public method builds the flow
of its operation (a generator over the host's typed context, ``host.py``; its SQL
from ``storage/``) and returns the front end's runner's call of it, one line; the
async front end takes the same method, awaited (``twin.py``)::

    def get(self, record_id, *, namespace=None):                        # Memory
        return self._runner.run_read(lambda: self._get_flow(record_id, namespace), key)

    get = awaited(Memory.get)                                           # AsyncMemory

:class:`SyncRunner` (blocking) and :class:`AsyncRunner` (asyncio) are the only code
that decides where a flow runs, each with the driver of its I/O style
(``driver.run_sync`` / ``driver.run_async``):

- :meth:`~SyncRunner.run`: on the primary (set-up first, if the front end has one);
- :meth:`~SyncRunner.run_read`: on a read replica when replicas are configured and
  the front end is set up (the router picks one fresh enough for ``key``'s
  read-your-writes session, ``storage/replicas.py``), else on the primary; a front
  end not set up yet runs its ``check`` on the primary first, so that its first read
  (a new process's, or the first after the first write) can go to a replica;
- :meth:`~SyncRunner.run_write`: on the primary, then, with replicas, the primary's
  WAL position is noted for ``key``, so that ``key``'s next reads wait for it;
- :meth:`~SyncRunner.call`: an operation of several runs (an item batch whose TTL
  refresh follows a replica read, a recall bounded in time that degrades to no hits),
  written once as a generator of :class:`Run` / :class:`Read` / :class:`Write` /
  :class:`Vectors` requests and stepped here with the driver's :class:`~.driver.Plan`.

A new operation gets its sync and async method by writing its flow once (or its
call, for several runs) and adding the two lines above to the front ends. What an
operation does before its flow runs (checking arguments before connecting, choosing
its key) is written once beside the flow, returning the runner's arguments::

    return self._runner.run_read(*self._search_read(query, ...))

Where a recall runs, end to end: ``Memory.recall`` -> :meth:`SyncRunner.call` of
``RecallFlows._recall_call`` (``memory/read_flows.py``) -> :class:`Read` bounded by
``recall_timeout`` -> :meth:`SyncRunner.run_read` -> replica or primary ->
``driver.run_sync`` runs ``RecallFlows._search_flow``, whose statement is built by
``storage/recall_sql.search_sql`` and its parameters by ``storage/recall_sql.recall_params``
(the hybrid weights shared with items' search: ``storage/hybrid_params.py``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, Self, TypeVar

from .connections import AsyncConnections, Connections
from .driver import Plan, Retry, run_async, run_sync
from .flow import Embed, Flow, MakeFlow, embed_async, embed_sync, run_sync_within
from .host import AsyncFlowHost, FlowHost
from .routing import write_lsn_flow

if TYPE_CHECKING:
    from ..embeddings import Embedder

__all__ = ["AsyncRunner", "Call", "Read", "Run", "SyncRunner", "Vectors", "Write"]

R = TypeVar("R")
C = TypeVar("C")  # the connections of the host's engine


class _Host(Protocol):
    """What a runner asks its host besides its pool: the read replicas."""

    def replica_reads(self) -> object | None: ...


H = TypeVar("H", bound=_Host)  # FlowHost or AsyncFlowHost


class _Request(Generic[R]):
    """A request of a :data:`Call`; ``result = yield from request``: the flow's result."""

    def __iter__(self) -> Generator[Self, Any, R]:
        result: R = yield self
        return result


@dataclass(slots=True)
class Run(_Request[R]):
    """Run ``flow`` on the primary (``retry``: ``driver.Retry``); nothing is noted."""

    flow: Flow[R] | MakeFlow[R]
    retry: Retry | None = None

    def carry(self, runner: SyncRunner | AsyncRunner) -> Any:
        """Carry the request out with ``runner`` (its result, or the awaitable of it)."""
        return runner.run(self.flow, self.retry)


@dataclass(slots=True)
class Read(_Request[R]):
    """Run ``make()``'s read flow on a replica fresh enough for ``key``, else the
    primary; ``within``: give up after so many seconds (``TimeoutError``)."""

    make: MakeFlow[R]
    key: str | None
    within: float | None = None

    def carry(self, runner: SyncRunner | AsyncRunner) -> Any:
        """:meth:`Run.carry`."""
        if self.within is None:
            return runner.run_read(self.make, self.key)
        return runner.run_within(self.within, self.make, self.key)


@dataclass(slots=True)
class Write(_Request[R]):
    """Run ``flow`` on the primary, then note the WAL position for ``key``."""

    flow: Flow[R] | MakeFlow[R]
    key: str | None
    retry: Retry | None = None

    def carry(self, runner: SyncRunner | AsyncRunner) -> Any:
        """:meth:`Run.carry`."""
        return runner.run_write(self.flow, self.key, self.retry)


@dataclass(slots=True)
class Vectors(_Request[list[list[float]]]):
    """Embed ``texts`` with the front end's embedder (search queries when ``query``),
    holding no connection: ``vectors = yield from Vectors([query], query=True)``."""

    texts: Sequence[str]
    query: bool = False

    def carry(self, runner: SyncRunner | AsyncRunner) -> Any:
        """:meth:`Run.carry`."""
        return runner.embed(Embed(self.texts, self.query))


Call = Generator[Run[Any] | Read[Any] | Write[Any] | Vectors, Any, R]
"""An operation of several runs, written once; a run's error is thrown back in at its
``yield`` (so the call may turn it into a result: recall's degradation)."""


class _Steps(Plan[Any, R]):
    """A call's :class:`~.driver.Plan`; ``with steps:`` around carrying out a request
    sends its failure back into the call (``steps.error``), which decides."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> bool:
        if isinstance(exc, Exception):
            self.error = exc
            return True
        return False


def _never() -> bool:
    """A front end that never counts as set up: its reads stay on the primary."""
    return False


class _Runner(Generic[H, C]):
    """What both runners hold: the host (whose pool, settings and replicas the flows
    use), how the front end embeds, whether it is set up (reads go to replicas only
    then), its set-up flow, the side pool, and its connections.

    Args:
        host: the memory whose pool, settings and replicas the flows use.
        embedder: returns the embedder of the front end's flows.
        ready: whether the front end is set up (reads go to replicas only then;
            default: never, every read on the primary).
        setup: the front end's set-up flow, run on the primary before a flow while
            not ``ready`` (checkpoints' migration); ``None``: the flows set up themselves.
        check: the set-up of flows that set up themselves (``Memory.ready_flow``), run
            on the primary before a read while not ``ready`` and with replicas: a read
            goes to a replica only once set up (set-up writes), and without it each
            new front end's first read would stay on the primary; default: ``setup``.
        side: builds the side pool of ``flow.Pipelined`` reads (``Memory``'s).
    """

    def __init__(
        self,
        host: H,
        embedder: Callable[[], Embedder],
        *,
        ready: Callable[[], bool] = _never,
        setup: MakeFlow[None] | None = None,
        check: MakeFlow[None] | None = None,
        side: Callable[[], Any] | None = None,
    ) -> None:
        self._host = host
        self._embedder = embedder
        self._ready = ready
        self._setup = setup
        self._check = check or setup
        self._side = side
        self._conns: C | None = None
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None  # bounded reads (recall)

    def _needs_setup(self) -> bool:
        return self._setup is not None and not self._ready()

    def _check_first(self, reads: object | None) -> MakeFlow[None] | None:
        """The set-up to run on the primary before a read, so that the read may go to
        a replica (with replicas, while not ``ready``), else None."""
        return self._check if reads is not None and not self._ready() else None

    def checks_first(self) -> bool:
        """Whether a read would run ``check`` first (for a :data:`Call` that decides
        with :meth:`routes` where its reads go)."""
        return self._check_first(self._host.replica_reads()) is not None

    def routes(self) -> bool:
        """Whether reads go to read replicas now (configured, and set up)."""
        return self._ready() and self._host.replica_reads() is not None


class SyncRunner(_Runner[FlowHost, Connections]):
    """Runs a front end's flows with blocking I/O on ``host``'s pool (arguments: see
    :class:`_Runner`)."""

    def _connections(self) -> Connections:
        self._conns = Connections.of(self._conns, self._host.engine, self._side)
        return self._conns

    def prepare(self) -> None:
        """Run the set-up flow on the primary now."""
        if self._setup is not None:
            run_sync(self._setup(), self._connections(), self._embedder())

    def run(self, flow: Flow[R] | MakeFlow[R], retry: Retry | None = None) -> R:
        """Run ``flow`` on the primary (``retry``: see ``driver.Retry``)."""
        if self._needs_setup():
            self.prepare()
        return run_sync(flow, self._connections(), self._embedder(), retry)

    def embed(self, req: Embed) -> list[list[float]]:
        """``req``'s vectors from the front end's embedder (an embedder's failure is an
        ``EmbeddingError``), on no connection."""
        return embed_sync(self._embedder(), req)

    def run_read(self, make: MakeFlow[R], key: str | None) -> R:
        """Run ``make()``'s read flow on a replica fresh enough for ``key`` (``None``:
        any), else on the primary."""
        reads = self._host.replica_reads()
        check = self._check_first(reads)
        if check is not None:
            run_sync(check, self._connections(), self._embedder())
        if reads is None or not self._ready():  # e.g. an empty database (ready_flow)
            return self.run(make)
        return reads.run(make, self._embedder(), key, lambda: self.run(make))

    def run_within(self, seconds: float, make: MakeFlow[R], key: str | None) -> R:
        """:meth:`run_read`, given up after ``seconds`` (``TimeoutError``); it runs on a
        thread of its own (``flow.run_sync_within``) so that the caller can stop waiting."""
        return run_sync_within(seconds, self._threads(), lambda: self.run_read(make, key))

    def run_write(
        self, flow: Flow[R] | MakeFlow[R], key: str | None, retry: Retry | None = None
    ) -> R:
        """Run ``flow`` on the primary, then :meth:`note_write` ``key``."""
        result = self.run(flow, retry)
        self.note_write(key)
        return result

    def note_write(self, key: str | None) -> None:
        """With replicas, note the primary's WAL position after a write to ``key`` (a
        namespace key or a session key), so that its next reads wait for a replica
        to replay it; nothing without replicas."""
        reads = self._host.replica_reads()
        if reads is not None:
            reads.router.note_write(key, self.run(write_lsn_flow))

    def call(self, call: Call[R]) -> R:
        """Carry out an operation of several runs (see :data:`Call`)."""
        steps = _Steps(call)
        for req in steps:
            with steps:
                steps.reply = req.carry(self)
        return steps.result

    def _threads(self) -> ThreadPoolExecutor:
        """The threads bounded reads run on (built on first need; as many as the pool
        has connections)."""
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    max_workers=self._host.settings.pool_size, thread_name_prefix="hindsight-recall"
                )
            return self._executor

    def close(self) -> None:
        """Give the warm connections back to the pool, stop the bounded reads' threads."""
        if self._conns is not None:
            self._conns.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


class AsyncRunner(_Runner[AsyncFlowHost, AsyncConnections]):
    """:class:`SyncRunner` with asyncio I/O, on an :class:`AsyncFlowHost`'s pool."""

    async def _connections(self) -> AsyncConnections:
        engine = await self._host.get_engine()
        self._conns = AsyncConnections.of(self._conns, engine, self._side)
        return self._conns

    async def prepare(self) -> None:
        """:meth:`SyncRunner.prepare`, awaited."""
        if self._setup is not None:
            await run_async(self._setup(), await self._connections(), self._embedder())

    async def run(self, flow: Flow[R] | MakeFlow[R], retry: Retry | None = None) -> R:
        """:meth:`SyncRunner.run`, awaited."""
        if self._needs_setup():
            await self.prepare()
        return await run_async(flow, await self._connections(), self._embedder(), retry)

    async def embed(self, req: Embed) -> list[list[float]]:
        """:meth:`SyncRunner.embed`, awaited."""
        return await embed_async(self._embedder(), req)

    async def run_read(self, make: MakeFlow[R], key: str | None) -> R:
        """:meth:`SyncRunner.run_read`, awaited."""
        reads = self._host.replica_reads()
        check = self._check_first(reads)
        if check is not None:
            await run_async(check, await self._connections(), self._embedder())
        if reads is None or not self._ready():
            return await self.run(make)
        return await reads.run(make, self._embedder(), key, lambda: self.run(make))

    async def run_within(self, seconds: float, make: MakeFlow[R], key: str | None) -> R:
        """:meth:`SyncRunner.run_within`: ``asyncio.wait_for``."""
        return await asyncio.wait_for(self.run_read(make, key), seconds)

    async def run_write(
        self, flow: Flow[R] | MakeFlow[R], key: str | None, retry: Retry | None = None
    ) -> R:
        """:meth:`SyncRunner.run_write`, awaited."""
        result = await self.run(flow, retry)
        await self.note_write(key)
        return result

    async def note_write(self, key: str | None) -> None:
        """:meth:`SyncRunner.note_write`, awaited."""
        reads = self._host.replica_reads()
        if reads is not None:
            reads.router.note_write(key, await self.run(write_lsn_flow))

    async def call(self, call: Call[R]) -> R:
        """:meth:`SyncRunner.call`, awaited."""
        steps = _Steps(call)
        for req in steps:
            with steps:
                steps.reply = await req.carry(self)
        return steps.result

    async def aclose(self) -> None:
        """Give the warm connections back to the pool."""
        if self._conns is not None:
            await self._conns.aclose()
