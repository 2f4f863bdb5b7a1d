"""The two drivers, one per I/O style, sharing every decision.

A flow (``flow.py``) yields requests. :func:`_drive` below, written once, turns them
into I/O steps and decides everything a driver decides: which connection (a
transaction on a pooled connection, or, when the flow's first statement says
``autocommit``, a warm autocommit connection: ``connections.py``), how a
``Pipelined`` write's reads run ahead on a side connection, when a connection is committed,
kept warm, invalidated or closed, how driver errors map to Hindsight's, and when the
whole flow runs once more (a kept connection found broken; the caller's ``retry``
policy, e.g. items on a deadlock).

A step is a small typed object (``steps.py``: :class:`~.steps.Connect`,
:class:`~.steps.Execute`, ...) whose reply :func:`_drive` receives typed through
``yield from``; :class:`SyncIO` carries it out by calling, :class:`AsyncIO` by awaiting
(``io_steps.py``), and those two hold only I/O, one short method per kind of step.
:func:`run_sync` and :func:`run_async` are the two loops that carry the steps out, and
a failed step is thrown back into :func:`_drive` where it happened. This is httpx's
``Auth.auth_flow`` pattern one level down: the flows are written once, and so is the
driver.

A run (:func:`_run`) matches each request of its flow on its class; the connection is
taken at the first statement (:func:`_take`) and given back when the flow returns
(:func:`_finish`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
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
from .steps import (
    Close,
    Commit,
    Compute,
    Conn,
    Connect,
    EmbedTexts,
    Execute,
    Fetch,
    Invalidate,
    MigrateOn,
    RunUnit,
    Settle,
    Side,
    Start,
    StartEach,
    Started,
    Step,
    Wait,
)

__all__ = ["AsyncIO", "Plan", "Retry", "SyncIO", "run_async", "run_sync"]

R = TypeVar("R")
S = TypeVar("S")
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


Conns = Connections | AsyncConnections
Steps = Generator[Step[Any], Any, R]
"""What the driver yields (steps, each carried out by ``SyncIO`` or ``AsyncIO``) and
returns (the flow's result)."""


def _drive(
    flow: Flow[R] | MakeFlow[R], conns: Conns, retry: Retry | None, patient: bool = True
) -> Steps[R]:
    """Run ``flow`` (or ``flow()``, again when a kept connection broke or ``retry``
    says so) as steps on ``conns``; ``patient``: see :func:`_checkout`."""
    if not callable(flow):  # a flow already built cannot run twice: fresh connections
        return (yield from _run(flow, conns, reuse=False, patient=patient))
    reuse, attempt = True, 0
    while True:
        built = flow()
        try:
            return (yield from _run(built, conns, reuse, patient))
        except _Broken:
            reuse = False
        except HindsightError as exc:
            if retry is None or not retry(attempt, exc):
                raise
            attempt += 1
        finally:
            built.close()


class _Held:
    """The connection one run holds: none yet, a transaction's (``cur`` None), or a warm
    autocommit one with its raw cursor (``warm``: kept from an earlier flow)."""

    __slots__ = ("conn", "cur", "warm")

    def __init__(self) -> None:
        self.conn: Conn = None  # None: none yet
        self.cur: Any = None
        self.warm = False


def _run(flow: Flow[R], conns: Conns, reuse: bool, patient: bool = True) -> Steps[R]:
    """One run of ``flow``: each request as steps; the connection taken at the first
    ``Sql`` or ``Pipelined`` (:func:`_take`; ``reuse``: a warm one may be reused) and
    given back when the flow ends (:func:`_finish`) or fails (closed: rolled back)."""
    held = _Held()
    reply: Any = None
    try:
        while True:
            try:
                req = flow.send(reply)
            except StopIteration as stop:
                result: R = stop.value
                break
            match req:
                case Sql():
                    yield from _take(held, conns, req, reuse, patient)
                    if held.cur is not None:
                        reply = yield from _fetch(held, req)
                    else:
                        reply = yield from Execute(held.conn, req)
                case Embed():
                    reply = yield from EmbedTexts(req)
                case Pipelined():
                    yield from _take(held, conns, req, reuse, patient)
                    if held.cur is not None:
                        raise TypeError("a Pipelined request needs a transaction, not autocommit")
                    yield from _pipelined(held.conn, req)
                    reply = None
                case Unit():
                    reply = yield from _unit(req, holding=held.conn is not None)
                case Migrate():
                    yield from MigrateOn((yield from _checkout(conns, False, patient)))
                    reply = None
                case _:
                    raise TypeError(f"a flow yielded {req!r}, not a request of runtime.flow")
        yield from _finish(held, conns)
        return result
    except GeneratorExit:  # abandoned mid-way: nothing more can run
        raise
    except BaseException as exc:
        if held.conn is not None:  # closing rolls back what was not committed
            yield from Close(held.conn)
        if isinstance(exc, DB_ERRORS) and not isinstance(exc, HindsightError):
            raise translate_db_error(exc) from exc
        raise


def _take(
    held: _Held, conns: Conns, req: Sql | Pipelined, reuse: bool, patient: bool
) -> Steps[None]:
    """The run's connection, taken at its first statement, which decides how: a warm
    autocommit connection when it is an ``Sql`` that says ``autocommit`` (a kept one
    when ``reuse`` and one is free, else a new one with a raw cursor), else a pooled
    connection in a transaction. A run that holds one keeps it."""
    if held.conn is not None:
        return
    if not (isinstance(req, Sql) and req.autocommit):
        held.conn = yield from _checkout(conns, False, patient)
        return
    conn, cur, cold = conns.take(req.timeout_ms) if reuse else (None, None, [])
    for done in cold:
        yield from Close(done)
    if conn is not None:
        held.conn, held.cur, held.warm = conn, cur, True
        return
    held.conn = yield from _checkout(conns, True, patient)
    held.cur = cursor(held.conn)


def _finish(held: _Held, conns: Conns) -> Steps[None]:
    """The run's connection given back once the flow returned: a warm one kept (if
    there is room, else closed), a transaction's committed and closed."""
    if held.cur is not None:
        release(held.cur)
        done, held.conn = held.conn, None
        if not conns.keep(done, held.cur):
            yield from Close(done)
    elif held.conn is not None:
        yield from Commit(held.conn)
        done, held.conn = held.conn, None
        yield from Close(done)


def _unit(req: Unit[Any], holding: bool) -> Steps[Any]:
    """A :class:`Unit`'s result; None when it gave up (``gives_up``). A unit that may
    give up, asked for while this run holds a connection (``holding``), takes its own
    without waiting on (``patient=False``): the connections it would wait for may all
    be held by flows queued behind this one's lock (a write's namespace lock), a cycle
    through the pool that only the pool timeout broke, failing every write queued
    meanwhile."""
    try:
        return (yield from RunUnit(req.flow, patient=not (holding and req.gives_up)))
    except HindsightError as exc:
        if not (req.gives_up and _gave_up(exc)):
            raise
        return None


def _gave_up(exc: HindsightError) -> bool:
    """Whether a unit's error is its giving up: on a lock, or on a pool checkout."""
    return isinstance(exc, DatabaseBusyError) or gave_up_waiting_for_lock(exc)


def _checkout(conns: Conns, autocommit: bool, patient: bool) -> Steps[Conn]:
    """A pooled connection (``autocommit``: in autocommit mode).

    The pool's own wait is one slice (``storage.engine.CHECKOUT_SLICE``). After a slice
    in vain, the warm connections go back to the pool, and the call waits again as
    long as connections keep coming back (a queue of writes draining: the database is
    healthy) within the settings' ``pool_timeout`` and before the caller's deadline
    (``flow.DEADLINE``). Then, or after one slice when not ``patient``,
    :class:`~hindsight_core.errors.DatabaseBusyError`: busy, retry; not "unavailable".
    """
    since = conns.clock()
    while True:
        try:
            return (yield from Connect(autocommit))
        except sa_exc.TimeoutError:
            for warm in conns.drain():
                yield from Close(warm)
            again, waited = conns.keep_waiting(since)
            if not (patient and again):
                raise busy(waited) from None


def _fetch(held: _Held, req: Sql) -> Steps[Rows]:
    """``req`` on a warm connection's cursor; a broken connection is invalidated (and,
    if it was kept from an earlier flow, the flow runs again)."""
    try:
        return (yield from Fetch(held.cur, req))
    except psycopg.Error as exc:
        error = translate_db_error(exc)
        if broken(exc, held.conn):
            yield from Invalidate(held.conn)
            if held.warm:
                raise _Broken from exc
        raise error from exc


def _pipelined(conn: Conn, req: Pipelined) -> Steps[None]:
    """Stage ``k``'s write on ``conn`` while the later stages' reads run on a side
    connection and stage ``k + 1``'s step on the client. The side connection reads
    stages 1, 2, ... one after another from the start, ahead of the steps (reads do
    not depend on them), while ``conn``, idle until the first write, reads stage 0.
    With no side connection free, every read first, on ``conn`` (then only the steps
    overlap the writes)."""
    side = (yield from Side()) if any(r is not None for r in req.reads[1:]) else None
    pending: Started | None = None  # the write in flight
    queued: list[Started | None] = []  # the side connection's reads, started in stage order
    try:
        ahead: list[Rows] | None = None
        if side is None:
            ahead = []
            for read in req.reads:
                ahead.append([] if read is None else (yield from Execute(conn, read)))
        else:
            queued = yield from StartEach(side, (None, *req.reads[1:]))
        for k, read in enumerate(req.reads):
            if ahead is not None:
                rows = ahead[k]
            elif k == 0:
                rows = [] if read is None else (yield from Execute(conn, read))
            elif queued[k] is None:
                rows = []
            else:
                rows, pending = yield from _or_again(conn, req, k, pending, queued[k])
            if pending is None:  # nothing in flight: the step runs here, like the flow
                write = req.step(k, rows)
            else:
                write = yield from Compute(req.step, k, rows)
            if pending is not None:
                done, pending = pending, None
                yield from Wait(done)
            if write is not None and k == len(req.reads) - 1:
                yield from Execute(conn, write)  # nothing left to overlap it with
            elif write is not None:
                pending = yield from Start(conn, write)
    except GeneratorExit:
        raise
    except BaseException:
        # Everything started finishes before its connection is closed.
        for begun in (pending, *queued):
            if begun is not None:
                yield from Settle(begun)
        if side is not None:
            yield from Close(side)
        raise
    if side is not None:
        yield from Close(side)


def _or_again(
    conn: Conn, req: Pipelined, k: int, pending: Started | None, read: Started
) -> Steps[tuple[Rows, Started | None]]:
    """Stage ``k``'s side read (started: ``read``), or, when it gave up waiting for a
    lock (DDL queued behind this transaction, which would wait for the read: a cycle
    the server cannot see), ``req.again[k]`` on ``conn``, once the write in flight
    (``pending``) is done. The rows, and the write still in flight."""
    try:
        return (yield from Wait(read)), pending
    except DB_ERRORS as exc:
        if not req.again or not gave_up_waiting_for_lock(exc):
            raise
    if pending is not None:
        yield from Wait(pending)
    again = req.again[k]
    return ([] if again is None else (yield from Execute(conn, again))), None


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
    io = SyncIO(conns, embedder)
    plan = Plan(_drive(flow, conns, retry, patient))
    for step in plan:
        try:
            plan.reply = step.on(io)
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
    io = AsyncIO(conns, embedder)
    plan = Plan(_drive(flow, conns, retry, patient))
    for step in plan:
        try:
            plan.reply = await step.on(io)
        except BaseException as exc:  # noqa: BLE001 - thrown into the plan, which decides
            plan.error = exc
    return plan.result
