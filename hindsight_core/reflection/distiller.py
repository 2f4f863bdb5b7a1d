"""The LLM distiller: a finished run in, 0-3 candidate records out.

The prompt is a versioned template shipped with the package
(``prompts/distill_v1.md``); the run is rendered as a numbered list of steps, long
contents clipped. Candidates are then screened (:func:`screen`) before anything is
written: below ``settings.min_confidence`` or failing validation (e.g. a lesson
over the length limit) they are dropped with a reason.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import ValidationError
from ..memory.base import MemoryBase
from ..models import parse_experience
from ..settings import Settings
from ..text import cjk_share
from ._ask import ask_json, load_prompt
from ._driver import RFlow
from .parse import parse_records
from .trajectory import Step, Trajectory

PROMPT_VERSION = "distill_v1"
MAX_STEP_CHARS = 600
MAX_STEPS = 60

_STR = {"type": "string"}
RECORDS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "records": {
            "type": "array",
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {"scene": _STR, "trigger": _STR, "action": _STR, "outcome": _STR,
                               "lesson": _STR,
                               "confidence": {"type": "number", "minimum": 0, "maximum": 1}},
                "required": ["trigger", "lesson", "confidence"],
            },
        }
    },
    "required": ["records"],
}


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _render_step(n: int, step: Step) -> str:
    head = step.kind + (f" {step.tool}" if step.tool else "") + (
        f" ({step.role})" if step.role else "")
    body = step.content
    if step.args:
        body = json.dumps(step.args, ensure_ascii=False) + (f" {body}" if body else "")
    return f"{n}. [{head}] {_clip(' '.join(body.split()), MAX_STEP_CHARS)}"


def render_trajectory(trajectory: Trajectory) -> str:
    """The run as the model sees it: goal, outcome, final state, numbered steps."""
    lines = [f"Goal: {trajectory.goal}", f"Outcome: {trajectory.outcome}"]
    if trajectory.final_state:
        lines.append(f"Final state: {_clip(trajectory.final_state, 2000)}")
    if trajectory.scene:
        lines.append(f"Scene: {trajectory.scene}")
    lines.append("Steps:")
    steps = list(enumerate(trajectory.steps, start=1))
    if len(steps) > MAX_STEPS:
        head, tail = steps[: MAX_STEPS // 3], steps[-(MAX_STEPS - MAX_STEPS // 3):]
        lines.extend(_render_step(n, s) for n, s in head)
        lines.append(f"... ({len(steps) - len(head) - len(tail)} steps omitted) ...")
        lines.extend(_render_step(n, s) for n, s in tail)
    else:
        lines.extend(_render_step(n, s) for n, s in steps)
    if not trajectory.steps:
        lines.append("(no steps recorded)")
    return "\n".join(lines)


def is_chinese(trajectory: Trajectory) -> bool:
    """Whether the run is mostly in Chinese/Japanese/Korean script."""
    return cjk_share(trajectory.goal) > 0.3 or cjk_share(trajectory.text()) > 0.3


def language_hint(trajectory: Trajectory) -> str:
    """An explicit reminder of the run's language when it is written in CJK script."""
    if not is_chinese(trajectory):
        return ""
    text = trajectory.text()
    if re.search("[\u3040-\u30ff]", text):
        language = "Japanese"
    elif re.search("[\uac00-\ud7af]", text):
        language = "Korean"
    else:
        language = "Chinese"
    return f"This trajectory is in {language}: write those fields in {language}."


def distill_messages(trajectory: Trajectory, settings: Settings) -> list[dict[str, str]]:
    """The chat messages for one distillation."""
    hint = language_hint(trajectory)
    system = load_prompt(PROMPT_VERSION, max_chars=settings.lesson_max_chars,
                         min_confidence=settings.min_confidence, language_hint=hint)
    return [{"role": "system", "content": system},
            {"role": "user", "content": render_trajectory(trajectory)}]


def llm_distill(memory: MemoryBase, ns: str, model: str, trajectory: Trajectory
                ) -> RFlow[tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]]:
    """Ask the model; returns ``(candidates, dropped, error)`` (error: skipped)."""
    parsed, error = yield from ask_json(
        memory, ns, model, distill_messages(trajectory, memory.settings), RECORDS_SCHEMA,
        "distill", parse_records)
    if parsed is None:
        return [], [], error
    candidates, dropped = parsed
    return candidates, dropped, None


def _source(trajectory: Trajectory, distiller: str) -> dict[str, Any]:
    source: dict[str, Any] = {}
    for key, value in trajectory.source.items():
        if value is None:
            continue
        if key in ("agent", "task", "tool"):
            source[key] = str(value)[:200]
        elif isinstance(value, str | int | float | bool):
            source[key] = value
    source["distiller"] = distiller
    return source


def screen(candidates: list[dict[str, Any]], trajectory: Trajectory, settings: Settings,
           distiller: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Complete and validate candidates; returns ``(records to write, dropped)``.

    A candidate is dropped (with a reason) when its confidence is below
    ``settings.min_confidence`` or it fails validation (lesson too long, ...).
    """
    keep: list[dict[str, Any]] = []
    dropped: list[dict[str, Any]] = []
    for cand in candidates:
        confidence = float(cand.get("confidence", 0.0))
        if confidence < settings.min_confidence:
            dropped.append({"record": cand, "reason": f"confidence {confidence:g} is below "
                            f"{settings.min_confidence:g}"})
            continue
        record = {
            "scene": (trajectory.scene or str(cand.get("scene") or "").strip() or "general")[:100],
            "trigger": str(cand.get("trigger") or "").strip()
            or _clip(trajectory.goal, settings.field_max_chars),
            "action": str(cand.get("action") or ""),
            "outcome": str(cand.get("outcome") or trajectory.outcome),
            "lesson": str(cand.get("lesson") or "").strip(),
            "confidence": confidence,
            "source": _source(trajectory, distiller),
        }
        try:
            parse_experience(record, lesson_max_chars=settings.lesson_max_chars,
                             field_max_chars=settings.field_max_chars)
        except ValidationError as exc:
            dropped.append({"record": cand, "reason": str(exc)})
            continue
        keep.append(record)
    return keep, dropped
