"""The short-term LlamaIndex memory that ``HindsightMemory`` wraps: building the
default one, reading its active history back, and closing it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import BaseMemory
from llama_index.core.memory import Memory as ChatMemory


def default_short_term(
    session_id: str, token_limit: int, tokenizer_fn: Callable[[str], list[Any]] | None
) -> BaseMemory:
    """A LlamaIndex ``Memory`` for the session (the default short-term memory)."""
    return ChatMemory.from_defaults(
        session_id=session_id, token_limit=token_limit, tokenizer_fn=tokenizer_fn
    )


async def aactive_history(st: BaseMemory) -> list[ChatMessage]:
    """The messages of ``st`` still in its active window (what is serialized)."""
    if isinstance(st, ChatMemory):
        from llama_index.core.storage.chat_store.base_db import MessageStatus

        return await st.aget_all(status=MessageStatus.ACTIVE)
    return list(await st.aget_all())


def active_history(st: BaseMemory) -> list[ChatMessage]:
    """Sync :func:`aactive_history`."""
    if isinstance(st, ChatMemory):
        from llama_index.core.storage.chat_store.base_db import MessageStatus

        return st.get_all(status=MessageStatus.ACTIVE)
    return list(st.get_all())


async def adispose(st: BaseMemory) -> None:
    """Dispose of the database engine of a default short-term memory's chat store."""
    engine = getattr(getattr(st, "sql_store", None), "_async_engine", None)
    if engine is not None:
        await engine.dispose()
