"""Asking the model for JSON: retry once with the parse error, record token usage."""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib import resources
from typing import Any, TypeVar

from ..errors import HindsightError
from ..runtime.flow import Flow, Sql
from ..runtime.host import FlowContext
from ..storage import tasks_sql
from ._driver import Ask, RFlow, Store
from .llm import LLMResponse
from .parse import ParseError

log = logging.getLogger("hindsight.reflection")
T = TypeVar("T")


def load_prompt(name: str, **values: Any) -> str:
    """A prompt template shipped with the package (``prompts/<name>.md``), filled in.

    Placeholders are ``{{name}}`` so that JSON braces in the text need no escaping.
    """
    text = resources.files(__package__).joinpath(f"prompts/{name}.md").read_text("utf-8")
    for key, value in values.items():
        text = text.replace("{{" + key + "}}", str(value))
    return text


def usage_flow(
    memory: FlowContext, ns: str, purpose: str, model: str, response: LLMResponse
) -> Flow[None]:
    """Record one model call's token usage (summed by ``Memory.stats()``)."""
    yield from memory.ready_flow(check_model=False)
    yield Sql(
        tasks_sql.RECORD_LLM_USAGE,
        {
            "now": memory.now(),
            "model": response.model or model,
            "purpose": purpose,
            "prompt_tokens": int(response.prompt_tokens),
            "ns": ns,
            "completion_tokens": int(response.completion_tokens),
        },
        fetch="none",
    )


def ask_json(
    memory: FlowContext,
    ns: str,
    model: str,
    messages: list[dict[str, str]],
    schema: dict[str, Any] | None,
    purpose: str,
    parse: Callable[[str], T],
    *,
    attempts: int = 2,
) -> RFlow[tuple[T | None, str | None]]:
    """Ask for JSON and parse it; on a failed call or an unusable answer, ask once more
    (telling the model what was wrong) unless ``attempts`` is 1. Returns
    ``(value, None)`` or ``(None, error)``."""
    msgs = list(messages)
    error: str | None = None
    for attempt in range(1, attempts + 1):
        try:
            reply = yield from Ask(msgs, schema, purpose)
        except Exception as exc:  # noqa: BLE001 - the model call failed (network, provider, script)
            error = f"model call failed: {type(exc).__name__}: {exc}"
            log.warning("%s (attempt %d of %d, purpose %s)", error, attempt, attempts, purpose)
            continue
        try:
            yield Store(usage_flow(memory, ns, purpose, model, reply))
        except HindsightError as exc:
            log.warning("could not record LLM token usage: %s", exc)
        try:
            return parse(reply.text), None
        except ParseError as exc:
            error = f"unusable model answer: {exc}"
            log.warning("%s (attempt %d of %d, purpose %s)", error, attempt, attempts, purpose)
            msgs = [
                *msgs,
                {"role": "assistant", "content": reply.text[:4000]},
                {
                    "role": "user",
                    "content": f"Your answer could not be used: {exc}. "
                    "Answer again with only the JSON object described above.",
                },
            ]
    return None, error
