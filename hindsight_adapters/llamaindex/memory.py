"""``HindsightMemory``: chat memory that puts recalled lessons in the system message.

For chat engines and agents that take ``memory=`` (``SimpleChatEngine``,
``FunctionAgent``, ...). It wraps a short-term LlamaIndex memory (by default a
``llama_index.core.memory.Memory``) for the conversation itself and, on every
read, recalls the lessons relevant to the latest user message and merges them
into the system message, once: into the existing system message if the history
has one, else a new one in front. Nothing injected is stored in the history.

Serialization (an agent ``Context`` round trip): the fields are plain JSON (the
active chat history, the namespace, the ids of lessons shown). The core memory,
which holds a connection pool and maybe credentials, is not serialized: a
restored object finds the core memory of the object it was serialized from via
``memory_key`` (same process), else builds an ``AsyncMemory`` from the
``HINDSIGHT_*`` environment.
"""

from __future__ import annotations

import logging
import uuid
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import Field, PrivateAttr
from llama_index.core.memory import BaseMemory

from hindsight_core import AsyncMemory, Experience, Memory, RecallResult, SearchHit
from hindsight_core.errors import NotFoundError
from hindsight_core.models import show_namespace

from ._bridge import READ_NAMESPACES, CoreBridge, checked_scope, render_lessons
from ._messages import query_from, trajectory_from, with_system_text
from ._short_term import aactive_history, active_history, adispose, default_short_term
from .block import DEFAULT_HEADER
from .llm import as_hindsight_llm

if TYPE_CHECKING:
    from hindsight_core.reflection import ReflectionResult

log = logging.getLogger("hindsight.llamaindex")

# memory_key -> bridge, so that a Context restored in the same process reuses the core memory.
_BRIDGES: weakref.WeakValueDictionary[str, CoreBridge] = weakref.WeakValueDictionary()


class HindsightMemory(BaseMemory):
    """Short-term chat memory plus recalled Hindsight lessons in the system message.

    Example:
        >>> memory = HindsightMemory(memory=AsyncMemory(("acme", "support")),
        ...                          system_prompt="You are a support agent.")
        >>> agent = FunctionAgent(tools=[...], llm=llm)      # no system_prompt here
        >>> await agent.run("Reset my password", memory=memory)
        >>> await memory.aend_task(outcome="success")        # reflect on the run

    Args:
        memory: a hindsight ``Memory`` or ``AsyncMemory`` (see the module docstring
            for what happens when it is omitted).
        short_term: the short-term memory to wrap; default: a LlamaIndex ``Memory``
            with this object's ``session_id`` and ``token_limit``.
        reflection_llm: model for :meth:`end_task`: our ``LLM`` protocol or a
            LlamaIndex ``LLM``; ``None`` uses the rule-based distiller.
        tokenizer_fn: tokenizer of the default short-term memory (default: tiktoken).
    """

    namespace: tuple[str, ...] | None = Field(
        default=None, description="Namespace to recall from; default: the memory's own."
    )
    read_namespaces: list[tuple[str, ...] | str] | None = Field(
        default=None,
        description=READ_NAMESPACES + " Feedback on their lessons is recorded as given by "
        "the own namespace.",
    )
    scene: str | None = Field(default=None, description="Hard filter on the scene tag.")
    top_k: int = Field(default=5, ge=1, le=100)
    query_window: int = Field(default=1, ge=1)
    header: str = DEFAULT_HEADER
    system_prompt: str | None = Field(
        default=None,
        description="Put the agent's system prompt here (not on the agent) to get one "
        "system message holding both prompt and lessons.",
    )
    session_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    token_limit: int = Field(default=30_000, ge=1)
    chat_history: list[ChatMessage] = Field(
        default_factory=list, description="The active short-term history (for serialization)."
    )
    shown_ids: list[str] = Field(
        default_factory=list, description="Ids of lessons shown during the current task."
    )
    used_ids: list[str] = Field(
        default_factory=list, description="Ids marked helpful during the current task."
    )
    task_start: int = Field(
        default=0, ge=0, description="Index in the full history where the task began."
    )
    memory_key: str = Field(default_factory=lambda: uuid.uuid4().hex)

    _bridge: CoreBridge = PrivateAttr()
    _owns_bridge: bool = PrivateAttr(default=False)
    _short_term: BaseMemory | None = PrivateAttr(default=None)
    _owns_short_term: bool = PrivateAttr(default=False)
    _pending_history: bool = PrivateAttr(default=False)
    _tokenizer_fn: Callable[[str], list[Any]] | None = PrivateAttr(default=None)
    _last: tuple[str, RecallResult] | None = PrivateAttr(default=None)

    def __init__(
        self,
        *,
        memory: Memory | AsyncMemory | None = None,
        short_term: BaseMemory | None = None,
        reflection_llm: Any = None,
        tokenizer_fn: Callable[[str], list[Any]] | None = None,
        **data: Any,
    ) -> None:
        super().__init__(**checked_scope(data))
        bridge = _BRIDGES.get(self.memory_key) if memory is None else None
        if bridge is None:
            if memory is None:
                log.info(
                    "HindsightMemory restored without its core memory: building an "
                    "AsyncMemory from the HINDSIGHT_* settings"
                )
                memory = AsyncMemory(self.namespace or ("default",))
            bridge = CoreBridge(memory, as_hindsight_llm(reflection_llm))
            _BRIDGES[self.memory_key] = bridge
            self._owns_bridge = True
        elif reflection_llm is not None:
            bridge.llm = as_hindsight_llm(reflection_llm)
        self._bridge = bridge
        self._tokenizer_fn = tokenizer_fn
        self._short_term = short_term
        self._pending_history = bool(self.chat_history)

    @classmethod
    def class_name(cls) -> str:
        return "HindsightMemory"

    @classmethod
    def from_defaults(
        cls, chat_history: list[ChatMessage] | None = None, **kwargs: Any
    ) -> HindsightMemory:
        """Build one; ``chat_history`` seeds the short-term memory."""
        kwargs.pop("llm", None)
        return cls(chat_history=list(chat_history or []), **kwargs)

    # ------------------------------------------------------------------ introspection

    @property
    def bridge(self) -> CoreBridge:
        """The loop-safe handle on the core memory."""
        return self._bridge

    @property
    def short_term(self) -> BaseMemory:
        """The wrapped short-term memory (created on first use)."""
        if self._short_term is None:
            self._short_term = default_short_term(
                self.session_id, self.token_limit, self._tokenizer_fn
            )
            self._owns_short_term = True
        return self._short_term

    @property
    def last_hits(self) -> list[SearchHit]:
        """The hits of the latest recall, best first."""
        return list(self._last[1].hits) if self._last else []

    # ------------------------------------------------------------------ async API (agents)

    async def aget(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        """The history with recalled lessons merged into the system message."""
        messages = await (await self._ast()).aget(input=input, **kwargs)
        query = self._query(messages, input)
        if not query:
            return self._inject(messages, None)
        result = self._cached(query)
        if result is None:
            result = await self._bridge.arecall(
                query, **self._scope(), scene=self.scene, top_k=self.top_k
            )
            self._remember(query, result)
        return self._inject(messages, result)

    async def aget_all(self) -> list[ChatMessage]:
        """Every message of the session (flushed ones too), without lessons."""
        return list(await (await self._ast()).aget_all())

    async def aput(self, message: ChatMessage) -> None:
        st = await self._ast()
        await st.aput(message)
        self.chat_history = await aactive_history(st)

    async def aput_messages(self, messages: list[ChatMessage]) -> None:
        st = await self._ast()
        await st.aput_messages(messages)
        self.chat_history = await aactive_history(st)

    async def aset(self, messages: list[ChatMessage]) -> None:
        st = await self._ast()
        await st.aset(messages)
        self.chat_history = await aactive_history(st)

    async def areset(self) -> None:
        """Clear the history and the current task's lesson ids."""
        st = await self._ast()
        await st.areset()
        self.chat_history, self.task_start = [], 0
        self._new_task()

    async def aend_task(
        self, outcome: str = "success", *, final_state: str = "", used: list[object] | None = None
    ) -> ReflectionResult:
        """End the current task: reflect on the conversation since it began.

        Args:
            outcome: ``success``, ``failure``, ``partial`` or ``unknown``.
            final_state: how things stood at the end (default: the last answer).
            used: ids of lessons that helped (default: those given :meth:`afeedback`).
        """
        history = await self.aget_all()
        trajectory = self._trajectory(history, outcome, final_state, used)
        self.task_start = len(history)
        self._new_task()
        return await self._bridge.areflect(trajectory, namespace=self.namespace)

    async def afeedback(self, record_id: object, helpful: bool = True) -> Experience:
        """Mark a shown lesson as (un)helpful; helpful ones count as used at end_task."""
        where = self.namespace
        if self.read_namespaces:
            where = await self._bridge.alocate(record_id, self._scope()["namespaces"])
        record = await self._bridge.amark_used(
            record_id, helpful, namespace=self._found(record_id, where), by=self._by()
        )
        self._note_feedback(record, helpful)
        return record

    async def aclose(self) -> None:
        """Close the default short-term store and what this object opened."""
        st = self._short_term
        if st is not None and self._owns_short_term:
            await adispose(st)
            self._short_term = None
        if self._owns_bridge:
            self._bridge.close()

    # ------------------------------------------------------------------ sync API (engines)

    def get(self, input: str | None = None, **kwargs: Any) -> list[ChatMessage]:
        messages = self._st().get(input=input, **kwargs)
        query = self._query(messages, input)
        if not query:
            return self._inject(messages, None)
        result = self._cached(query)
        if result is None:
            result = self._bridge.recall(query, **self._scope(), scene=self.scene, top_k=self.top_k)
            self._remember(query, result)
        return self._inject(messages, result)

    def get_all(self) -> list[ChatMessage]:
        return list(self._st().get_all())

    def put(self, message: ChatMessage) -> None:
        st = self._st()
        st.put(message)
        self.chat_history = active_history(st)

    def put_messages(self, messages: list[ChatMessage]) -> None:
        st = self._st()
        st.put_messages(messages)
        self.chat_history = active_history(st)

    def set(self, messages: list[ChatMessage]) -> None:
        st = self._st()
        st.set(messages)
        self.chat_history = active_history(st)

    def reset(self) -> None:
        self._st().reset()
        self.chat_history, self.task_start = [], 0
        self._new_task()

    def end_task(
        self, outcome: str = "success", *, final_state: str = "", used: list[object] | None = None
    ) -> ReflectionResult:
        """Sync :meth:`aend_task`."""
        history = self.get_all()
        trajectory = self._trajectory(history, outcome, final_state, used)
        self.task_start = len(history)
        self._new_task()
        return self._bridge.reflect(trajectory, namespace=self.namespace)

    def feedback(self, record_id: object, helpful: bool = True) -> Experience:
        """Sync :meth:`afeedback`."""
        where = self.namespace
        if self.read_namespaces:
            where = self._bridge.locate(record_id, self._scope()["namespaces"])
        record = self._bridge.mark_used(
            record_id, helpful, namespace=self._found(record_id, where), by=self._by()
        )
        self._note_feedback(record, helpful)
        return record

    # ------------------------------------------------------------------ internals

    async def _ast(self) -> BaseMemory:
        st = self.short_term
        if self._pending_history:
            self._pending_history = False
            await st.aset(list(self.chat_history))
        return st

    def _st(self) -> BaseMemory:
        st = self.short_term
        if self._pending_history:
            self._pending_history = False
            st.set(list(self.chat_history))
        return st

    def _scope(self) -> dict[str, Any]:
        return self._bridge.scope(self.namespace, self.read_namespaces)

    def _found(self, record_id: object, where: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if self.read_namespaces and where is None:
            raise NotFoundError(f"no record {record_id} in the namespaces this memory reads")
        return where

    def _by(self) -> str:
        return show_namespace(self.namespace or self._bridge.namespace)

    def _query(self, messages: list[ChatMessage], input: str | None) -> str:
        if isinstance(input, str) and input:
            messages = [*messages, ChatMessage(role="user", content=input)]
        return query_from(messages, self.query_window)

    def _cached(self, query: str) -> RecallResult | None:
        # An agent reads memory several times per run with the same question.
        return self._last[1] if self._last and self._last[0] == query else None

    def _remember(self, query: str, result: RecallResult) -> None:
        self._last = None if result.degraded else (query, result)
        for hit in result.hits:
            if str(hit.record.id) not in self.shown_ids:
                self.shown_ids.append(str(hit.record.id))

    def _inject(
        self, messages: list[ChatMessage], result: RecallResult | None
    ) -> list[ChatMessage]:
        lessons = render_lessons(result.hits, self.header) if result else ""
        text = "\n\n".join(t for t in (self.system_prompt, lessons) if t)
        return with_system_text(list(messages), text)

    def _trajectory(
        self, history: list[ChatMessage], outcome: str, final_state: str, used: list[object] | None
    ) -> Any:
        return trajectory_from(
            history[self.task_start :],
            outcome=outcome,
            final_state=final_state,
            recalled=[uuid.UUID(i) for i in self.shown_ids],
            used=[uuid.UUID(str(i)) for i in (used if used is not None else self.used_ids)],
            scene=self.scene,
            source={"agent": "llamaindex", "session": self.session_id},
        )

    def _note_feedback(self, record: Experience, helpful: bool) -> None:
        rid = str(record.id)
        if helpful and rid not in self.used_ids:
            self.used_ids.append(rid)
        if not helpful and rid in self.used_ids:
            self.used_ids.remove(rid)

    def _new_task(self) -> None:
        self.shown_ids, self.used_ids, self._last = [], [], None
