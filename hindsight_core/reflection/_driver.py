"""How reflection shares one implementation between sync and async.

Reflection needs two kinds of I/O: a model call and memory operations. Its logic
is written once as generators that yield :class:`Ask` (call the model) or
:class:`Store` (run a memory flow in its own transaction) and receive the result;
:func:`drive_sync` and :func:`drive_async` do the I/O. It is the memory's own
flow pattern (``memory/flow.py``) one level up. Failures of a request are thrown
back into the generator at the ``yield``, so the logic decides what a failure
means (retry, skip, report) and the drivers stay dumb.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import HindsightError, LLMError
from ..memory.flow import Flow
from .llm import LLM, LLMResponse

if TYPE_CHECKING:
    from ..memory import AsyncMemory, Memory

R = TypeVar("R")


@dataclass(frozen=True)
class Ask:
    """Call the model with ``messages``; the reply is an :class:`LLMResponse`."""

    messages: list[dict[str, str]]
    json_schema: dict[str, Any] | None
    purpose: str


@dataclass(frozen=True)
class Store:
    """Run a memory flow (one transaction); the reply is the flow's result."""

    flow: Flow[Any]


RFlow = Generator[Ask | Store, Any, R]


def _as_response(reply: Any) -> LLMResponse:
    if isinstance(reply, LLMResponse):
        return reply
    if isinstance(reply, str):  # a duck-typed model that returns plain text
        return LLMResponse(text=reply)
    raise LLMError(f"the model returned {type(reply).__name__}, not an LLMResponse")


def drive_sync(flow: RFlow[R], memory: Memory, llm: LLM | None) -> R:
    """Run a reflection flow with blocking I/O."""
    reply: Any = None
    error: BaseException | None = None
    try:
        while True:
            try:
                req = flow.throw(error) if error is not None else flow.send(reply)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            reply, error = None, None
            if isinstance(req, Ask):
                if llm is None:
                    error = LLMError("no LLM configured")
                    continue
                try:
                    reply = _as_response(llm.complete(req.messages, json_schema=req.json_schema))
                except Exception as exc:  # any provider failure goes back to the flow
                    error = exc
            else:
                try:
                    reply = memory._run(req.flow)
                except HindsightError as exc:
                    error = exc
    finally:
        flow.close()


async def drive_async(flow: RFlow[R], memory: AsyncMemory, llm: LLM | None) -> R:
    """Run a reflection flow with asyncio I/O."""
    reply: Any = None
    error: BaseException | None = None
    try:
        while True:
            try:
                req = flow.throw(error) if error is not None else flow.send(reply)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            reply, error = None, None
            if isinstance(req, Ask):
                if llm is None:
                    error = LLMError("no LLM configured")
                    continue
                try:
                    reply = _as_response(
                        await llm.acomplete(req.messages, json_schema=req.json_schema))
                except Exception as exc:  # any provider failure goes back to the flow
                    error = exc
            else:
                try:
                    reply = await memory._run(req.flow)
                except HindsightError as exc:
                    error = exc
    finally:
        flow.close()
