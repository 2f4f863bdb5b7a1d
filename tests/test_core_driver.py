"""The one sync and the one async driver (``runtime/driver.py``), through the flows.

Each test runs the same flow on both drivers: the connection strategy (transaction or
warm autocommit connection) is the flow's first statement's to declare, the retry
policy is the caller's, and replies are typed through ``yield from``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from hindsight_core import AsyncMemory, Memory
from hindsight_core.errors import DatabaseError, ValidationError
from hindsight_core.items import AsyncItems, GetItem, Items, PutItem
from hindsight_core.runtime.connections import AsyncConnections, Connections
from hindsight_core.runtime.driver import run_async, run_sync
from hindsight_core.runtime.flow import Flow, Rows, Sql

SELECT_TX = sa.text("SELECT 1 AS one, now() = statement_timestamp() AS in_autocommit")


def _typed_flow(autocommit: bool) -> Flow[tuple[Rows, Rows]]:
    first: Rows = yield from Sql(SELECT_TX, autocommit=autocommit)
    second = yield from Sql(SELECT_TX, autocommit=autocommit)
    return first, second


@pytest.fixture
def conns(memory: Memory) -> Iterator[Connections]:
    c = Connections(memory.engine)
    yield c
    c.close()


@pytest.mark.parametrize("autocommit", [False, True])
def test_typed_replies_and_the_first_statement_decides_sync(
    conns: Connections, autocommit: bool
) -> None:
    first, second = run_sync(lambda: _typed_flow(autocommit), conns, None)  # type: ignore[arg-type]
    assert first[0]["one"] == 1 and second[0]["one"] == 1
    # In a transaction now() stays at the transaction's start; in autocommit mode each
    # statement is its own transaction, so the second one's now() is its own.
    assert second[0]["in_autocommit"] is autocommit
    assert bool(conns._warm) is autocommit, "only an autocommit flow keeps its connection warm"


@pytest.mark.parametrize("autocommit", [False, True])
async def test_typed_replies_and_the_first_statement_decides_async(
    amemory: AsyncMemory, autocommit: bool
) -> None:
    await amemory.setup()
    conns = AsyncConnections(await amemory.get_engine())
    try:
        first, second = await run_async(lambda: _typed_flow(autocommit), conns, None)  # type: ignore[arg-type]
        assert first[0]["one"] == 1
        assert second[0]["in_autocommit"] is autocommit
        assert bool(conns._warm) is autocommit
    finally:
        await conns.aclose()


def _failing_then(attempts: list[int], error: Exception) -> Flow[int]:
    attempts.append(len(attempts))
    rows = yield from Sql(sa.text("SELECT 2 AS two"))
    if len(attempts) == 1:
        raise error
    return int(rows[0]["two"])


def _retry_once(attempt: int, exc: Exception) -> bool:
    return attempt == 0 and isinstance(exc, DatabaseError)


@pytest.mark.parametrize(
    "error, runs", [(DatabaseError("conflict"), 2), (ValidationError("bad", field="x"), 1)]
)
async def test_retry_policy_is_the_callers_on_both_drivers(
    conns: Connections, amemory: AsyncMemory, error: Exception, runs: int
) -> None:
    sync_attempts: list[int] = []
    async_attempts: list[int] = []
    aconns = AsyncConnections(await amemory.get_engine())
    try:
        for attempts, go in ((sync_attempts, None), (async_attempts, aconns)):
            try:
                if go is None:
                    result: Any = run_sync(
                        lambda a=attempts: _failing_then(a, error), conns, None, _retry_once
                    )  # type: ignore[arg-type]
                else:
                    result = await run_async(
                        lambda a=attempts: _failing_then(a, error), go, None, _retry_once
                    )  # type: ignore[arg-type]
            except ValidationError:
                result = None
            assert len(attempts) == runs
            assert result == (2 if runs == 2 else None)
    finally:
        await aconns.aclose()


def test_a_built_flow_is_never_run_twice(conns: Connections) -> None:
    attempts: list[int] = []
    with pytest.raises(DatabaseError, match="conflict"):
        run_sync(
            _failing_then(attempts, DatabaseError("conflict")),
            conns,
            None,  # type: ignore[arg-type]
            _retry_once,
        )
    assert attempts == [0]


async def test_async_items_take_the_fast_path(amemory: AsyncMemory) -> None:
    # AsyncItems ran every batch in a transaction; single-statement batches now run
    # on a warm autocommit connection, as Items' do.
    items = AsyncItems(amemory)
    ns = ("driver", uuid.uuid4().hex[:8])
    try:
        await items.put(ns, "k", {"v": 1})
        assert items._conns is not None and items._conns._warm, "kept warm after a put"
        (warm_conn,) = [c for _, c, _ in items._conns._warm]
        assert (await items.get(ns, "k")).value == {"v": 1}  # type: ignore[union-attr]
        assert [c for _, c, _ in items._conns._warm] == [warm_conn], "reused for the get"
    finally:
        await items.aclose()


def test_items_batch_of_units_runs_on_a_warm_connection(memory: Memory) -> None:
    items = Items(memory)
    ns = ("driver", uuid.uuid4().hex[:8])
    try:
        items.batch([PutItem(ns, "a", {"x": 1})])
        assert items._conns is not None and items._conns._warm, "kept warm after a put"
        (warm_conn,) = [c for _, c, _ in items._conns._warm]
        got = items.batch([GetItem(ns, "a")])
        assert got[0] is not None and got[0].value == {"x": 1}  # type: ignore[union-attr]
        assert [c for _, c, _ in items._conns._warm] == [warm_conn], "reused for the get"
    finally:
        items.close()


# Longer than psycopg's 4,096-character conversion cache (as recall's statement is), with
# a repeated parameter, a `%` literal and a `::` cast: the warm path sends it in `$n` form.
LONG = sa.text(
    "SELECT CAST(:a AS int) + CAST(:b AS int) AS s, CAST(:a AS int) AS a, '5%' AS pct, "
    "'1'::int AS one, CAST(:c AS text) AS c /* " + "x" * 4200 + " */"
)
MANY = [
    sa.text("CREATE TEMP TABLE IF NOT EXISTS t_many (a int, c text)"),
    sa.text("TRUNCATE t_many"),
    sa.text("INSERT INTO t_many VALUES (CAST(:a AS int), CAST(:c AS text))"),
]
READ_MANY = sa.text("SELECT a, c FROM t_many ORDER BY a")


def _long_flow() -> Flow[tuple[Rows, Rows]]:
    rows = yield from Sql(LONG, {"c": "x", "b": 2, "a": 1, "unused": 0}, autocommit=True)
    yield Sql(MANY[0], fetch="none")
    yield Sql(MANY[1], fetch="none")
    yield Sql(MANY[2], [{"a": 2, "c": "two"}, {"c": "one", "a": 1}], fetch="none")
    read = yield from Sql(READ_MANY)
    return rows, read


LONG_ROWS = [{"s": 3, "a": 1, "pct": "5%", "one": 1, "c": "x"}]
MANY_ROWS = [{"a": 1, "c": "one"}, {"a": 2, "c": "two"}]


def test_long_statements_and_many_on_a_warm_connection_sync(conns: Connections) -> None:
    for _ in range(2):  # the second time on the kept connection and cursor
        assert run_sync(_long_flow, conns, None) == (LONG_ROWS, MANY_ROWS)  # type: ignore[arg-type]


async def test_long_statements_and_many_on_a_warm_connection_async(amemory: AsyncMemory) -> None:
    await amemory.setup()
    conns = AsyncConnections(await amemory.get_engine())
    try:
        for _ in range(2):
            assert await run_async(_long_flow, conns, None) == (LONG_ROWS, MANY_ROWS)  # type: ignore[arg-type]
    finally:
        await conns.aclose()


def test_a_missing_parameter_is_named(conns: Connections) -> None:
    def flow() -> Flow[Rows]:
        return (yield from Sql(LONG, {"a": 1, "b": 2}, autocommit=True))

    with pytest.raises(DatabaseError, match="missing: c"):
        run_sync(flow, conns, None)  # type: ignore[arg-type]
