"""Reflection after a LangGraph run (recall before one is in ``recall.py``).

- :func:`thread_trajectory` / :func:`reflect_thread`: turn a finished thread's
  checkpoint history (messages, tool calls, tool errors, final state) into the
  core's :class:`~hindsight_core.reflection.Trajectory` and distill it; the
  recalled-lessons message is not part of the run, but the lessons it named are
  credited.
- :func:`reflection_node`: a node to put before ``END`` that reflects on the run
  in the background; it never blocks the run and never raises into it.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig, RunnableLambda

from hindsight_core import AsyncMemory, Memory
from hindsight_core.models import Namespace
from hindsight_core.reflection import (
    LLM,
    AsyncReflector,
    BackgroundReflector,
    ReflectionResult,
    Reflector,
    Step,
    Trajectory,
)

from ._messages import message_text
from .checkpoint import HindsightCheckpointer
from .recall import RECALLED_KEY, is_memory_message

__all__ = [
    "areflect_thread",
    "athread_trajectory",
    "messages_trajectory",
    "reflect_thread",
    "reflection_node",
    "thread_trajectory",
]

log = logging.getLogger("hindsight.langgraph")

_CLIP = 2000


# ---------------------------------------------------------------------- trajectory


def messages_trajectory(
    messages: Sequence[BaseMessage],
    *,
    goal: str | None = None,
    outcome: str | None = None,
    scene: str | None = None,
    source: dict[str, Any] | None = None,
) -> Trajectory:
    """A trajectory from a run's messages.

    The goal is the first human message (unless given); AI text is a thought (when
    it comes with tool calls) or a message; each tool call is a ``tool_call`` step
    and each ``ToolMessage`` a ``tool_result``, or an ``error`` when its status is
    "error". The final AI answer is the final state. Without an explicit outcome, a
    run that ends with an AI answer (no pending tool call) is a ``success``.
    """
    steps: list[Step] = []
    recalled: list[uuid.UUID] = []
    first_human: str | None = None
    final = ""
    for m in messages:
        text = message_text(m.content)[:_CLIP]
        if is_memory_message(m):
            for rid in m.additional_kwargs.get(RECALLED_KEY, []):
                recalled.append(uuid.UUID(str(rid)))
        elif isinstance(m, SystemMessage):
            continue
        elif isinstance(m, HumanMessage):
            first_human = first_human if first_human is not None else text
            steps.append(Step(kind="message", role="user", content=text))
        elif isinstance(m, AIMessage):
            if text:
                steps.append(
                    Step(
                        kind="thought" if m.tool_calls else "message",
                        role="assistant",
                        content=text,
                    )
                )
            for call in m.tool_calls:
                steps.append(
                    Step(kind="tool_call", tool=call["name"], args=dict(call.get("args") or {}))
                )
            final = text if not m.tool_calls else final
        elif isinstance(m, ToolMessage):
            if m.status == "error":
                steps.append(Step(kind="error", tool=m.name, content=text))
            else:
                steps.append(Step(kind="tool_result", tool=m.name, content=text))
    last = messages[-1] if messages else None
    done = isinstance(last, AIMessage) and not last.tool_calls
    return Trajectory(
        goal=(goal or first_human or "unnamed task")[:_CLIP],
        steps=steps,
        outcome=outcome or ("success" if done else "unknown"),  # type: ignore[arg-type]
        final_state=final,
        recalled=recalled,
        scene=scene,
        source={"agent": "langgraph", **(source or {})},
    )


def _history_messages(tuples: Iterable[Any], messages_key: str) -> list[BaseMessage]:
    """Every message the checkpoints held, oldest first (also ones later removed)."""
    seen: dict[str, BaseMessage] = {}
    for tup in tuples:  # oldest first
        for m in tup.checkpoint["channel_values"].get(messages_key) or []:
            if isinstance(m, BaseMessage):
                seen.setdefault(m.id or f"{type(m).__name__}:{len(seen)}:{m.content!r}", m)
    return list(seen.values())


def _branch(tuples: list[Any]) -> list[Any]:
    """The checkpoints of the thread's current branch, oldest first: from the newest
    back along parent links. Time travel (a run resumed from an earlier checkpoint)
    leaves the abandoned branch in the history; its messages are not this run's."""
    by_id = {t.config["configurable"]["checkpoint_id"]: t for t in tuples}
    branch: list[Any] = []
    tup = tuples[0] if tuples else None  # list() yields the newest first
    while tup is not None and len(branch) < len(tuples):
        branch.append(tup)
        parent = (tup.parent_config or {}).get("configurable", {}).get("checkpoint_id")
        tup = by_id.get(parent) if parent else None
    return branch[::-1]


def _thread_config(thread_id: str, checkpoint_ns: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}}


def thread_trajectory(
    checkpointer: Any,
    thread_id: str,
    *,
    checkpoint_ns: str = "",
    messages_key: str = "messages",
    **options: Any,
) -> Trajectory:
    """The trajectory of a thread, from its checkpoint history (sync checkpointer API).

    Args:
        checkpointer: any LangGraph checkpointer (``HindsightCheckpointer``, ...).
        thread_id: the thread to read.
        checkpoint_ns: the graph namespace ("" = the root graph).
        messages_key: the state key holding the messages.
        **options: ``goal``, ``outcome``, ``scene``, ``source`` for the trajectory.
    """
    tuples = list(checkpointer.list(_thread_config(thread_id, checkpoint_ns)))
    return messages_trajectory(
        _history_messages(_branch(tuples), messages_key), **_options(thread_id, options)
    )


async def athread_trajectory(
    checkpointer: Any,
    thread_id: str,
    *,
    checkpoint_ns: str = "",
    messages_key: str = "messages",
    **options: Any,
) -> Trajectory:
    """Async :func:`thread_trajectory` (the checkpointer's async API)."""
    tuples = [t async for t in checkpointer.alist(_thread_config(thread_id, checkpoint_ns))]
    return messages_trajectory(
        _history_messages(_branch(tuples), messages_key), **_options(thread_id, options)
    )


def _options(thread_id: str, options: dict[str, Any]) -> dict[str, Any]:
    source = {"thread": str(thread_id), **(options.pop("source", None) or {})}
    return {**options, "source": source}


def _memory_of(checkpointer: Any, memory: Memory | None) -> Memory:
    if memory is not None:
        return memory
    if not isinstance(checkpointer, HindsightCheckpointer):
        raise ValueError("pass memory=: the checkpointer is not a HindsightCheckpointer")
    return checkpointer.memory


def reflect_thread(
    checkpointer: Any,
    thread_id: str,
    *,
    memory: Memory | None = None,
    llm: LLM | None = None,
    namespace: Namespace | str | None = None,
    **options: Any,
) -> ReflectionResult:
    """Distill a finished thread into lessons and store them.

    Args:
        checkpointer: where the thread's checkpoints are.
        thread_id: the finished thread.
        memory: where lessons go; default: the ``HindsightCheckpointer``'s own.
        llm: the distilling model (e.g. ``LangChainLLM(chat_model)``); ``None``: rule-based.
        namespace: the lessons' namespace; default: the memory's.
        **options: passed to :func:`thread_trajectory` (``goal``, ``outcome``, ``scene``...).

    Returns:
        The core's :class:`~hindsight_core.reflection.ReflectionResult`.
    """
    trajectory = thread_trajectory(checkpointer, thread_id, **options)
    return Reflector(_memory_of(checkpointer, memory), llm).reflect(trajectory, namespace=namespace)


async def areflect_thread(
    checkpointer: Any,
    thread_id: str,
    *,
    memory: AsyncMemory,
    llm: LLM | None = None,
    namespace: Namespace | str | None = None,
    **options: Any,
) -> ReflectionResult:
    """Async :func:`reflect_thread` (needs an :class:`~hindsight_core.AsyncMemory`)."""
    trajectory = await athread_trajectory(checkpointer, thread_id, **options)
    return await AsyncReflector(memory, llm).reflect(trajectory, namespace=namespace)


# ---------------------------------------------------------------------- after a run


class ReflectionNode:
    """A graph node that reflects on the run in the background (see :func:`reflection_node`)."""

    def __init__(
        self,
        memory: Memory | AsyncMemory,
        *,
        llm: LLM | None = None,
        namespace: Namespace | str | None = None,
        messages_key: str = "messages",
        scene: str | None = None,
        outcome: Callable[[dict[str, Any]], str | None] | None = None,
    ) -> None:
        self.memory = memory
        self.namespace = namespace
        self.messages_key = messages_key
        self.scene = scene
        self.outcome = outcome
        self._thread = (
            BackgroundReflector(Reflector(memory, llm)) if isinstance(memory, Memory) else None
        )
        self._async = AsyncReflector(memory, llm) if isinstance(memory, AsyncMemory) else None
        self.futures: list[Future[ReflectionResult]] = []

    def _trajectory(self, state: dict[str, Any], config: RunnableConfig) -> Trajectory:
        thread = (config.get("configurable") or {}).get("thread_id")
        return messages_trajectory(
            list(state.get(self.messages_key) or []),
            scene=self.scene,
            outcome=self.outcome(state) if self.outcome else None,
            source={"thread": str(thread)} if thread is not None else {},
        )

    def sync(self, state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        try:
            if self._thread is None:
                log.warning("reflection_node: an AsyncMemory needs an async run (ainvoke)")
                return {}
            if len(self.futures) >= 256:  # long-lived graphs: forget finished ones
                self.futures = [f for f in self.futures if not f.done()]
            self.futures.append(
                self._thread.submit(self._trajectory(state, config), namespace=self.namespace)
            )
        except Exception:  # never into the run
            log.exception("reflection_node: could not start reflection")
        return {}

    async def aio(self, state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
        if self._async is None:
            return self.sync(state, config)
        try:
            self._async.submit(self._trajectory(state, config), namespace=self.namespace)
        except Exception:
            log.exception("reflection_node: could not start reflection")
        return {}

    def wait(self, timeout: float | None = None) -> list[ReflectionResult]:
        """Wait for the reflections started so far (thread-based); their results."""
        done = [f.result(timeout=timeout) for f in self.futures]
        self.futures.clear()
        return done

    async def await_all(self) -> list[ReflectionResult]:
        """Wait for the reflections started so far (both kinds)."""
        results = list(await self._async.wait()) if self._async is not None else []
        return results + self.wait()

    def close(self) -> None:
        """Stop the background thread (after the pending reflections)."""
        if self._thread is not None:
            self._thread.close()


def reflection_node(
    memory: Memory | AsyncMemory,
    *,
    llm: LLM | None = None,
    namespace: Namespace | str | None = None,
    messages_key: str = "messages",
    scene: str | None = None,
    outcome: Callable[[dict[str, Any]], str | None] | None = None,
) -> RunnableLambda[dict[str, Any], dict[str, Any]]:
    """A node to put before ``END``: reflects on the run's messages in the background.

    It returns at once (no state change), never raises into the run, and works in
    sync (``invoke``) and async (``ainvoke``) runs. The node's ``.reflection``
    attribute (:class:`ReflectionNode`) has ``wait()`` / ``await_all()`` for scripts
    and tests that must see the lessons before exiting.

    Example:
        >>> builder.add_node("reflect", reflection_node(memory, llm=LangChainLLM(model)))
        >>> builder.add_edge("reflect", END)
    """
    node = ReflectionNode(
        memory,
        llm=llm,
        namespace=namespace,
        messages_key=messages_key,
        scene=scene,
        outcome=outcome,
    )
    runnable = RunnableLambda(node.sync, afunc=node.aio, name="hindsight_reflect")
    runnable.reflection = node  # type: ignore[attr-defined]
    return runnable
