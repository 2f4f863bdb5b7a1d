"""The chat-model protocol reflection uses (re-exported by ``hindsight_core.reflection``).

Kept apart from the providers and from reflection so that either can be imported
first without an import cycle.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel


class LLMResponse(BaseModel):
    """A model's answer and what it cost."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model: str = ""


@runtime_checkable
class LLM(Protocol):
    """A chat model.

    ``json_schema``, when given, is the JSON Schema the answer should follow;
    providers that support structured output pass it on, others may ignore it
    (the answer is parsed defensively either way).
    """

    model_name: str

    def complete(
        self, messages: list[dict[str, str]], *, json_schema: dict[str, Any] | None = None
    ) -> LLMResponse: ...

    async def acomplete(
        self, messages: list[dict[str, str]], *, json_schema: dict[str, Any] | None = None
    ) -> LLMResponse: ...
