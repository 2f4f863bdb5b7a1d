"""The LLM protocol reflection uses, and a scripted model for tests and offline demos.

Reflection needs only chat completion: OpenAI-style messages in, text out, plus
token counts. Providers: :class:`~hindsight_core.llms.openai.OpenAICompatibleLLM`
(OpenAI, Ollama, vLLM, llama.cpp server), :class:`ScriptedLLM`, and in the adapters
a LangChain chat model or a LlamaIndex LLM.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import LLMError
from ..llms.base import LLM, LLMResponse

if TYPE_CHECKING:
    from ..settings import Settings


class ScriptedLLM:
    """Answers from a script, in order: for tests and offline demos.

    Args:
        responses: each call takes the next entry; a string or an
            :class:`LLMResponse` is returned, an exception is raised. Past the end,
            :class:`~hindsight_core.errors.LLMError` is raised.
        model_name: reported as the model (and in token usage).

    Attributes:
        calls: every call's ``{"messages": ..., "json_schema": ...}``, in order.
    """

    def __init__(
        self, responses: Sequence[str | LLMResponse | Exception], *, model_name: str = "scripted"
    ) -> None:
        self.model_name = model_name
        self._responses = list(responses)
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def complete(
        self, messages: list[dict[str, str]], *, json_schema: dict[str, Any] | None = None
    ) -> LLMResponse:
        with self._lock:
            self.calls.append({"messages": [dict(m) for m in messages], "json_schema": json_schema})
            if len(self.calls) > len(self._responses):
                raise LLMError(f"scripted model has no answer for call {len(self.calls)}")
            answer = self._responses[len(self.calls) - 1]
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, LLMResponse):
            return answer
        prompt = sum(len(m.get("content", "")) for m in messages) // 4
        return LLMResponse(
            text=answer,
            prompt_tokens=prompt,
            completion_tokens=len(answer) // 4,
            model=self.model_name,
        )

    async def acomplete(
        self, messages: list[dict[str, str]], *, json_schema: dict[str, Any] | None = None
    ) -> LLMResponse:
        return self.complete(messages, json_schema=json_schema)

    @property
    def remaining(self) -> int:
        """How many scripted answers are left."""
        return max(0, len(self._responses) - len(self.calls))


def llm_from_settings(settings: Settings) -> LLM | None:
    """The OpenAI-compatible model ``HINDSIGHT_LLM_*`` describe, or ``None`` if unset.

    ``None`` means: reflect with the rule-based distiller.
    """
    if not settings.llm_configured:
        return None
    from ..llms.openai import OpenAICompatibleLLM

    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
    assert settings.llm_base_url and settings.llm_model
    return OpenAICompatibleLLM(
        settings.llm_base_url, settings.llm_model, api_key=key, timeout=settings.llm_timeout
    )


__all__ = ["LLM", "LLMResponse", "ScriptedLLM", "llm_from_settings"]
