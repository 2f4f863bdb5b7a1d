"""Recall's timeout without a transaction: ``Sql.timeout_ms`` bounds one statement on
either driver and either connection strategy, and ``recall`` runs on a warm
autocommit connection like ``search`` (no pool checkout, BEGIN or COMMIT per call).

Internals: the drivers (``runtime.driver``, ``runtime.connections``) running flows with
``Sql.timeout_ms``, on purpose."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
import sqlalchemy as sa
from _pool import backends, checkouts, tagged
from sqlalchemy.ext.asyncio import create_async_engine

from hindsight_core import AsyncMemory, Memory
from hindsight_core.errors import DatabaseError
from hindsight_core.runtime.connections import AsyncConnections, Connections
from hindsight_core.runtime.driver import run_async, run_sync
from hindsight_core.runtime.flow import Flow, Rows, Sql

SLEEP = sa.text("SELECT pg_sleep(:s) AS slept")
TIMEOUT = sa.text("SELECT current_setting('statement_timeout') AS t")


def _sleep_flow(autocommit: bool) -> Flow[Rows]:
    return (yield from Sql(SLEEP, {"s": 2}, autocommit=autocommit, timeout_ms=50))


def _settings_flow(autocommit: bool) -> Flow[tuple[str, str]]:
    """The timeout a statement sees with ``timeout_ms``, then the next one's in the flow."""
    bounded = yield from Sql(TIMEOUT, autocommit=autocommit, timeout_ms=1234)
    after = yield from Sql(TIMEOUT, autocommit=autocommit)
    return bounded[0]["t"], after[0]["t"]


def _assert_cancelled_by_timeout(error: BaseException) -> None:
    """The server ended the statement for its timeout (not a client that waited it out)."""
    cause = getattr(error.__cause__, "orig", None) or error.__cause__  # SQLAlchemy's wraps
    assert isinstance(cause, psycopg.errors.QueryCanceled), repr(cause)
    assert cause.sqlstate == "57014"
    assert "statement timeout" in str(cause)


@pytest.fixture
def engine(database_url: str) -> Iterator[sa.Engine]:
    e = sa.create_engine(database_url)
    yield e
    e.dispose()


@pytest.mark.parametrize("autocommit", [True, False])
def test_a_statement_timeout_bounds_that_statement_alone_sync(
    engine: sa.Engine, autocommit: bool
) -> None:
    conns = Connections(engine)
    try:
        with engine.connect() as conn:
            default = conn.execute(TIMEOUT).scalar_one()
        for _ in range(2):  # the second time on the kept (warm) connection
            with pytest.raises(DatabaseError, match="cancelled") as raised:
                run_sync(lambda: _sleep_flow(autocommit), conns, None)  # type: ignore[arg-type]
            _assert_cancelled_by_timeout(raised.value)
            bounded, after = run_sync(lambda: _settings_flow(autocommit), conns, None)  # type: ignore[arg-type]
            assert bounded == "1234ms"
            if autocommit:  # its own implicit transaction ended with it
                assert after == default
    finally:
        conns.close()


@pytest.mark.parametrize("autocommit", [True, False])
async def test_a_statement_timeout_bounds_that_statement_alone_async(
    database_url: str, autocommit: bool
) -> None:
    engine = create_async_engine(database_url)
    conns = AsyncConnections(engine)
    try:
        async with engine.connect() as conn:
            default = (await conn.execute(TIMEOUT)).scalar_one()
        for _ in range(2):
            with pytest.raises(DatabaseError, match="cancelled") as raised:
                await run_async(lambda: _sleep_flow(autocommit), conns, None)  # type: ignore[arg-type]
            _assert_cancelled_by_timeout(raised.value)
            bounded, after = await run_async(lambda: _settings_flow(autocommit), conns, None)  # type: ignore[arg-type]
            assert bounded == "1234ms"
            if autocommit:
                assert after == default
    finally:
        await conns.aclose()
        await engine.dispose()


RECORD = {
    "scene": "deploy",
    "trigger": "shipping a release to production",
    "action": "ran the migration after the deploy",
    "outcome": "failure",
    "lesson": "Run the database migration before the deploy",
}


def test_recall_runs_on_a_warm_connection_sync(memory: Memory) -> None:
    ns = ("recall-timeout", uuid.uuid4().hex[:8])
    wrote = memory.write(RECORD, namespace=ns)
    seen = checkouts(memory.engine)
    first = memory.recall("migrate before deploying", namespace=ns)
    n = len(seen)
    again = memory.recall("migrate before deploying", namespace=ns)
    assert [h.record.id for h in first.hits] == [h.record.id for h in again.hits] == [wrote.id]
    assert first.warning is None and again.warning is None
    assert len(seen) == n, "the second recall reused the warm connection (a transaction checks out)"
    searched = memory.search("migrate before deploying", namespace=ns)
    assert [h.score for h in again.hits] == pytest.approx([h.score for h in searched])


async def test_recall_runs_on_a_warm_connection_async(amemory: AsyncMemory) -> None:
    ns = ("recall-timeout", uuid.uuid4().hex[:8])
    wrote = await amemory.write(RECORD, namespace=ns)
    seen = checkouts(await amemory.get_engine())
    first = await amemory.recall("migrate before deploying", namespace=ns)
    n = len(seen)
    again = await amemory.recall("migrate before deploying", namespace=ns)
    assert [h.record.id for h in first.hits] == [h.record.id for h in again.hits] == [wrote.id]
    assert len(seen) == n, "the second recall reused the warm connection"


def _timed_flow() -> Flow[Rows]:
    return (yield from Sql(TIMEOUT, autocommit=True, timeout_ms=1234))


def test_a_session_timeout_never_goes_back_to_the_pool(engine: sa.Engine) -> None:
    # On a warm connection the timeout is the session's (no round trip per recall):
    # kept for the next timed statement, reset before the pool gets the connection
    # back, where a transaction must not run at a recall's timeout.
    conns = Connections(engine)
    with engine.connect() as conn:
        default = conn.execute(TIMEOUT).scalar_one()
    seen = checkouts(engine)
    assert run_sync(_timed_flow, conns, None)[0]["t"] == "1234ms"  # type: ignore[arg-type]
    assert run_sync(_timed_flow, conns, None)[0]["t"] == "1234ms"  # type: ignore[arg-type]
    assert len(seen) == 1, "one warm connection for both"
    conns.close()
    with engine.connect() as conn:
        assert len(seen) == 2 and seen[0] == seen[1], "the pool hands out the same one"
        assert conn.execute(TIMEOUT).scalar_one() == default


async def test_a_session_timeout_never_goes_back_to_the_pool_async(database_url: str) -> None:
    engine = create_async_engine(database_url)
    conns = AsyncConnections(engine)
    try:
        async with engine.connect() as conn:
            default = (await conn.execute(TIMEOUT)).scalar_one()
        assert (await run_async(_timed_flow, conns, None))[0]["t"] == "1234ms"  # type: ignore[arg-type]
        await conns.aclose()
        async with engine.connect() as conn:
            assert (await conn.execute(TIMEOUT)).scalar_one() == default
    finally:
        await engine.dispose()


def test_recall_and_search_in_turns_keep_one_warm_connection_each(memory: Memory) -> None:
    ns = ("recall-timeout", uuid.uuid4().hex[:8])
    memory.write(RECORD, namespace=ns)
    memory.recall("deploy", namespace=ns)
    memory.search("deploy", namespace=ns)
    pids = sa.text("SELECT pg_backend_pid() AS pid")

    def pid_flow(timeout_ms: int | None) -> Flow[int]:
        rows = yield from Sql(pids, autocommit=True, timeout_ms=timeout_ms)
        return int(rows[0]["pid"])

    timed = int(memory.settings.recall_timeout * 1000)
    first = memory.run_flow(lambda: pid_flow(timed))
    plain = memory.run_flow(lambda: pid_flow(None))
    assert first != plain, "each kind of statement has its warm connection"
    assert memory.run_flow(lambda: pid_flow(timed)) == first
    assert memory.run_flow(lambda: pid_flow(None)) == plain


async def test_a_cancelled_timed_statement_leaves_the_pool_clean(database_url: str) -> None:
    # AsyncMemory.recall's bound is asyncio.wait_for: the task is cancelled mid-statement
    # (psycopg cancels it on the server); the connection still goes back reset.
    import asyncio

    app = f"cancel-{uuid.uuid4().hex[:8]}"
    engine = create_async_engine(tagged(database_url, app), pool_size=1, max_overflow=0)
    conns = AsyncConnections(engine)

    def slow() -> Flow[Rows]:
        return (yield from Sql(SLEEP, {"s": 5}, autocommit=True, timeout_ms=9000))

    try:
        async with engine.connect() as conn:
            default = (await conn.execute(TIMEOUT)).scalar_one()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(run_async(slow, conns, None), 0.3)  # type: ignore[arg-type]
        # The server stopped the statement: the pool's one backend is idle, not still in
        # pg_sleep (psycopg cancels it on the server and waits for that before giving
        # up), and the connection survived to be reset (its last statement).
        (backend,) = backends(database_url, app)
        assert backend["state"] == "idle", backend
        assert backend["query"] == "RESET statement_timeout", backend
        await conns.aclose()
        async with engine.connect() as conn:  # the pool's one connection
            assert (await conn.execute(TIMEOUT)).scalar_one() == default
    finally:
        await engine.dispose()
