"""A controllable clock, and a ``Memory`` that reads it, for tests of time-based rules."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from hindsight_core import Memory, Settings


class Clock:
    """Returns ``now`` when called (pass it as ``Memory(clock=...)``); tests move ``now``."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now or datetime(2026, 1, 1, 12, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@contextmanager
def clocked_memory(
    namespace: tuple[str, ...], settings: Settings, embedder: Any
) -> Iterator[tuple[Memory, Clock]]:
    """A ``Memory`` on a fresh :class:`Clock`, and the clock; the memory is closed on exit."""
    clock = Clock()
    mem = Memory(namespace, settings=settings, embedder=embedder, clock=clock)
    try:
        yield mem, clock
    finally:
        mem.close()
