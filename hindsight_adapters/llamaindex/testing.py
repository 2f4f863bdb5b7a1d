"""A scripted LlamaIndex LLM for tests and offline demos (no network, no weights).

It drives ``SimpleChatEngine`` and ``FunctionAgent`` (it is a function-calling
model) and records every prompt it receives, so a test can assert what the model
saw. Its answers come from a list, or from a function of the prompt, which lets a
demo answer differently depending on whether a lesson was in the prompt.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    ToolCallBlock,
)
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection

Reply = ChatMessage | str
Responder = Callable[[list[ChatMessage]], Reply]


def tool_call(name: str, call_id: str = "call_1", **kwargs: Any) -> ChatMessage:
    """An assistant message that calls ``name`` with ``kwargs``."""
    return ChatMessage(
        role="assistant",
        blocks=[ToolCallBlock(tool_call_id=call_id, tool_name=name, tool_kwargs=kwargs)],
    )


def answer(text: str) -> ChatMessage:
    """A final assistant answer."""
    return ChatMessage(role="assistant", content=text)


def prompt_text(messages: Sequence[ChatMessage]) -> str:
    """Everything the model was sent, as one string (for 'is the lesson in there?')."""
    return "\n".join(f"{m.role.value}: {m.content or ''}" for m in messages)


class ScriptedChatLLM(FunctionCallingLLM):
    """Answers from a script (a list, or a function of the prompt); records every prompt.

    Args:
        script: the replies in order, or ``responder(messages) -> reply``; a reply is a
            ``ChatMessage`` (possibly with tool calls, see :func:`tool_call`) or a string.
    """

    _script: list[Reply] = PrivateAttr(default_factory=list)
    _responder: Responder | None = PrivateAttr(default=None)
    _calls: list[list[ChatMessage]] = PrivateAttr(default_factory=list)

    def __init__(self, script: Sequence[Reply] | Responder, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if callable(script):
            self._responder = script
        else:
            self._script = list(script)
        self._calls = []

    @classmethod
    def class_name(cls) -> str:
        return "ScriptedChatLLM"

    @property
    def calls(self) -> list[list[ChatMessage]]:
        """Every prompt received, oldest first (deep copies)."""
        return self._calls

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            context_window=8192,
            num_output=256,
            is_chat_model=True,
            is_function_calling_model=True,
            model_name="scripted",
        )

    def _next(self, messages: Sequence[ChatMessage]) -> ChatResponse:
        received = copy.deepcopy(list(messages))  # callers mutate blocks later
        self._calls.append(received)
        if self._responder is not None:
            reply = self._responder(received)
        elif self._script:
            reply = self._script.pop(0)
        else:
            raise AssertionError("ScriptedChatLLM: script exhausted")
        msg = answer(reply) if isinstance(reply, str) else reply
        usage = {
            "prompt_tokens": sum(len((m.content or "").split()) for m in received),
            "completion_tokens": len((msg.content or "").split()),
        }
        return ChatResponse(
            message=msg,
            delta=msg.content or "",
            raw={"usage": usage},
            additional_kwargs=dict(usage),
        )

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._next(messages)

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._next(messages)

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        resp = self._next(messages)

        def gen() -> ChatResponseGen:
            yield resp

        return gen()

    @llm_chat_callback()
    async def astream_chat(
        self, messages: Sequence[ChatMessage], **kwargs: Any
    ) -> ChatResponseAsyncGen:
        resp = self._next(messages)

        async def gen() -> ChatResponseAsyncGen:
            yield resp

        return gen()

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        resp = self._next([ChatMessage(role="user", content=prompt)])
        return CompletionResponse(text=resp.message.content or "", raw=resp.raw)

    @llm_completion_callback()
    async def acomplete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponse:
        response: CompletionResponse = self.complete(prompt, formatted=formatted, **kwargs)
        return response

    @llm_completion_callback()
    def stream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseGen:
        text = self.complete(prompt, formatted=formatted).text

        def gen() -> CompletionResponseGen:
            yield CompletionResponse(text=text, delta=text)

        return gen()

    @llm_completion_callback()
    async def astream_complete(
        self, prompt: str, formatted: bool = False, **kwargs: Any
    ) -> CompletionResponseAsyncGen:
        text = self.complete(prompt, formatted=formatted).text

        async def gen() -> CompletionResponseAsyncGen:
            yield CompletionResponse(text=text, delta=text)

        return gen()

    def _prepare_chat_with_tools(
        self,
        tools: Sequence[Any],
        user_msg: str | ChatMessage | None = None,
        chat_history: list[ChatMessage] | None = None,
        verbose: bool = False,
        allow_parallel_tool_calls: bool = False,
        tool_required: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        messages = list(chat_history or [])
        if user_msg:
            messages.append(
                ChatMessage(role="user", content=user_msg)
                if isinstance(user_msg, str)
                else user_msg
            )
        return {"messages": messages}

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        calls = [b for b in response.message.blocks if isinstance(b, ToolCallBlock)]
        if not calls and error_on_no_tool_call:
            raise ValueError("expected a tool call")
        return [
            ToolSelection(
                tool_id=c.tool_call_id or "",
                tool_name=c.tool_name,
                tool_kwargs=c.tool_kwargs if isinstance(c.tool_kwargs, dict) else {},
            )
            for c in calls
        ]
