"""Operations written once, as generators, and run by a sync or an async driver.

Each public operation of :class:`Memory` / :class:`AsyncMemory` is a generator
("flow") that yields requests and receives their results:

- :class:`Sql` — run a statement in the operation's transaction; receive rows;
- :class:`Embed` — embed texts with the configured embedder; receive vectors;
- :class:`Migrate` — bring the schema up to date (outside the transaction).

The flow holds all the logic (validation, SQL choice, ranking, dedup); the two
drivers below hold only I/O. This is httpx's ``Auth.auth_flow`` pattern applied to
a whole operation, and it is why ``Memory`` and ``AsyncMemory`` cannot drift apart.
The transaction opens at the first ``Sql`` request, so embedding (slow) happens
before any connection is held, and it commits when the flow returns.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ..embeddings import Embedder
from ..storage import migrate
from ..storage.engine import db_errors

R = TypeVar("R")


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


@dataclass(frozen=True)
class Embed:
    texts: Sequence[str]


@dataclass(frozen=True)
class Migrate:
    pass


Request = Sql | Embed | Migrate
Flow = Generator[Request, Any, R]


def _execute(conn: sa.Connection, req: Sql) -> list[dict[str, Any]]:
    result = conn.execute(req.statement, req.params)
    if req.fetch == "all" and result.returns_rows:
        return [dict(row) for row in result.mappings()]
    return []


def run_sync(flow: Flow[R], engine: sa.Engine, embedder: Embedder) -> R:
    """Drive a flow with blocking I/O."""
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
                    reply = embedder.embed(req.texts) if req.texts else []
                elif isinstance(req, Migrate):
                    with engine.connect() as mconn:
                        migrate.upgrade(mconn)
                    reply = None
                else:
                    if conn is None:
                        conn = engine.connect()
                        if req.autocommit:
                            conn.execution_options(isolation_level="AUTOCOMMIT")
                    reply = _execute(conn, req)
    finally:
        flow.close()
        if conn is not None:
            conn.close()  # rolls back anything not committed


async def run_async(flow: Flow[R], engine: AsyncEngine, embedder: Embedder) -> R:
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
                    reply = await embedder.aembed(req.texts) if req.texts else []
                elif isinstance(req, Migrate):
                    async with engine.connect() as mconn:
                        await mconn.run_sync(migrate.upgrade)
                    reply = None
                else:
                    if conn is None:
                        conn = await engine.connect()
                        if req.autocommit:
                            await conn.execution_options(isolation_level="AUTOCOMMIT")
                    result = await conn.execute(req.statement, req.params)
                    if req.fetch == "all" and result.returns_rows:
                        reply = [dict(row) for row in result.mappings()]
                    else:
                        reply = []
    finally:
        flow.close()
        if conn is not None:
            await conn.close()
