"""The one sync and the one async driver (``runtime/driver.py``), through the flows.

Each test runs the same flow on both drivers: the connection strategy (transaction or
warm autocommit connection) is the flow's first statement's to declare, the retry
policy is the caller's, and replies are typed through ``yield from``.

Internals: the drivers themselves (``runtime.driver``, ``runtime.connections``,
``runtime.flow``), on purpose.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa
from _pool import checkouts
from sqlalchemy.ext.asyncio import create_async_engine

from hindsight_core import AsyncMemory, Memory, Settings
from hindsight_core.errors import DatabaseError, ValidationError
from hindsight_core.items import AsyncItems, GetItem, Items, PutItem
from hindsight_core.runtime.connections import AsyncConnections, Connections
from hindsight_core.runtime.driver import run_async, run_sync
from hindsight_core.runtime.flow import Flow, Pipelined, Rows, Sql
from hindsight_core.storage.engine import create_async_side_engine, create_side_engine

SELECT_TX = sa.text(
    "SELECT 1 AS one, pg_backend_pid() AS pid, now() = statement_timestamp() AS in_autocommit"
)
PID = sa.text("SELECT pg_backend_pid()")
ROWS = sa.text("SELECT g AS n FROM generate_series(1, 100) g")


def _typed_flow(autocommit: bool) -> Flow[tuple[Rows, Rows]]:
    first: Rows = yield from Sql(SELECT_TX, autocommit=autocommit)
    second = yield from Sql(SELECT_TX, autocommit=autocommit)
    return first, second


def _rows_flow() -> Flow[Rows]:
    return (yield from Sql(ROWS, autocommit=True))


@pytest.fixture
def engine(database_url: str) -> Iterator[sa.Engine]:
    """An engine of its own: its pool holds only the connections these tests open."""
    e = sa.create_engine(database_url)
    yield e
    e.dispose()


@pytest.fixture
def conns(engine: sa.Engine) -> Iterator[Connections]:
    c = Connections(engine)
    yield c
    c.close()


@pytest.mark.parametrize("autocommit", [False, True])
def test_typed_replies_and_the_first_statement_decides_sync(
    conns: Connections, engine: sa.Engine, autocommit: bool
) -> None:
    first, second = run_sync(lambda: _typed_flow(autocommit), conns, None)  # type: ignore[arg-type]
    assert first[0]["one"] == 1 and second[0]["one"] == 1
    assert first[0]["pid"] == second[0]["pid"], "one flow, one connection"
    # In a transaction now() stays at the transaction's start; in autocommit mode each
    # statement is its own transaction, so the second one's now() is its own.
    assert second[0]["in_autocommit"] is autocommit
    # A warm connection stays checked out: the pool hands out another one (server side,
    # another backend); a transaction's went back, and the pool hands it out again.
    with engine.connect() as other:
        other_pid = other.execute(PID).scalar()
    assert (other_pid != first[0]["pid"]) is autocommit, (
        "only an autocommit flow keeps its connection warm"
    )


@pytest.mark.parametrize("autocommit", [False, True])
async def test_typed_replies_and_the_first_statement_decides_async(
    database_url: str, autocommit: bool
) -> None:
    engine = create_async_engine(database_url)
    conns = AsyncConnections(engine)
    try:
        first, second = await run_async(lambda: _typed_flow(autocommit), conns, None)  # type: ignore[arg-type]
        assert first[0]["one"] == 1 and first[0]["pid"] == second[0]["pid"]
        assert second[0]["in_autocommit"] is autocommit
        async with engine.connect() as other:
            other_pid = (await other.execute(PID)).scalar()
        assert (other_pid != first[0]["pid"]) is autocommit
    finally:
        await conns.aclose()
        await engine.dispose()


def test_a_warm_connection_keeps_its_cursor_without_rows(conns: Connections) -> None:
    # A warm connection's cursor is reused (its adapters are resolved once); after a
    # read its result is freed, so a kept cursor never holds a large result in memory.
    assert [r["n"] for r in run_sync(_rows_flow, conns, None)] == list(range(1, 101))  # type: ignore[arg-type]
    conn, cur, cold = conns.take()
    assert conn is not None and cur is not None and not cur.closed and cold == []
    assert cur.pgresult is not None and cur.pgresult.ntuples == 0, "the read's rows are freed"
    assert conns.keep(conn, cur)
    assert len(run_sync(_rows_flow, conns, None)) == 100  # type: ignore[arg-type]
    again, again_cur, _ = conns.take()
    assert (again, again_cur) == (conn, cur), "the next flow reuses connection and cursor"
    assert conns.keep(again, again_cur)


PID_ROW = sa.text("SELECT pg_backend_pid() AS pid")


def _pipelined_flow(table: str, seen: list[tuple[int, int, int]]) -> Flow[int]:
    main = yield from Sql(PID_ROW)  # a transaction, as Pipelined needs
    read = Sql(sa.text(f"SELECT pg_backend_pid() AS pid, (SELECT count(*) FROM {table}) AS n"))

    def step(k: int, rows: Rows) -> Sql:
        seen.append((k, int(rows[0]["pid"]), int(rows[0]["n"])))
        return Sql(sa.text(f"INSERT INTO {table} VALUES (:k)"), {"k": k}, fetch="none")

    yield from Pipelined((read, read, read), step)
    return int(main[0]["pid"])


def test_pipelined_reads_see_the_table_as_before_the_writes(
    engine: sa.Engine, settings: Settings
) -> None:
    """Stage 0 reads in the transaction (idle until its first write), stages 1 and on
    on the side connection (which does not see the flow's uncommitted rows), while the
    writes run; with the side connection taken, every read runs first, in the
    transaction. Either way each read sees no row of the flow's writes, and all the
    writes are committed."""
    table = "test_pipelined_" + uuid.uuid4().hex[:8]
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE {table} (k int)"))
    side = create_side_engine(settings, engine)
    conns = Connections(engine, side=lambda: side)
    try:
        seen: list[tuple[int, int, int]] = []
        main = run_sync(lambda: _pipelined_flow(table, seen), conns, None)  # type: ignore[arg-type]
        assert [(k, n) for k, _, n in seen] == [(0, 0), (1, 0), (2, 0)]
        assert seen[0][1] == main, "stage 0 reads in the transaction"
        assert main not in {pid for _, pid, _ in seen[1:]} and len({p for _, p, _ in seen[1:]}) == 1
        assert side.pool.checkedin() == 1, "the side connection went back to its pool"  # type: ignore[attr-defined]
        with side.connect():  # the side pool's only connection, taken
            seen.clear()
            main = run_sync(lambda: _pipelined_flow(table, seen), conns, None)  # type: ignore[arg-type]
        assert seen == [(0, main, 3), (1, main, 3), (2, main, 3)], "reads first, in the transaction"
        with engine.connect() as conn:
            assert conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one() == 6
    finally:
        conns.close()
        side.dispose()
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE {table}"))


NOT_OWN = "xmin IS DISTINCT FROM pg_current_xact_id_if_assigned()::xid"
LOCK_WAITS = sa.text(
    "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = CAST(:t AS regclass)"
)


def _queued_ddl_flow(
    table: str, engine: sa.Engine, seen: list[tuple[int, int, int]], locker: list[Any]
) -> Flow[int]:
    """A Pipelined write whose transaction read ``table`` (holding its lock) before an
    ACCESS EXCLUSIVE lock (a reindex dropping an index) queued behind it: a side read
    now waits for that lock, which waits for the transaction."""
    main = yield from Sql(sa.text(f"SELECT pg_backend_pid() AS pid, count(*) FROM {table}"))
    thread = threading.Thread(target=_lock_table, args=(engine, table))
    thread.start()
    locker.append(thread)
    with engine.connect() as conn:
        while not conn.execute(LOCK_WAITS, {"t": table}).scalar() and thread.is_alive():
            thread.join(0.01)
    count = "SELECT pg_backend_pid() AS pid, (SELECT count(*) FROM {} {}) AS n"
    read = Sql(sa.text(count.format(table, "")))
    again = Sql(sa.text(count.format(table, "WHERE " + NOT_OWN)))

    def step(k: int, rows: Rows) -> Sql:
        seen.append((k, int(rows[0]["pid"]), int(rows[0]["n"])))
        return Sql(sa.text(f"INSERT INTO {table} VALUES (:k)"), {"k": k}, fetch="none")

    yield from Pipelined((read, read, read), step, (again, again, again))
    return int(main[0]["pid"])


def _lock_table(engine: sa.Engine, table: str) -> None:
    with engine.begin() as conn:
        conn.execute(sa.text(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"))


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_pipelined_reads_behind_ddl_that_waits_for_the_write_run_in_it(
    engine: sa.Engine, settings: Settings, database_url: str, kind: str
) -> None:
    """A side read queued behind DDL that waits for the write's transaction waited for
    ever (a cycle through the client the server cannot see): it gives up after the
    side connection's ``lock_timeout``, and the reads run in the transaction, which
    holds the table's lock and so goes ahead of the DDL, as ``again``, not seeing the
    transaction's own rows: the same rows as on the side connection."""
    table = "test_pipelined_ddl_" + uuid.uuid4().hex[:8]
    with engine.begin() as conn:
        conn.execute(sa.text(f"CREATE TABLE {table} (k int)"))
    seen: list[tuple[int, int, int]] = []
    locker: list[threading.Thread] = []
    try:
        if kind == "sync":
            side = create_side_engine(settings, engine)
            conns = Connections(engine, side=lambda: side)
            try:
                flow = _queued_ddl_flow(table, engine, seen, locker)
                main = run_sync(flow, conns, None)  # type: ignore[arg-type]
            finally:
                conns.close()
                side.dispose()
        else:
            aengine = create_async_engine(database_url)
            aside = create_async_side_engine(settings, aengine)
            aconns = AsyncConnections(aengine, side=lambda: aside)
            try:
                flow = _queued_ddl_flow(table, engine, seen, locker)
                main = await run_async(flow, aconns, None)  # type: ignore[arg-type]
            finally:
                await aconns.aclose()
                await aside.dispose()
                await aengine.dispose()
        for thread in locker:
            thread.join()
        assert seen == [(0, main, 0), (1, main, 0), (2, main, 0)], "in the transaction"
        with engine.connect() as conn:
            assert conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one() == 3
    finally:
        for thread in locker:
            thread.join()
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE {table}"))


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
    # on a warm autocommit connection, as Items' do: no pool checkout after the first.
    items = AsyncItems(amemory)
    ns = ("driver", uuid.uuid4().hex[:8])
    seen = checkouts(await amemory.get_engine())
    try:
        await items.put(ns, "k", {"v": 1})
        assert seen, "the put checked a connection out"
        n = len(seen)
        assert (await items.get(ns, "k")).value == {"v": 1}  # type: ignore[union-attr]
        await items.put(ns, "k", {"v": 2})
        assert len(seen) == n, "kept warm after the put, reused for the get and the put"
    finally:
        await items.aclose()


def test_items_batch_of_units_runs_on_a_warm_connection(memory: Memory) -> None:
    items = Items(memory)
    ns = ("driver", uuid.uuid4().hex[:8])
    seen = checkouts(memory.engine)
    try:
        items.batch([PutItem(ns, "a", {"x": 1})])
        assert seen, "the put checked a connection out"
        n = len(seen)
        got = items.batch([GetItem(ns, "a")])
        assert got[0] is not None and got[0].value == {"x": 1}  # type: ignore[union-attr]
        assert len(seen) == n, "kept warm after the put, reused for the get"
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
