"""The steps of the two drivers (``driver.py``): what the I/O is asked to do, typed.

:func:`driver._drive` decides every step: a small object (:class:`Connect`,
:class:`Execute`, :class:`Fetch`, ...) holding what the step needs, whose reply the
driver receives typed through ``yield from`` (``rows = yield from Execute(conn, req)``),
as a flow receives its requests' (``flow.py``). Each step names the method of the I/O
that carries it out (:meth:`Step.on`): ``io_steps.SyncIO`` by calling,
``io_steps.AsyncIO`` by awaiting.

The driver holds a connection without knowing its I/O style: a step's ``conn`` is an
``sa.Connection`` for ``SyncIO``, an ``AsyncConnection`` for ``AsyncIO``, and what was
started (:class:`Start`) a ``Future`` or an ``asyncio.Task``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from .flow import Embed, Flow, Rows, Sql

__all__ = [
    "Close",
    "Commit",
    "Compute",
    "Conn",
    "Connect",
    "EmbedTexts",
    "Execute",
    "Fetch",
    "Invalidate",
    "MigrateOn",
    "RunUnit",
    "Settle",
    "Side",
    "Start",
    "StartEach",
    "Started",
    "Step",
    "StepIO",
    "Wait",
]

T = TypeVar("T")
Conn = Any
"""A connection of the I/O style running the steps (``sa.Connection`` or ``AsyncConnection``)."""
Started = Any
"""A statement started on a connection (a ``Future`` or an ``asyncio.Task`` of its rows)."""
MakeWrite = Callable[[int, Rows], Sql | None]
"""A ``flow.Pipelined`` step: stage ``k``'s rows to the statement it writes."""


class StepIO(Protocol):
    """What carries the steps out: :class:`SyncIO` (each method returns the reply) or
    :class:`AsyncIO` (each returns an awaitable of it)."""

    def embed(self, step: EmbedTexts) -> Any: ...
    def migrate(self, step: MigrateOn) -> Any: ...
    def unit(self, step: RunUnit) -> Any: ...
    def connect(self, step: Connect) -> Any: ...
    def execute(self, step: Execute) -> Any: ...
    def fetch(self, step: Fetch) -> Any: ...
    def side(self, step: Side) -> Any: ...
    def compute(self, step: Compute) -> Any: ...
    def start(self, step: Start) -> Any: ...
    def start_each(self, step: StartEach) -> Any: ...
    def wait(self, step: Wait) -> Any: ...
    def settle(self, step: Settle) -> Any: ...
    def commit(self, step: Commit) -> Any: ...
    def invalidate(self, step: Invalidate) -> Any: ...
    def close(self, step: Close) -> Any: ...


class Step(Generic[T]):
    """One thing for the I/O to do; its reply is a ``T``."""

    __slots__ = ()

    def __iter__(self) -> Generator[Step[Any], Any, T]:
        """``reply = yield from step``: the reply, typed."""
        reply: T = yield self
        return reply

    def on(self, io: StepIO) -> Any:  # pragma: no cover - every step names its method
        """Carry the step out with ``io`` (the reply, or with :class:`AsyncIO` an
        awaitable of it)."""
        raise NotImplementedError


@dataclass(slots=True)
class EmbedTexts(Step[list[list[float]]]):
    """Answer a flow's :class:`~.flow.Embed` request."""

    req: Embed

    def on(self, io: StepIO) -> Any:
        return io.embed(self)


@dataclass(slots=True)
class MigrateOn(Step[None]):
    """Bring the schema up to date on ``conn`` (a connection of its own), then close it."""

    conn: Conn

    def on(self, io: StepIO) -> Any:
        return io.migrate(self)


@dataclass(slots=True)
class RunUnit(Step[Any]):
    """Run a flow's :class:`~.flow.Unit` on connections of its own (``patient``: see
    ``driver._checkout``); the reply is its result."""

    flow: Flow[Any]
    patient: bool

    def on(self, io: StepIO) -> Any:
        return io.unit(self)


@dataclass(slots=True)
class Connect(Step[Conn]):
    """A pooled connection (``autocommit``: in autocommit mode)."""

    autocommit: bool

    def on(self, io: StepIO) -> Any:
        return io.connect(self)


@dataclass(slots=True)
class Execute(Step[Rows]):
    """Run ``req`` on ``conn`` through SQLAlchemy (in its transaction)."""

    conn: Conn
    req: Sql

    def on(self, io: StepIO) -> Any:
        return io.execute(self)


@dataclass(slots=True)
class Fetch(Step[Rows]):
    """Run ``req`` on a warm connection's raw cursor (``cursors.fetch``)."""

    cur: Any
    req: Sql

    def on(self, io: StepIO) -> Any:
        return io.fetch(self)


@dataclass(slots=True)
class Side(Step["Conn | None"]):
    """A connection of the side pool (``flow.Pipelined`` reads), or None when there is
    none or it is in use."""

    def on(self, io: StepIO) -> Any:
        return io.side(self)


@dataclass(slots=True)
class Compute(Step["Sql | None"]):
    """A ``Pipelined`` stage's ``make(k, rows)``, where the I/O lets it overlap a write."""

    make: MakeWrite
    k: int
    rows: Rows

    def on(self, io: StepIO) -> Any:
        return io.compute(self)


@dataclass(slots=True)
class Start(Step[Started]):
    """Start ``req`` on ``conn`` and go on: the reply is what :class:`Wait` waits for."""

    conn: Conn
    req: Sql

    def on(self, io: StepIO) -> Any:
        return io.start(self)


@dataclass(slots=True)
class StartEach(Step["list[Started | None]"]):
    """Start ``reqs`` on ``conn``, one after another in order (None: nothing)."""

    conn: Conn
    reqs: Sequence[Sql | None]

    def on(self, io: StepIO) -> Any:
        return io.start_each(self)


@dataclass(slots=True)
class Wait(Step[Rows]):
    """The rows of a started statement, once it is done (its error raised)."""

    started: Started

    def on(self, io: StepIO) -> Any:
        return io.wait(self)


@dataclass(slots=True)
class Settle(Step[None]):
    """Wait until a started statement is done, whatever its outcome."""

    started: Started

    def on(self, io: StepIO) -> Any:
        return io.settle(self)


@dataclass(slots=True)
class Commit(Step[None]):
    """Commit ``conn``'s transaction."""

    conn: Conn

    def on(self, io: StepIO) -> Any:
        return io.commit(self)


@dataclass(slots=True)
class Invalidate(Step[None]):
    """Mark ``conn`` unusable: the pool drops it."""

    conn: Conn

    def on(self, io: StepIO) -> Any:
        return io.invalidate(self)


@dataclass(slots=True)
class Close(Step[None]):
    """Give ``conn`` back to the pool (rolling back what was not committed), with the
    engine's statement timeout."""

    conn: Conn

    def on(self, io: StepIO) -> Any:
        return io.close(self)
