"""Operations written once, as generators, and what they ask the drivers for.

Each public operation of the core is a generator ("flow") that yields requests and
receives their results:

- :class:`Sql` — run a statement; receive its rows (:data:`Rows`);
- :class:`Embed` — embed queries or documents with the configured embedder; receive vectors;
- :class:`Migrate` — bring the schema up to date (outside the operation's connection);
- :class:`Pipelined` — writes made from reads, the reads running ahead on a side
  connection while the writes run;
- :class:`Unit` — a sub-flow run and committed on its own (set-up), before the rest.

A flow receives a request's reply typed when it delegates to the request with
``yield from`` (each request is a one-step generator): ``rows = yield from Sql(...)``
is a ``list[Row]``, ``vectors = yield from Embed(...)`` a ``list[list[float]]``,
``ok = yield from Unit(flow)`` the sub-flow's result; a bare ``yield`` gets ``Any``.

The flow holds all the logic (validation, SQL choice, ranking, dedup); the drivers
(``driver.py``: one for blocking I/O, one for asyncio) hold only I/O. This is httpx's
``Auth.auth_flow`` pattern applied to a whole operation, and it is why ``Memory`` and
``AsyncMemory`` cannot drift apart. The connection is taken at the first ``Sql`` (or
``Pipelined``) request, and that first statement decides how the flow runs: in a
transaction (committed when the flow returns), or, when it says ``autocommit``, on a
warm autocommit connection. ``Embed`` holds no connection of its own, and ``Migrate`` /
``Unit`` use their own, released before the reply. So a flow that embeds before its
first statement (write, search, an item batch) holds no connection while the model
runs; one that reads first (edit, merge, import) keeps its connection across it.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Executor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import sqlalchemy as sa

from ..embeddings import Embedder
from ..errors import EmbeddingError, HindsightError

R = TypeVar("R")
Row = dict[str, Any]
"""A row of a statement's result, by column name."""
Rows = list[Row]
"""What a :class:`Sql` request receives: its rows (none for ``fetch="none"``)."""


@dataclass(frozen=True)
class Sql:
    """Run ``statement``; ``many`` runs it once per parameter set (executemany).

    ``autocommit=True`` on a flow's first statement runs the flow without a
    transaction, on a warm autocommit connection (``driver.py``): each statement
    commits by itself, which saves the BEGIN and COMMIT round trips. Only for flows
    whose statements are each a complete unit of work (e.g. reads, then one write
    statement). The first statement decides: a flow that started a transaction keeps
    it, whatever later statements say.

    ``timeout_ms`` bounds this statement (PostgreSQL's ``statement_timeout``, in
    milliseconds): in a transaction until it ends; on a warm connection for its session,
    as long as its statements ask for the same (no round trip per call; the others
    run at the engine's timeout, and it is reset before the connection goes back to the
    pool: ``connections.fetch``).
    """

    statement: sa.Executable
    params: dict[str, Any] | list[dict[str, Any]] = field(default_factory=dict)
    fetch: Literal["all", "none"] = "all"
    autocommit: bool = False
    timeout_ms: int | None = None

    def __iter__(self) -> Generator[Sql, Any, list[Row]]:
        """``rows = yield from Sql(...)``: the rows (none with ``fetch="none"``)."""
        rows: list[Row] = yield self
        return rows


@dataclass(frozen=True)
class Embed:
    """Embed ``texts``: search queries when ``query``, else texts to store (records,
    item fields), which dedup compares with each other."""

    texts: Sequence[str]
    query: bool = False

    def __iter__(self) -> Generator[Embed, Any, list[list[float]]]:
        """``vectors = yield from Embed(...)``: one vector per text, in order."""
        vectors: list[list[float]] = yield self
        return vectors

    def run(self, embedder: Embedder) -> list[list[float]]:
        """The vectors, from the embedder's query or document side (sync)."""
        if not self.texts:
            return []
        side = embedder.embed_queries if self.query else embedder.embed_documents
        return side(self.texts)

    async def arun(self, embedder: Embedder) -> list[list[float]]:
        """:meth:`run` for asyncio."""
        if not self.texts:
            return []
        side = embedder.aembed_queries if self.query else embedder.aembed_documents
        return await side(self.texts)


@dataclass(frozen=True)
class Migrate:
    """Bring the schema up to date (on a connection of its own, committed)."""

    def __iter__(self) -> Generator[Migrate, Any, None]:
        """``yield from Migrate()``."""
        yield self


@dataclass(frozen=True)
class Pipelined:
    """Writes in the flow's transaction, each made from the rows of a read, with the
    reads (and the client's work) running while the writes do.

    Stage ``k`` reads ``reads[k]`` (``None``: nothing to read, the rows are ``[]``);
    ``step(k, rows)`` turns those rows into the statement stage ``k`` writes (``None``:
    nothing). Stage ``k + 1``'s read and step run while stage ``k``'s write does: a
    batch's inserts (each an HNSW insert, the batch's costliest step) hide the next slice's
    dedup lookups
    and planning.

    Every read sees the database as it was before the first write: on a side
    connection in autocommit mode (the flow's own writes are not committed yet), or,
    when no side connection is free, all reads in the transaction before the first
    write. So only for reads whose answer is the same outside the transaction (a
    lock keeps other writers out). ``step`` does no I/O;
    the steps run one at a time, in stage order, possibly on another thread. The
    reply is None. Needs a transaction (not a flow that started in autocommit).

    A side read gives up waiting for a lock after a short ``lock_timeout``: queued
    behind DDL (a reindex dropping the index) that waits for this transaction, it
    would wait forever. Then it and the later reads run in the transaction, as
    ``again[k]``: read ``k`` not seeing the transaction's own rows (``xmin``), so the
    rows are those the side connection would have read. Without ``again`` the
    timeout is raised.
    """

    reads: tuple[Sql | None, ...]
    step: Callable[[int, Rows], Sql | None]
    again: tuple[Sql | None, ...] = ()

    def __iter__(self) -> Generator[Pipelined, Any, None]:
        """``yield from Pipelined(...)``."""
        yield self


@dataclass(frozen=True)
class Unit(Generic[R]):
    """Run ``flow`` as a unit of its own, on another connection, committed before the
    reply (its return value) comes back: for set-up that must hold even if the
    operation that triggered it fails afterwards.

    ``gives_up``: when a statement of ``flow`` gave up waiting for a lock (its
    ``lock_timeout``, which ``flow`` sets), the reply is None, nothing of it committed,
    instead of the error: the flow does the work itself, in its transaction.
    """

    flow: Generator[Any, Any, R]
    gives_up: bool = False

    def __iter__(self) -> Generator[Unit[R], Any, R]:
        """``result = yield from Unit(flow)``: the sub-flow's result."""
        result: R = yield self
        return result


Request = Sql | Embed | Migrate | Pipelined | Unit[Any]
Flow = Generator[Request, Any, R]
MakeFlow = Callable[[], Flow[R]]
"""Builds a flow; a driver calls it again to run the flow once more (a retry)."""


def first(flow: Flow[Sequence[R]]) -> Flow[R]:
    """The first of ``flow``'s results (``Memory.write``: the one record's write), so that
    a front end's method returns its runner's call as it is (``twin.py``)."""
    return (yield from flow)[0]


@contextmanager
def embedding_errors(embedder: Embedder) -> Iterator[None]:
    """Re-raise an embedder's failure as :class:`EmbeddingError`, whatever it raised (a
    ``ConnectionError`` came out as "the database cannot be reached", a
    ``RuntimeError`` escaped recall's degradation)."""
    try:
        yield
    except HindsightError:
        raise
    except Exception as exc:  # any failure of the embedder is one
        raise EmbeddingError(
            f"the embedder {getattr(embedder, 'model_name', type(embedder).__name__)} "
            f"failed: {type(exc).__name__}: {exc}"
        ) from exc


def embed_sync(embedder: Embedder, req: Embed) -> list[list[float]]:
    """Answer an :class:`Embed` request (blocking)."""
    with embedding_errors(embedder):
        return req.run(embedder)


async def embed_async(embedder: Embedder, req: Embed) -> list[list[float]]:
    """Answer an :class:`Embed` request (asyncio)."""
    with embedding_errors(embedder):
        return await req.arun(embedder)


DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "hindsight_deadline", default=None
)
"""The caller's deadline (``time.monotonic()``) for the flows run in this context: a
pool checkout waits no longer (``driver._checkout``)."""


def _by(deadline: float, call: Callable[[], R]) -> R:
    DEADLINE.set(deadline)  # in the worker's own context (a copy per task)
    return call()


def run_sync_within(timeout: float, executor: Executor, call: Callable[[], R]) -> R:
    """``call()`` (a flow run by ``driver.run_sync``, directly or through the replica
    router) on a worker thread of ``executor``, waited for at most ``timeout`` seconds
    (then ``TimeoutError``): what ``asyncio.wait_for`` is to ``driver.run_async``.

    Blocking I/O has no deadline of its own: a pool checkout waits ``pool_timeout``, a
    connect ``connect_timeout``, a statement to a server that stopped answering waits
    for TCP. The flow left behind ends by itself when its wait does (its error is
    dropped; a pool checkout waits no longer than the deadline: :data:`DEADLINE`); it
    holds no transaction the caller could see.
    """
    deadline = time.monotonic() + timeout
    future = executor.submit(contextvars.copy_context().run, _by, deadline, call)
    try:
        return future.result(timeout)
    except FutureTimeout:
        future.cancel()  # not started yet (every worker busy): never runs
        raise TimeoutError(f"no answer within {timeout:g} s") from None
