"""A ``HindsightCheckpointer`` on its own memory, for the checkpointer tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

from hindsight_adapters.langgraph import HindsightCheckpointer
from hindsight_core import AsyncMemory, Memory, Settings


@contextmanager
def sync_saver(settings: Settings) -> Iterator[HindsightCheckpointer]:
    """A set-up checkpointer on a new ``Memory``; both closed on exit."""
    memory = Memory(settings=settings)
    saver = HindsightCheckpointer(memory)
    saver.setup()
    try:
        yield saver
    finally:
        saver.close()
        memory.close()


@asynccontextmanager
async def async_saver(settings: Settings) -> AsyncIterator[HindsightCheckpointer]:
    """A set-up checkpointer on a new ``AsyncMemory``; both closed on exit."""
    memory = AsyncMemory(settings=settings)
    saver = HindsightCheckpointer(memory)
    await saver.asetup()
    try:
        yield saver
    finally:
        await saver.aclose()
        await memory.aclose()
