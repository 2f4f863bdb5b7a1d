"""Our ``LLM`` protocol (reflection) from a LlamaIndex ``LLM``, e.g. ``Settings.llm``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from llama_index.core.base.llms.types import ChatMessage, ChatResponse
from llama_index.core.llms import LLM as LlamaIndexBaseLLM

from hindsight_core.errors import LLMError

if TYPE_CHECKING:
    from hindsight_core.reflection import LLMResponse

_PROMPT_KEYS = ("prompt_tokens", "input_tokens", "prompt_token_count")
_COMPLETION_KEYS = ("completion_tokens", "output_tokens", "candidates_token_count")


class LlamaIndexLLM:
    """Adapts any LlamaIndex ``LLM`` to Hindsight's ``LLM`` protocol.

    Messages are sent with ``chat`` / ``achat``; token usage is read from the
    response's ``additional_kwargs`` or ``raw["usage"]`` when the provider reports it
    (OpenAI-style integrations do), else left at 0.

    Example:
        >>> from llama_index.core import Settings
        >>> reflector = Reflector(memory, LlamaIndexLLM(Settings.llm))

    Args:
        llm: the LlamaIndex model.
        model_name: recorded with token usage; default: the model's metadata name.
    """

    def __init__(self, llm: LlamaIndexBaseLLM, *, model_name: str | None = None) -> None:
        if not isinstance(llm, LlamaIndexBaseLLM):
            raise TypeError(f"expected a llama_index LLM, got {type(llm).__name__}")
        self.llm = llm
        self.model_name = model_name or _metadata_name(llm)

    def complete(
        self, messages: list[dict[str, str]], *, json_schema: dict[str, Any] | None = None
    ) -> LLMResponse:
        """Send OpenAI-style messages; ``json_schema`` is described by the caller's prompt."""
        try:
            response = self.llm.chat(_to_chat(messages))
        except Exception as exc:
            raise LLMError(f"{self.model_name}: {exc}") from exc
        return self._response(response)

    async def acomplete(
        self, messages: list[dict[str, str]], *, json_schema: dict[str, Any] | None = None
    ) -> LLMResponse:
        """Async :meth:`complete`."""
        try:
            response = await self.llm.achat(_to_chat(messages))
        except Exception as exc:
            raise LLMError(f"{self.model_name}: {exc}") from exc
        return self._response(response)

    def _response(self, response: ChatResponse) -> LLMResponse:
        from hindsight_core.reflection import LLMResponse

        prompt, completion = token_usage(response)
        return LLMResponse(
            text=response.message.content or "",
            prompt_tokens=prompt,
            completion_tokens=completion,
            model=self.model_name,
        )


def token_usage(response: ChatResponse) -> tuple[int, int]:
    """(prompt, completion) tokens if the provider reported them, else (0, 0)."""
    sources: list[Any] = [response.additional_kwargs]
    raw = response.raw
    if isinstance(raw, Mapping):
        sources += [raw.get("usage"), raw.get("usage_metadata")]
    elif raw is not None:
        sources.append(getattr(raw, "usage", None))
    for usage in sources:
        prompt, completion = _pick(usage, _PROMPT_KEYS), _pick(usage, _COMPLETION_KEYS)
        if prompt or completion:
            return prompt, completion
    return 0, 0


def as_hindsight_llm(llm: Any) -> Any:
    """``None`` stays ``None`` (rule-based); a LlamaIndex LLM is wrapped; else as given."""
    if llm is None or not isinstance(llm, LlamaIndexBaseLLM):
        return llm
    return LlamaIndexLLM(llm)


def _pick(usage: Any, keys: tuple[str, ...]) -> int:
    if usage is None:
        return 0
    for key in keys:
        value = usage.get(key) if isinstance(usage, Mapping) else getattr(usage, key, None)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return int(value)
    return 0


def _to_chat(messages: list[dict[str, str]]) -> list[ChatMessage]:
    return [ChatMessage(role=m.get("role", "user"), content=m.get("content", "")) for m in messages]


def _metadata_name(llm: LlamaIndexBaseLLM) -> str:
    try:
        return str(llm.metadata.model_name or type(llm).__name__)
    except Exception:  # noqa: BLE001 - a model's metadata may fail any way: only a label
        return type(llm).__name__
