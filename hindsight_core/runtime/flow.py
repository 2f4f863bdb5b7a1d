"""Operations written once, as generators, and run by a sync or an async driver.

Each public operation of :class:`Memory` / :class:`AsyncMemory` is a generator
("flow") that yields requests and receives their results:

- :class:`Sql` — run a statement in the operation's transaction; receive rows;
- :class:`Embed` — embed queries or documents with the configured embedder; receive vectors;
- :class:`Migrate` — bring the schema up to date (outside the transaction);
- :class:`Parallel` — reads that may run at the same time on side connections;
- :class:`Unit` — a sub-flow run and committed on its own (set-up), before the rest.

A flow receives a request's reply typed when it delegates to the request with
``yield from`` (each request is a one-step generator): ``rows = yield from Sql(...)``
is a ``list[Row]``, ``vectors = yield from Embed(...)`` a ``list[list[float]]``,
``ok = yield from Unit(flow)`` the sub-flow's result; a bare ``yield`` gets ``Any``.

The flow holds all the logic (validation, SQL choice, ranking, dedup); the two
drivers below hold only I/O. This is httpx's ``Auth.auth_flow`` pattern applied to
a whole operation, and it is why ``Memory`` and ``AsyncMemory`` cannot drift apart.
The transaction opens at the first ``Sql`` (or ``Parallel``) request and commits when
the flow returns; ``Embed`` holds no connection of its own, and ``Migrate`` / ``Unit``
use their own, released before the reply. So a flow that embeds before its first
statement (write, search, an item batch) holds no connection while the model runs;
one that reads first (edit, merge, import) keeps its transaction open across it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..embeddings import Embedder
from ..errors import EmbeddingError, HindsightError
from ..storage import migrate
from ..storage.engine import db_errors

R = TypeVar("R")
Row = dict[str, Any]
"""A row of a statement's result, by column name."""


@dataclass(frozen=True)
class Sql:
    """Run ``statement``; ``many`` runs it once per parameter set (executemany).

    ``autocommit=True`` on a flow's first statement runs the flow without a
    transaction: each statement commits by itself, which saves the BEGIN and COMMIT
    round trips. Only for flows whose statements are each a complete unit of work
    (e.g. reads, then one write statement). The first statement decides: a flow that
    started a transaction keeps it, whatever later statements say.
    """

    statement: sa.Executable
    params: dict[str, Any] | list[dict[str, Any]] = field(default_factory=dict)
    fetch: Literal["all", "none"] = "all"
    autocommit: bool = False

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
class Parallel:
    """Reads that may run at the same time; the reply is each one's rows, in order.

    The first runs in the flow's transaction, each other one on a side connection in
    autocommit mode (the drivers' ``side`` engine) when one is free at once, else after
    it in the transaction. So only for reads whose answer is the same outside the
    transaction: the flow has written nothing yet and a lock keeps other writers out.
    """

    parts: tuple[Sql, ...]

    def __iter__(self) -> Generator[Parallel, Any, list[list[Row]]]:
        """``found = yield from Parallel(...)``: each part's rows, in order."""
        found: list[list[Row]] = yield self
        return found


@dataclass(frozen=True)
class Unit(Generic[R]):
    """Run ``flow`` as a unit of its own, on another connection, committed before the
    reply (its return value) comes back: for set-up that must hold even if the
    operation that triggered it fails afterwards."""

    flow: Generator[Any, Any, R]

    def __iter__(self) -> Generator[Unit[R], Any, R]:
        """``result = yield from Unit(flow)``: the sub-flow's result."""
        result: R = yield self
        return result


Request = Sql | Embed | Migrate | Parallel | Unit[Any]
Flow = Generator[Request, Any, R]


@contextmanager
def embedding_errors(embedder: Embedder) -> Iterator[None]:
    """Re-raise an embedder's failure as :class:`EmbeddingError`, whatever it raised (a
    ``ConnectionError`` came out as "the database cannot be reached", a
    ``RuntimeError`` escaped recall's degradation)."""
    try:
        yield
    except HindsightError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of the embedder is one
        raise EmbeddingError(
            f"the embedder {getattr(embedder, 'model_name', type(embedder).__name__)} "
            f"failed: {type(exc).__name__}: {exc}") from exc


def embed_sync(embedder: Embedder, req: Embed) -> list[list[float]]:
    """Answer an :class:`Embed` request (blocking)."""
    with embedding_errors(embedder):
        return req.run(embedder)


async def embed_async(embedder: Embedder, req: Embed) -> list[list[float]]:
    """Answer an :class:`Embed` request (asyncio)."""
    with embedding_errors(embedder):
        return await req.arun(embedder)


def _execute(conn: sa.Connection, req: Sql) -> list[dict[str, Any]]:
    result = conn.execute(req.statement, req.params)
    if req.fetch == "all" and result.returns_rows:
        return [dict(row) for row in result.mappings()]
    return []


def _side_connections(side: Callable[[], sa.Engine] | None, wanted: int
                      ) -> list[sa.Connection]:
    """Up to ``wanted`` connections of the side pool (built on first need by ``side``)
    that are free right now."""
    conns: list[sa.Connection] = []
    pool = side() if side is not None and wanted > 0 else None
    while pool is not None and len(conns) < wanted:
        try:
            conns.append(pool.connect())
        except sa.exc.TimeoutError:  # the side pool is in use: run in the transaction
            break
    return conns


def _run_parallel(conn: sa.Connection, side: Callable[[], sa.Engine] | None, req: Parallel
                  ) -> list[list[dict[str, Any]]]:
    extra = _side_connections(side, len(req.parts) - 1)
    try:
        if not extra:
            return [_execute(conn, part) for part in req.parts]
        with ThreadPoolExecutor(max_workers=len(extra)) as pool:
            futures = [pool.submit(_execute, c, part) for c, part in zip(
                extra, req.parts[1:], strict=False)]
            first = [_execute(conn, req.parts[0])]
            done = [f.result() for f in futures]
        return first + done + [_execute(conn, part) for part in req.parts[1 + len(extra):]]
    finally:
        for c in extra:
            c.close()


def run_sync(flow: Flow[R], engine: sa.Engine, embedder: Embedder,
             side: Callable[[], sa.Engine] | None = None) -> R:
    """Drive a flow with blocking I/O (``side``: gives the pool for :class:`Parallel`
    reads, called only when one needs it)."""
    conn: sa.Connection | None = None
    try:
        with db_errors():
            reply: Any = None
            while True:
                try:
                    req = flow.send(reply)
                except StopIteration as stop:
                    if conn is not None:
                        conn.commit()
                    return stop.value  # type: ignore[no-any-return]
                if isinstance(req, Embed):
                    reply = embed_sync(embedder, req)
                elif isinstance(req, Migrate):
                    with engine.connect() as mconn:
                        migrate.upgrade(mconn)
                    reply = None
                elif isinstance(req, Unit):
                    reply = run_sync(req.flow, engine, embedder, side)
                else:
                    if conn is None:
                        conn = engine.connect()
                        if isinstance(req, Sql) and req.autocommit:
                            conn.execution_options(isolation_level="AUTOCOMMIT")
                    reply = (_run_parallel(conn, side, req) if isinstance(req, Parallel)
                             else _execute(conn, req))
    finally:
        flow.close()
        if conn is not None:
            conn.close()  # rolls back anything not committed


def run_sync_within(timeout: float, executor: Executor, call: Callable[[], R]) -> R:
    """``call()`` (a flow run by :func:`run_sync`, directly or through the replica router)
    on a worker thread of ``executor``, waited for at most ``timeout`` seconds (then
    ``TimeoutError``): what ``asyncio.wait_for`` is to :func:`run_async`.

    Blocking I/O has no deadline of its own: a pool checkout waits ``pool_timeout``, a
    connect ``connect_timeout``, a statement to a server that stopped answering waits
    for TCP. The flow left behind ends by itself when its wait does (its error is
    dropped); it holds no transaction the caller could see.
    """
    future = executor.submit(call)
    try:
        return future.result(timeout)
    except FutureTimeout:
        future.cancel()  # not started yet (every worker busy): never runs
        raise TimeoutError(f"no answer within {timeout:g} s") from None


async def _aexecute(conn: AsyncConnection, req: Sql) -> list[dict[str, Any]]:
    result = await conn.execute(req.statement, req.params)
    if req.fetch == "all" and result.returns_rows:
        return [dict(row) for row in result.mappings()]
    return []


async def _aside_connections(side: Callable[[], AsyncEngine] | None, wanted: int
                             ) -> list[AsyncConnection]:
    """:func:`_side_connections` for asyncio."""
    conns: list[AsyncConnection] = []
    pool = side() if side is not None and wanted > 0 else None
    while pool is not None and len(conns) < wanted:
        try:
            conns.append(await pool.connect())
        except sa.exc.TimeoutError:  # the side pool is in use: run in the transaction
            break
    return conns


async def _arun_parallel(conn: AsyncConnection, side: Callable[[], AsyncEngine] | None,
                         req: Parallel) -> list[list[dict[str, Any]]]:
    extra = await _aside_connections(side, len(req.parts) - 1)
    try:
        runs = [_aexecute(conn, req.parts[0])]
        runs += [_aexecute(c, part) for c, part in zip(extra, req.parts[1:], strict=False)]
        # Every read finishes before the side connections close, even if one fails.
        results = await asyncio.gather(*runs, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        done: list[list[dict[str, Any]]] = list(results)  # type: ignore[arg-type]
        return done + [await _aexecute(conn, part) for part in req.parts[1 + len(extra):]]
    finally:
        for c in extra:
            await c.close()


async def run_async(flow: Flow[R], engine: AsyncEngine, embedder: Embedder,
                    side: Callable[[], AsyncEngine] | None = None) -> R:
    """Drive a flow with asyncio I/O (psycopg's async driver)."""
    conn: AsyncConnection | None = None
    try:
        with db_errors():
            reply: Any = None
            while True:
                try:
                    req = flow.send(reply)
                except StopIteration as stop:
                    if conn is not None:
                        await conn.commit()
                    return stop.value  # type: ignore[no-any-return]
                if isinstance(req, Embed):
                    reply = await embed_async(embedder, req)
                elif isinstance(req, Migrate):
                    async with engine.connect() as mconn:
                        await mconn.run_sync(migrate.upgrade)
                    reply = None
                elif isinstance(req, Unit):
                    reply = await run_async(req.flow, engine, embedder, side)
                else:
                    if conn is None:
                        conn = await engine.connect()
                        if isinstance(req, Sql) and req.autocommit:
                            await conn.execution_options(isolation_level="AUTOCOMMIT")
                    reply = (await _arun_parallel(conn, side, req) if isinstance(req, Parallel)
                             else await _aexecute(conn, req))
    finally:
        flow.close()
        if conn is not None:
            await conn.close()
