"""One object that calls either front end (``Memory`` or ``AsyncMemory``) the same way,
so that one async test body exercises both, and a transcript to compare their results."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable
from datetime import date, datetime
from typing import Any

from pydantic import BaseModel

from hindsight_core import AsyncMemory, Memory


class Front:
    """``await front.write(...)`` calls ``Memory.write`` or awaits ``AsyncMemory.write``.

    The sync front end is called directly on the test's event loop thread (it does no
    asyncio); the async one is awaited on that loop, which its connection pool is bound
    to. Attributes that are not methods (``namespace``, ``settings``) pass through.
    """

    def __init__(self, memory: Memory | AsyncMemory) -> None:
        self.memory = memory
        self.kind = "async" if isinstance(memory, AsyncMemory) else "sync"

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.memory, name)
        if not inspect.ismethod(attr):  # settings, namespace, embedder, ...
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            return await result if inspect.isawaitable(result) else result

        return call

    async def close(self) -> None:
        if isinstance(self.memory, AsyncMemory):
            await self.memory.aclose()
        else:
            self.memory.close()


Scenario = Callable[[Front], Awaitable[list[Any]]]


def transcript(values: list[Any], namespace: tuple[str, ...]) -> list[Any]:
    """``values`` as plain JSON-like data with ids numbered by first appearance and the
    namespace's labels replaced, so two front ends' runs in two namespaces compare equal
    exactly when they returned the same results."""
    ids: dict[str, str] = {}
    labels = {label: f"<ns{i}>" for i, label in enumerate(namespace)}
    labels["/".join(namespace)] = "<ns>"  # as shown: who gave feedback, superseded

    def plain(value: Any) -> Any:
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json")
        if isinstance(value, dict):
            return {str(plain(k)): plain(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        if isinstance(value, uuid.UUID):
            value = str(value)
        if isinstance(value, datetime | date):
            return value.isoformat()
        if isinstance(value, float):
            return round(value, 6)
        if isinstance(value, str):
            try:
                uuid.UUID(value)
            except ValueError:
                return labels.get(value, value)
            return ids.setdefault(value, f"<id{len(ids)}>")
        return value

    return [plain(v) for v in values]
