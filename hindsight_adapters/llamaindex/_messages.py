"""LlamaIndex chat messages in and out: the recall query, the trajectory, the system message."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock

if TYPE_CHECKING:
    from hindsight_core.reflection import Trajectory

_QUERY_MAX_CHARS = 2000


def role_of(message: ChatMessage) -> str:
    """The role as a plain string (``"user"``, ``"assistant"``, ``"tool"``, ...)."""
    role = message.role
    return role.value if isinstance(role, MessageRole) else str(role)


def text_of(message: ChatMessage) -> str:
    """The message's text blocks joined (tool calls and images left out)."""
    return "\n".join(b.text for b in message.blocks if isinstance(b, TextBlock)).strip()


def query_from(messages: Sequence[ChatMessage] | None, window: int = 1) -> str:
    """What to recall for: the text of the last ``window`` user messages (newest last).

    Falls back to the last message with text when there is no user message.
    """
    if not messages:
        return ""
    users = [text_of(m) for m in messages if role_of(m) == "user" and text_of(m)]
    picked = (
        users[-window:]
        if users
        else [t for t in (text_of(m) for m in messages if role_of(m) != "system") if t][-1:]
    )
    return "\n".join(picked)[-_QUERY_MAX_CHARS:]


def trajectory_from(
    messages: Iterable[ChatMessage],
    *,
    outcome: str = "unknown",
    final_state: str = "",
    goal: str | None = None,
    recalled: Iterable[Any] = (),
    used: Iterable[Any] = (),
    scene: str | None = None,
    source: dict[str, Any] | None = None,
) -> Trajectory:
    """A :class:`~hindsight_core.reflection.Trajectory` from a conversation.

    System messages are left out (they carry the prompt and the injected lessons);
    the goal is the first user message unless given; tool calls and tool results
    become steps of their own.
    """
    from hindsight_core.reflection import Step, Trajectory

    steps: list[Step] = []
    first_user = ""
    last_answer = ""
    for message in messages:
        role = role_of(message)
        text = text_of(message)
        if role == "system":
            continue
        calls = [b for b in message.blocks if isinstance(b, ToolCallBlock)]
        if role == "user" and not first_user:
            first_user = text
        if calls:
            if text:
                steps.append(Step(kind="thought", content=text, role=role))
            for call in calls:
                args = (
                    call.tool_kwargs
                    if isinstance(call.tool_kwargs, dict)
                    else {"input": str(call.tool_kwargs)}
                )
                steps.append(Step(kind="tool_call", tool=call.tool_name, args=args))
        elif role == "tool":
            name = message.additional_kwargs.get("name") or message.additional_kwargs.get(
                "tool_name"
            )
            steps.append(Step(kind="tool_result", content=text, tool=str(name) if name else None))
        elif text:
            steps.append(Step(kind="message", content=text, role=role))
            if role == "assistant":
                last_answer = text
    return Trajectory(
        goal=(goal or first_user or "conversation")[:_QUERY_MAX_CHARS],
        steps=steps,
        outcome=outcome,  # type: ignore[arg-type]
        final_state=final_state or last_answer,
        recalled=list(recalled),
        used=list(used),
        scene=scene,
        source=source or {},
    )


def with_system_text(messages: list[ChatMessage], text: str) -> list[ChatMessage]:
    """Put ``text`` into the system message: appended to the first one, or a new one first.

    The input list is not changed; the messages returned are copies where changed.
    """
    if not text:
        return messages
    for i, message in enumerate(messages):
        if role_of(message) == "system":
            merged = message.model_copy(deep=True)
            merged.blocks = [*merged.blocks, TextBlock(text="\n" + text)]
            return [*messages[:i], merged, *messages[i + 1 :]]
    return [ChatMessage(role="system", content=text), *messages]
