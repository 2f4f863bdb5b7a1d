"""The two drivers, one per I/O style, sharing every decision.

A flow (``flow.py``) yields requests. :func:`_drive` below, written once, turns them
into I/O steps and decides everything a driver decides: which connection (a
transaction on a pooled connection, or, when the flow's first statement says
``autocommit``, a warm autocommit connection: ``connections.py``), how a
``Pipelined`` write's reads run ahead on a side connection, when a connection is committed,
kept warm, invalidated or closed, how driver errors map to Hindsight's, and when the
whole flow runs once more (a kept connection found broken; the caller's ``retry``
policy, e.g. items on a deadlock).

A step is ``(operation, argument)``, an operation of :class:`SyncIO` (called) or of
:class:`AsyncIO` (awaited); those two hold only I/O, one short method per thing to
do. :func:`run_sync` and :func:`run_async` are the two loops that carry the steps
out, and a failed step is thrown back into :func:`_drive` where it happened. This is
httpx's ``Auth.auth_flow`` pattern one level down: the flows are written once, and so
is the driver.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import Any, Generic, TypeVar

import psycopg
from sqlalchemy import exc as sa_exc

from ..embeddings import Embedder
from ..errors import DatabaseBusyError, HindsightError
from ..storage.engine import DB_ERRORS, busy, gave_up_waiting_for_lock, translate_db_error
from .connections import AsyncConnections, Connections
from .cursors import broken, cursor, release
from .flow import Embed, Flow, MakeFlow, Migrate, Pipelined, Rows, Sql, Unit
from .io_steps import AsyncIO, SyncIO

__all__ = ["AsyncIO", "Plan", "Retry", "SyncIO", "run_async", "run_sync"]

R = TypeVar("R")
S = TypeVar("S")
Step = tuple[Callable[[Any], Any], Any]
Retry = Callable[[int, HindsightError], bool]
"""A retry policy: given the attempt (0 first) and its error, whether to run the flow
again (on a new connection)."""


class Plan(Generic[S, R]):
    """A generator of steps, driven by a loop: ``for step in plan``, then set
    ``plan.reply`` (sent in) or ``plan.error`` (thrown in at the ``yield``) before the
    next step; the generator's return value is ``plan.result``. The loop is the only
    code a driver repeats per I/O style."""

    __slots__ = ("_gen", "error", "reply", "result")

    def __init__(self, gen: Generator[S, Any, R]) -> None:
        self._gen = gen
        self.reply: Any = None
        self.error: BaseException | None = None
        self.result: R

    def __iter__(self) -> Plan[S, R]:
        return self

    def __next__(self) -> S:
        error, self.error = self.error, None
        reply, self.reply = self.reply, None
        try:
            return self._gen.throw(error) if error is not None else self._gen.send(reply)
        except StopIteration as stop:
            self.result = stop.value
            raise StopIteration from None


class _Broken(Exception):
    """A kept (warm) connection was found broken: run the flow again on a fresh one."""


def _drive(
    flow: Flow[R] | MakeFlow[R], io: SyncIO | AsyncIO, retry: Retry | None, patient: bool = True
) -> Generator[Step, Any, R]:
    """Run ``flow`` (or ``flow()``, again when a kept connection broke or ``retry``
    says so) as steps of ``io``; ``patient``: see :func:`_checkout`."""
    if not callable(flow):  # a flow already built cannot run twice: fresh connections
        return (yield from _run(flow, io, reuse=False, patient=patient))
    reuse, attempt = True, 0
    while True:
        built = flow()
        try:
            return (yield from _run(built, io, reuse, patient))
        except _Broken:
            reuse = False
        except HindsightError as exc:
            if retry is None or not retry(attempt, exc):
                raise
            attempt += 1
        finally:
            built.close()


def _run(
    flow: Flow[R], io: SyncIO | AsyncIO, reuse: bool, patient: bool = True
) -> Generator[Step, Any, R]:
    """One run of ``flow``: its requests as steps; the connection taken at the first
    ``Sql`` (``reuse``: a warm one may be reused), given back when it ends.

    A :class:`Unit` that may give up, asked for while this run holds a connection, takes
    its own without waiting on (``patient=False``): the connections it would wait for
    may all be held by flows queued behind this one's lock (a write's namespace lock),
    a cycle through the pool that only the pool timeout broke, failing every write
    queued meanwhile."""
    conn: Any = None
    cur: Any = None  # the warm strategy's cursor; None: a transaction
    warm = False  # conn was kept from an earlier flow
    reply: Any = None
    try:
        while True:
            try:
                req = flow.send(reply)
            except StopIteration as stop:
                result = stop.value
                break
            kind = type(req)
            if kind is Embed:
                reply = yield io.embed, req
            elif kind is Migrate:
                reply = yield io.migrate, (yield from _checkout(io, False, patient))
            elif kind is Unit:
                gives_up: bool = req.gives_up  # type: ignore[union-attr]
                try:
                    reply = yield io.unit, (req.flow, conn is None or not gives_up)  # type: ignore[union-attr]
                except HindsightError as exc:
                    if not (gives_up and _gave_up(exc)):
                        raise
                    reply = None
            else:
                if conn is None and kind is Sql and req.autocommit:  # type: ignore[union-attr]
                    conn, cur, cold = io.conns.take(req.timeout_ms) if reuse else (None, None, [])  # type: ignore[union-attr]
                    yield from _each(io.close, cold)
                    warm = conn is not None
                    if conn is None:
                        conn = yield from _checkout(io, True, patient)
                        cur = cursor(conn)
                elif conn is None:
                    conn = yield from _checkout(io, False, patient)
                if cur is not None and kind is Sql:
                    reply = yield from _fetch(io, conn, cur, req, warm)  # type: ignore[arg-type]
                elif cur is not None and kind is Pipelined:
                    raise TypeError("a Pipelined request needs a transaction, not autocommit")
                elif kind is Pipelined:
                    yield from _pipelined(io, conn, req)  # type: ignore[arg-type]
                    reply = None
                else:
                    reply = yield io.execute, (conn, req)
        if cur is not None:
            release(cur)
            done, conn = conn, None
            if not io.conns.keep(done, cur):
                yield io.close, done
        elif conn is not None:
            yield io.commit, conn
            done, conn = conn, None
            yield io.close, done
        return result  # type: ignore[no-any-return]
    except GeneratorExit:  # abandoned mid-way: nothing more can run
        raise
    except BaseException as exc:
        if conn is not None:  # closing rolls back what was not committed
            yield io.close, conn
        if isinstance(exc, DB_ERRORS) and not isinstance(exc, HindsightError):
            raise translate_db_error(exc) from exc
        raise


def _gave_up(exc: HindsightError) -> bool:
    """Whether a unit's error is its giving up: on a lock, or on a pool checkout."""
    return isinstance(exc, DatabaseBusyError) or gave_up_waiting_for_lock(exc)


def _checkout(io: SyncIO | AsyncIO, autocommit: bool, patient: bool) -> Generator[Step, Any, Any]:
    """A pooled connection (``autocommit``: in autocommit mode).

    The pool's own wait is one slice (``storage.engine.CHECKOUT_SLICE``). After a slice
    in vain, the warm connections go back to the pool, and the call waits again as
    long as connections keep coming back (a queue of writes draining: the database is
    healthy) within the settings' ``pool_timeout`` and before the caller's deadline
    (``flow.DEADLINE``). Then, or after one slice when not ``patient``,
    :class:`~hindsight_core.errors.DatabaseBusyError`: busy, retry; not "unavailable".
    """
    since = io.conns.clock()
    while True:
        try:
            return (yield io.connect, autocommit)
        except sa_exc.TimeoutError:
            yield from _each(io.close, io.conns.drain())
            again, waited = io.conns.keep_waiting(since)
            if not (patient and again):
                raise busy(waited) from None


def _fetch(
    io: SyncIO | AsyncIO, conn: Any, cur: Any, req: Sql, warm: bool
) -> Generator[Step, Any, Rows]:
    """``req`` on a warm connection's cursor; a broken connection is invalidated (and,
    if it was kept from an earlier flow, the flow runs again)."""
    try:
        rows: Rows = yield io.fetch, (cur, req)
    except psycopg.Error as exc:
        error = translate_db_error(exc)
        if broken(exc, conn):
            yield io.invalidate, conn
            if warm:
                raise _Broken from exc
        raise error from exc
    return rows


def _pipelined(io: SyncIO | AsyncIO, conn: Any, req: Pipelined) -> Generator[Step, Any, None]:
    """Stage ``k``'s write on ``conn`` while the later stages' reads run on a side
    connection and stage ``k + 1``'s step on the client. The side connection reads
    stages 1, 2, ... one after another from the start, ahead of the steps (reads do
    not depend on them), while ``conn``, idle until the first write, reads stage 0.
    With no side connection free, every read first, on ``conn`` (then only the steps
    overlap the writes)."""
    side = (yield io.side, None) if any(r is not None for r in req.reads[1:]) else None
    pending: Any = None  # the write in flight
    queued: list[Any] = []  # the side connection's reads, started in stage order
    try:
        ahead: list[Rows] | None = None
        if side is None:
            ahead = []
            for read in req.reads:
                ahead.append([] if read is None else (yield io.execute, (conn, read)))
        else:
            queued = yield io.start_each, (side, (None, *req.reads[1:]))
        for k, read in enumerate(req.reads):
            if ahead is not None:
                rows = ahead[k]
            elif k == 0:
                rows = [] if read is None else (yield io.execute, (conn, read))
            elif queued[k] is None:
                rows = []
            else:
                rows, pending = yield from _or_again(
                    io, conn, req, k, pending, (io.wait, queued[k])
                )
            if pending is None:  # nothing in flight: the step runs here, like the flow
                write = req.step(k, rows)
            else:
                write = yield io.compute, (req.step, k, rows)
            if pending is not None:
                done, pending = pending, None
                yield io.wait, done
            if write is not None and k == len(req.reads) - 1:
                yield io.execute, (conn, write)  # nothing left to overlap it with
            elif write is not None:
                pending = yield io.start, (conn, write)
    except GeneratorExit:
        raise
    except BaseException:
        # Everything started finishes before its connection is closed.
        for started in (pending, *queued):
            if started is not None:
                yield io.settle, started
        if side is not None:
            yield io.close, side
        raise
    if side is not None:
        yield io.close, side


def _or_again(
    io: SyncIO | AsyncIO, conn: Any, req: Pipelined, k: int, pending: Any, read: Step
) -> Generator[Step, Any, tuple[Rows, Any]]:
    """Stage ``k``'s side read (the step ``read``), or, when it gave up waiting for a
    lock (DDL queued behind this transaction, which would wait for the read: a cycle
    the server cannot see), ``req.again[k]`` on ``conn``, once the write in flight
    (``pending``) is done. The rows, and the write still in flight."""
    try:
        return (yield read), pending
    except DB_ERRORS as exc:
        if not req.again or not gave_up_waiting_for_lock(exc):
            raise
    if pending is not None:
        yield io.wait, pending
    again = req.again[k]
    return ([] if again is None else (yield io.execute, (conn, again))), None


def _each(op: Callable[[Any], Any], args: Iterable[Any]) -> Generator[Step, Any, None]:
    for arg in args:
        yield op, arg


def run_sync(
    flow: Flow[R] | MakeFlow[R],
    conns: Connections,
    embedder: Embedder,
    retry: Retry | None = None,
    *,
    patient: bool = True,
) -> R:
    """Run a flow with blocking I/O on ``conns``; given a maker (``flow()``), the flow
    may reuse a warm connection and run again on a broken one or as ``retry`` says.
    ``patient=False``: a connection not free within one pool wait is given up
    (``DatabaseBusyError``)."""
    plan = Plan(_drive(flow, SyncIO(conns, embedder), retry, patient))
    for op, arg in plan:
        try:
            plan.reply = op(arg)
        except BaseException as exc:  # noqa: BLE001 - thrown into the plan, which decides
            plan.error = exc
    return plan.result


async def run_async(
    flow: Flow[R] | MakeFlow[R],
    conns: AsyncConnections,
    embedder: Embedder,
    retry: Retry | None = None,
    *,
    patient: bool = True,
) -> R:
    """:func:`run_sync` with asyncio I/O (psycopg's async driver)."""
    plan = Plan(_drive(flow, AsyncIO(conns, embedder), retry, patient))
    for op, arg in plan:
        try:
            plan.reply = await op(arg)
        except BaseException as exc:  # noqa: BLE001 - thrown into the plan, which decides
            plan.error = exc
    return plan.result
