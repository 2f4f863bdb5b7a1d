"""A LangChain chat model as the core's :class:`~hindsight_core.reflection.LLM`.

Lets reflection use whatever model a LangGraph agent already has::

    from langchain_openai import ChatOpenAI
    llm = LangChainLLM(ChatOpenAI(model="gpt-4o-mini"))
    reflect_thread(checkpointer, thread_id, memory=memory, llm=llm)
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from hindsight_core.errors import LLMError
from hindsight_core.reflection import LLMResponse

from ._messages import message_text

__all__ = ["LangChainLLM"]

_ROLES = {
    "system": SystemMessage,
    "user": HumanMessage,
    "human": HumanMessage,
    "assistant": AIMessage,
    "ai": AIMessage,
}


def to_langchain(messages: list[dict[str, str]]) -> list[BaseMessage]:
    """OpenAI-style ``{"role", "content"}`` dicts as LangChain messages."""
    out: list[BaseMessage] = []
    for m in messages:
        cls = _ROLES.get(m.get("role", "user"), HumanMessage)
        out.append(cls(content=m.get("content", "")))
    return out


class LangChainLLM:
    """Wraps a LangChain ``BaseChatModel`` (sync ``invoke`` and async ``ainvoke``).

    Args:
        chat_model: any LangChain chat model.
        model_name: reported in token usage; default: the model's own name.
        use_json_mode: when a JSON schema is asked for, bind
            ``response_format={"type": "json_object"}`` (OpenAI-style models).
            Off by default: the answer is parsed defensively either way.
    """

    def __init__(
        self,
        chat_model: BaseChatModel,
        *,
        model_name: str | None = None,
        use_json_mode: bool = False,
    ) -> None:
        self.chat_model = chat_model
        self.use_json_mode = use_json_mode
        self.model_name = model_name or _model_name(chat_model)

    def _model(self, json_schema: dict[str, Any] | None) -> Any:
        if json_schema is not None and self.use_json_mode:
            return self.chat_model.bind(response_format={"type": "json_object"})
        return self.chat_model

    def complete(
        self, messages: list[dict[str, str]], *, json_schema: dict[str, Any] | None = None
    ) -> LLMResponse:
        """One chat completion; token counts from the message's ``usage_metadata``."""
        try:
            answer = self._model(json_schema).invoke(to_langchain(messages))
        except Exception as exc:  # any provider error becomes the core's LLMError
            raise LLMError(f"{self.model_name}: {type(exc).__name__}: {exc}") from exc
        return self._response(answer)

    async def acomplete(
        self, messages: list[dict[str, str]], *, json_schema: dict[str, Any] | None = None
    ) -> LLMResponse:
        """Async :meth:`complete` (the model's native ``ainvoke``)."""
        try:
            answer = await self._model(json_schema).ainvoke(to_langchain(messages))
        except Exception as exc:
            raise LLMError(f"{self.model_name}: {type(exc).__name__}: {exc}") from exc
        return self._response(answer)

    def _response(self, answer: BaseMessage) -> LLMResponse:
        usage = getattr(answer, "usage_metadata", None) or {}
        return LLMResponse(
            text=message_text(answer.content),
            prompt_tokens=int(usage.get("input_tokens", 0) or 0),
            completion_tokens=int(usage.get("output_tokens", 0) or 0),
            model=self.model_name,
        )


def _model_name(chat_model: BaseChatModel) -> str:
    for attr in ("model_name", "model", "model_id"):
        value = getattr(chat_model, attr, None)
        if isinstance(value, str) and value:
            return value
    return type(chat_model).__name__
