"""Recall before a LangGraph run: the task's lessons, first in the messages.

- :func:`recall_node` / :func:`recall_lessons`: put the top lessons for the task in
  front of the model as a system message headed ``MEMORY_HEADER``; on any recall
  failure the run simply gets no lessons.
- :func:`is_memory_message`: tells that message apart (reflection leaves it out of
  the trajectory and credits the lessons it names, ``RECALLED_KEY``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, RemoveMessage, SystemMessage
from langchain_core.runnables import RunnableLambda
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from hindsight_core import AsyncMemory, ConfigurationError, Memory
from hindsight_core.models import Namespace, SearchHit

from ._messages import message_text

__all__ = [
    "MEMORY_HEADER",
    "MEMORY_MESSAGE_ID",
    "arecall_lessons",
    "is_memory_message",
    "lessons_message",
    "recall_lessons",
    "recall_node",
]

log = logging.getLogger("hindsight.langgraph")

MEMORY_HEADER = "Lessons from past runs (memory):"
MEMORY_MESSAGE_ID = "hindsight-memory"
RECALLED_KEY = "hindsight_recalled"  # the recalled record ids, in additional_kwargs


def is_memory_message(message: BaseMessage) -> bool:
    """Whether a message is the recalled-lessons message that :func:`recall_node` adds."""
    return isinstance(message, SystemMessage) and (
        message.id == MEMORY_MESSAGE_ID or message_text(message.content).startswith(MEMORY_HEADER)
    )


def lessons_message(hits: Sequence[SearchHit]) -> SystemMessage | None:
    """The system message presenting recalled lessons (None when there are none)."""
    if not hits:
        return None
    lines = [MEMORY_HEADER]
    for hit in hits:
        r = hit.record
        lines.append(f"- {r.lesson} (when: {r.trigger[:160]}) [id {r.id}]")
    return SystemMessage(
        content="\n".join(lines),
        id=MEMORY_MESSAGE_ID,
        additional_kwargs={RECALLED_KEY: [str(h.record.id) for h in hits]},
    )


def recall_lessons(
    memory: Memory,
    task: str,
    *,
    namespace: Namespace | str | None = None,
    top_k: int = 3,
    scene: str | None = None,
) -> SystemMessage | None:
    """The lessons for ``task`` as a system message, or None (also when recall fails).

    ``Memory.recall`` degrades by itself (database, embedder, timeout); what it raises
    is the caller's mistake, e.g. a :class:`ValidationError` for a bad ``top_k``.
    """
    result = memory.recall(task, namespace=namespace, top_k=top_k, scene=scene)
    if result.warning:
        log.warning("recall degraded: %s", result.warning)
    return lessons_message(result.hits)


async def arecall_lessons(
    memory: AsyncMemory,
    task: str,
    *,
    namespace: Namespace | str | None = None,
    top_k: int = 3,
    scene: str | None = None,
) -> SystemMessage | None:
    """Async :func:`recall_lessons`."""
    result = await memory.recall(task, namespace=namespace, top_k=top_k, scene=scene)
    if result.warning:
        log.warning("recall degraded: %s", result.warning)
    return lessons_message(result.hits)


def _task_of(messages: Sequence[BaseMessage]) -> str:
    humans = [m for m in messages if isinstance(m, HumanMessage)]
    return message_text(humans[-1].content) if humans else ""


def _inject(messages: list[BaseMessage], lesson: SystemMessage) -> list[BaseMessage]:
    """Messages with the lessons first (an earlier lessons message is replaced)."""
    rest = [m for m in messages if not is_memory_message(m)]
    return [RemoveMessage(id=REMOVE_ALL_MESSAGES), lesson, *rest]


def recall_node(
    memory: Memory | AsyncMemory,
    *,
    namespace: Namespace | str | None = None,
    top_k: int = 3,
    scene: str | None = None,
    messages_key: str = "messages",
    query: Callable[[dict[str, Any]], str] | None = None,
) -> RunnableLambda[dict[str, Any], dict[str, Any]]:
    """A node to put after ``START``: recalls lessons for the task and puts them first.

    The task is the last human message (or ``query(state)``). The lessons arrive as
    a ``SystemMessage`` headed ``MEMORY_HEADER`` at the start of ``messages`` (the
    state key must use LangGraph's ``add_messages`` reducer). No lessons, or a
    failed recall: the node changes nothing. Bad arguments (``top_k``, ``scene``,
    ``namespace``) raise :class:`ValidationError`.

    Raises:
        ConfigurationError: ``memory`` is neither kind of memory; or, when the node
            runs, an :class:`AsyncMemory` in a sync run (``invoke``).
    """
    if not isinstance(memory, Memory | AsyncMemory):
        raise ConfigurationError(
            f"recall_node needs a Memory or an AsyncMemory, got {type(memory).__name__}"
        )

    def task(state: dict[str, Any]) -> str:
        return query(state) if query else _task_of(state.get(messages_key) or [])

    def sync(state: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(memory, Memory):
            raise ConfigurationError(
                "recall_node was given an AsyncMemory but the graph runs synchronously "
                "(invoke/stream): run it with ainvoke/astream, or pass a Memory"
            )
        text = task(state)
        lesson = (
            recall_lessons(memory, text, namespace=namespace, top_k=top_k, scene=scene)
            if text
            else None
        )
        if lesson is None:
            return {}
        return {messages_key: _inject(list(state.get(messages_key) or []), lesson)}

    async def aio(state: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(memory, AsyncMemory):  # blocking recall: keep it off the loop
            return await asyncio.get_running_loop().run_in_executor(None, sync, state)
        text = task(state)
        lesson = (
            await arecall_lessons(memory, text, namespace=namespace, top_k=top_k, scene=scene)
            if text
            else None
        )
        if lesson is None:
            return {}
        return {messages_key: _inject(list(state.get(messages_key) or []), lesson)}

    return RunnableLambda(sync, afunc=aio, name="hindsight_recall")
