"""``HindsightMemoryBlock``: Hindsight lessons as a block of LlamaIndex's ``Memory``."""

from __future__ import annotations

import logging
import math
from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.memory import BaseMemoryBlock

from hindsight_core import AsyncMemory, Memory, SearchHit

from ._bridge import READ_NAMESPACES, CoreBridge, checked_scope, render_lessons
from ._messages import query_from, trajectory_from
from .llm import as_hindsight_llm

log = logging.getLogger("hindsight.llamaindex")

DEFAULT_HEADER = "Lessons from earlier runs (most relevant first; cite an id if one helps):"


class HindsightMemoryBlock(BaseMemoryBlock[str]):
    """Recalls Hindsight lessons relevant to the conversation, for ``Memory.from_defaults``.

    On every ``Memory.get`` the block recalls the lessons relevant to the last user
    message(s) and renders them compactly, lesson first, then its trigger and id.
    Messages that ``Memory`` flushes out of its short-term history arrive in
    ``_aput``; with ``reflect_on_flush=True`` they are handed to reflection in the
    background (the chat does not wait for it).

    Recall never breaks the chat: if the database is down or slow the block is
    empty and a warning is logged.

    Example:
        >>> from llama_index.core.memory import Memory as ChatMemory
        >>> block = HindsightMemoryBlock(memory=AsyncMemory(("acme", "support")))
        >>> chat_memory = ChatMemory.from_defaults(memory_blocks=[block])

    Args:
        memory: a hindsight ``Memory`` or ``AsyncMemory`` (keyword only). An
            ``AsyncMemory`` is awaited on the loop it belongs to; when LlamaIndex
            runs the block on another loop (its sync wrappers do), a sync ``Memory``
            sharing its configuration is used in a worker thread instead.
        reflection_llm: a model for reflection: our ``LLM`` protocol or a LlamaIndex
            ``LLM`` (wrapped); ``None`` uses the rule-based distiller.
    """

    name: str = Field(default="hindsight_lessons", description="Block name inside Memory.")
    description: str | None = Field(default="Lessons Hindsight learned from earlier runs.")
    priority: int = Field(
        default=1,
        description="LlamaIndex truncates non-zero priorities (lowest first) when over budget.",
    )
    namespace: tuple[str, ...] | None = Field(
        default=None, description="Namespace to recall from; default: the memory's own."
    )
    read_namespaces: list[tuple[str, ...] | str] | None = Field(
        default=None, description=READ_NAMESPACES
    )
    scene: str | None = Field(default=None, description="Hard filter on the scene tag.")
    top_k: int = Field(default=5, ge=1, le=100)
    query_window: int = Field(default=1, ge=1, description="User messages used as the query.")
    header: str = DEFAULT_HEADER
    reflect_on_flush: bool = Field(
        default=False, description="Reflect on messages flushed from short-term memory."
    )

    _bridge: CoreBridge = PrivateAttr()
    _last_hits: list[SearchHit] = PrivateAttr(default_factory=list)
    _shown: list[str] = PrivateAttr(default_factory=list)
    _last_warning: str | None = PrivateAttr(default=None)
    _last_job: Any = PrivateAttr(default=None)

    def __init__(
        self, *, memory: Memory | AsyncMemory, reflection_llm: Any = None, **data: Any
    ) -> None:
        super().__init__(**checked_scope(data))
        self._bridge = CoreBridge(memory, as_hindsight_llm(reflection_llm))

    # ------------------------------------------------------------------ introspection

    @property
    def bridge(self) -> CoreBridge:
        """The loop-safe handle on the core memory."""
        return self._bridge

    @property
    def last_hits(self) -> list[SearchHit]:
        """The hits of the latest recall, best first."""
        return list(self._last_hits)

    @property
    def shown_ids(self) -> list[str]:
        """Ids of every lesson this block has shown, oldest first, without repeats."""
        return list(self._shown)

    @property
    def last_reflection(self) -> Any:
        """The task or future of the latest background reflection (``None`` before one)."""
        return self._last_job

    @property
    def last_warning(self) -> str | None:
        """Why the latest recall came back empty, if it failed."""
        return self._last_warning

    # ------------------------------------------------------------------ BaseMemoryBlock

    async def _aget(self, messages: list[ChatMessage] | None = None, **block_kwargs: Any) -> str:
        """Recall and render; ``block_kwargs`` (``session_id``, ...) are ignored."""
        query = query_from(messages, self.query_window)
        if not query:
            return ""
        result = await self._bridge.arecall(
            query,
            **self._bridge.scope(self.namespace, self.read_namespaces),
            scene=self.scene,
            top_k=self.top_k,
        )
        self._last_warning = result.warning
        self._last_hits = list(result.hits)
        for hit in result.hits:
            if str(hit.record.id) not in self._shown:
                self._shown.append(str(hit.record.id))
        return render_lessons(result.hits, self.header)

    async def _aput(self, messages: list[ChatMessage]) -> None:
        """Messages flushed from short-term memory: reflect on them in the background."""
        if not self.reflect_on_flush or not messages:
            return
        trajectory = trajectory_from(
            messages,
            recalled=self._shown,
            scene=self.scene,
            source=_source(messages),
        )
        try:
            self._last_job = self._bridge.submit(trajectory, namespace=self.namespace)
        except Exception:  # reflection must never break the chat
            log.warning("could not submit the flushed messages to reflection", exc_info=True)

    async def atruncate(self, content: str, tokens_to_truncate: int) -> str | None:
        """Drop the lowest-ranked lessons (the last lines) until enough tokens are freed."""
        lines = content.splitlines()
        freed = 0
        while len(lines) > 1 and freed < tokens_to_truncate:
            freed += _estimate_tokens(lines.pop())
        return "\n".join(lines) if len(lines) > 1 else None

    # ------------------------------------------------------------------ lifecycle

    async def await_reflections(self, timeout: float | None = None) -> None:
        """Wait for background reflections submitted so far (on this loop)."""
        await self._bridge.wait(timeout)

    def close(self) -> None:
        """Stop background reflection and close what the block opened."""
        self._bridge.close()


def _estimate_tokens(line: str) -> int:
    # ~4 characters per token for English with cl100k; a little over is harmless.
    return max(1, math.ceil(len(line) / 4))


def _source(messages: list[ChatMessage]) -> dict[str, Any]:
    source: dict[str, Any] = {"agent": "llamaindex"}
    for message in messages:
        session = message.additional_kwargs.get("session_id")
        if session:
            source["session"] = str(session)[:200]
            break
    return source
