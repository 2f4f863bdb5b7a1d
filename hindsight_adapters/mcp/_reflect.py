"""``reflect_task`` / ``review_task``: the MCP side of :mod:`hindsight_core.reflection`.

Decision (documented in docker/README.md): with no LLM configured both tools still
work. ``reflect_task`` falls back to the rule-based distiller and says so in its
``note``; ``review_task`` reinforces used lessons and decays unused ones but merges
nothing (merging needs a model), and says so.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from hindsight_core.arguments import parse_id

from ._models import ReflectOutcome, ReviewOutcome, TrajectoryIn, WriteOutcome

if TYPE_CHECKING:
    from hindsight_core import AsyncMemory
    from hindsight_core.models import Namespace

NO_LLM_REFLECT = (
    "no LLM configured (set HINDSIGHT_LLM_BASE_URL and HINDSIGHT_LLM_MODEL): lessons were "
    "distilled by the simpler rule-based distiller"
)
NO_LLM_REVIEW = (
    "no LLM configured: used lessons were reinforced and unused ones decayed, but "
    "near-duplicate lessons were not merged (merging needs an LLM)"
)


def _trajectory(data: TrajectoryIn) -> dict[str, Any]:
    ids = {
        name: [parse_id(v, field=f"trajectory.{name}[{i}]") for i, v in enumerate(values)]
        for name, values in (("recalled", data.recalled), ("used", data.used))
    }
    # A dict, validated by the core: a bad value (e.g. a NUL byte) is a
    # ValidationError naming ``trajectory.<field>``, as on every other surface.
    return {
        "goal": data.goal,
        "steps": [s.model_dump(exclude_none=True) for s in data.steps],
        "outcome": data.outcome,
        "final_state": data.final_state,
        "scene": data.scene,
        "source": {"tool": "mcp"},
        **ids,
    }


async def _run(
    memory: AsyncMemory, data: TrajectoryIn, namespace: Namespace, method: str
) -> tuple[Any, bool]:
    """Call ``AsyncReflector.<method>`` on the trajectory with the configured LLM, if any.

    Returns:
        The result, and whether an LLM was configured.
    """
    from hindsight_core import reflection

    llm = reflection.llm_from_settings(memory.settings)
    reflector = reflection.AsyncReflector(memory, llm=llm)
    result = await getattr(reflector, method)(_trajectory(data), namespace=namespace)
    return result, llm is not None


def as_jsonable(value: Any) -> Any:
    """A pydantic model or dataclass as plain JSON data."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return json.loads(json.dumps(value, default=str))


async def reflect(memory: AsyncMemory, data: TrajectoryIn, namespace: Namespace) -> ReflectOutcome:
    """Distill a finished run into lessons and store them."""
    result, has_llm = await _run(memory, data, namespace, "reflect")
    return ReflectOutcome(
        written=[
            WriteOutcome(id=str(w.id), status=w.status, similarity=w.similarity)
            for w in result.written
        ],
        lessons=[str(r.get("lesson", "")) for r in getattr(result, "records", [])],
        dropped=len(result.dropped),
        dropped_reasons=[str(d["reason"]) for d in result.dropped],
        reinforced=[str(w.id) for w in result.reinforced],
        skipped=result.skipped,
        error=result.error,
        distiller=result.distiller,
        note=None if has_llm else NO_LLM_REFLECT,
    )


async def review(memory: AsyncMemory, data: TrajectoryIn, namespace: Namespace) -> ReviewOutcome:
    """Reinforce the used lessons of a run, decay the unused (and merge, with an LLM)."""
    result, has_llm = await _run(memory, data, namespace, "review")
    detail = as_jsonable(result)
    return ReviewOutcome(
        detail=detail if isinstance(detail, dict) else {"result": detail},
        llm=has_llm,
        note=None if has_llm else NO_LLM_REVIEW,
    )
