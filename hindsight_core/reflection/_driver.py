"""How reflection shares one implementation between sync and async.

Reflection needs two kinds of I/O: a model call and memory operations. Its logic
is written once as generators that yield :class:`Ask` (call the model) or
:class:`Store` (run a memory flow in its own transaction) and receive the result;
:func:`drive_sync` and :func:`drive_async` do the I/O. It is the memory's own
flow pattern (``runtime/flow.py``) one level up. Failures of a request are thrown
back into the generator at the ``yield``, so the logic decides what a failure
means (retry, skip, report) and the drivers stay dumb. As with the memory's
requests, ``yield from`` a request receives its reply typed:
``reply = yield from Ask(...)`` is an :class:`LLMResponse`,
``result = yield from Store(flow)`` the flow's result.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ..errors import HindsightError, LLMError
from ..runtime.driver import Plan
from ..runtime.flow import Flow
from .llm import LLM, LLMResponse

if TYPE_CHECKING:
    from ..runtime.host import AsyncFlowHost, FlowHost

R = TypeVar("R")


@dataclass(frozen=True)
class Ask:
    """Call the model with ``messages``; the reply is an :class:`LLMResponse`."""

    messages: list[dict[str, str]]
    json_schema: dict[str, Any] | None
    purpose: str

    def __iter__(self) -> Generator[Ask, Any, LLMResponse]:
        """``reply = yield from Ask(...)``: the model's reply."""
        reply: LLMResponse = yield self
        return reply


@dataclass(frozen=True)
class Store(Generic[R]):
    """Run a memory flow (one transaction); the reply is the flow's result."""

    flow: Flow[R]

    def __iter__(self) -> Generator[Store[R], Any, R]:
        """``result = yield from Store(flow)``: the flow's result."""
        result: R = yield self
        return result


RFlow = Generator[Ask | Store[Any], Any, R]


def _as_response(reply: Any) -> LLMResponse:
    if isinstance(reply, LLMResponse):
        return reply
    if isinstance(reply, str):  # a duck-typed model that returns plain text
        return LLMResponse(text=reply)
    raise LLMError(f"the model returned {type(reply).__name__}, not an LLMResponse")


def _need(llm: LLM | None) -> LLM:
    if llm is None:
        raise LLMError("no LLM configured")
    return llm


@contextmanager
def _answering(plan: Plan[Ask | Store[Any], Any], req: Ask | Store[Any]) -> Iterator[None]:
    """Throw a failure to answer ``req`` back into the flow (``plan.error``): any
    exception of a model call (provider failures vary), only a ``HindsightError`` of a
    memory flow."""
    passed_back = Exception if isinstance(req, Ask) else HindsightError
    try:
        yield
    except Exception as exc:
        if not isinstance(exc, passed_back):
            raise
        plan.error = exc


def drive_sync(flow: RFlow[R], memory: FlowHost, llm: LLM | None) -> R:
    """Run a reflection flow with blocking I/O (stepped by the driver's ``Plan``)."""
    plan: Plan[Ask | Store[Any], R] = Plan(flow)
    try:
        for req in plan:
            with _answering(plan, req):
                if isinstance(req, Ask):
                    reply = _need(llm).complete(req.messages, json_schema=req.json_schema)
                    plan.reply = _as_response(reply)
                else:
                    plan.reply = memory.run_flow(req.flow)
        return plan.result
    finally:
        flow.close()


async def drive_async(flow: RFlow[R], memory: AsyncFlowHost, llm: LLM | None) -> R:
    """Run a reflection flow with asyncio I/O."""
    plan: Plan[Ask | Store[Any], R] = Plan(flow)
    try:
        for req in plan:
            with _answering(plan, req):
                if isinstance(req, Ask):
                    reply = await _need(llm).acomplete(req.messages, json_schema=req.json_schema)
                    plan.reply = _as_response(reply)
                else:
                    plan.reply = await memory.run_flow(req.flow)
        return plan.result
    finally:
        flow.close()
