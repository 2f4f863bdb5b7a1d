"""The LLM distiller: a finished run in, 0-3 screened candidate records out.

The prompt is a versioned template shipped with the package
(``prompts/distill_v2.md``); the run is rendered as a numbered list of steps, long
contents clipped, and the model cites the numbers of the steps each lesson draws
on. Candidates are screened (``screen.py``): copies of the prompt, generic advice,
unsupported or contradicting lessons are dropped with a reason; a lesson that is
too long or in the wrong language is sent back once with the reason, then dropped.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..runtime.host import FlowContext
from ..settings import Settings
from ._ask import ask_json, load_prompt
from ._driver import RFlow
from .evidence import is_chinese
from .parse import parse_records
from .screen import screen, validate
from .trajectory import Step, Trajectory

PROMPT_VERSION = "distill_v2"
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
                "properties": {
                    "steps": {
                        "type": "array",
                        "items": {"type": "integer", "minimum": 1},
                        "minItems": 1,
                    },
                    "evidence": _STR,
                    "scene": _STR,
                    "trigger": _STR,
                    "action": _STR,
                    "outcome": _STR,
                    "lesson": _STR,
                    "confidence": {"type": "number", "minimum": 0, "maximum": 1},
                },
                "required": ["steps", "evidence", "trigger", "lesson", "confidence"],
            },
        }
    },
    "required": ["records"],
}


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _render_step(n: int, step: Step) -> str:
    head = (
        step.kind
        + (f" {step.tool}" if step.tool else "")
        + (f" ({step.role})" if step.role else "")
    )
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
        head, tail = steps[: MAX_STEPS // 3], steps[-(MAX_STEPS - MAX_STEPS // 3) :]
        lines.extend(_render_step(n, s) for n, s in head)
        lines.append(f"... ({len(steps) - len(head) - len(tail)} steps omitted) ...")
        lines.extend(_render_step(n, s) for n, s in tail)
    else:
        lines.extend(_render_step(n, s) for n, s in steps)
    if not trajectory.steps:
        lines.append("(no steps recorded)")
    return "\n".join(lines)


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
    system = load_prompt(
        PROMPT_VERSION,
        max_chars=settings.lesson_max_chars,
        min_confidence=settings.min_confidence,
        language_hint=hint,
    )
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": render_trajectory(trajectory)},
    ]


def _fix_request(fixable: list[dict[str, Any]], max_chars: int) -> str:
    lines = [
        f"{i}. {json.dumps(f['record'], ensure_ascii=False)}\n   Problem: {f['reason']}."
        for i, f in enumerate(fixable, start=1)
    ]
    return (
        "These records cannot be stored as written:\n" + "\n".join(lines) + "\n\n"
        'Answer with {"records": [...]} holding only these records, in this order, each '
        f"with its lesson rewritten (one sentence, at most {max_chars} characters, the "
        "run's language) and the same steps and evidence. An empty list drops them."
    )


def llm_distill(
    memory: FlowContext, ns: str, model: str, trajectory: Trajectory
) -> RFlow[tuple[list[dict[str, Any]], list[dict[str, Any]], str | None, int]]:
    """Ask the model and screen its answer.

    Returns:
        ``(kept, dropped, error, asked_again)``: the candidates that passed the
        screen, the dropped ones with reasons, the error when the run was skipped
        (model failed twice, unusable answers), and how many lessons were sent back
        for length or language.
    """
    settings = memory.settings
    messages = distill_messages(trajectory, settings)
    parsed, error = yield from ask_json(
        memory, ns, model, messages, RECORDS_SCHEMA, "distill", parse_records
    )
    if parsed is None:
        return [], [], error, 0
    candidates, dropped = parsed
    kept, more, fixable = screen(candidates, trajectory, settings, [messages[0]["content"]])
    dropped.extend(more)
    if not fixable:
        return kept, dropped, None, 0
    # Once: send the lessons back with what is wrong; what still fails is dropped.
    again = [
        *messages,
        {"role": "assistant", "content": json.dumps({"records": candidates}, ensure_ascii=False)},
        {"role": "user", "content": _fix_request(fixable, settings.lesson_max_chars)},
    ]
    originals = [f["record"] for f in fixable]
    reparsed, error = yield from ask_json(  # a rewrite that leaves out its citations keeps them
        memory,
        ns,
        model,
        again,
        RECORDS_SCHEMA,
        "distill-fix",
        lambda text: parse_records(text, defaults=originals),
        attempts=1,
    )
    rewritten = reparsed[0] if reparsed is not None else []
    for i, fix in enumerate(fixable):
        if i >= len(rewritten):
            why = error or "not rewritten when asked"
            dropped.append({"record": fix["record"], "reason": f"{fix['reason']} ({why})"})
            continue
        ok, bad, _ = screen(
            [rewritten[i]], trajectory, settings, [messages[0]["content"]], can_fix=False
        )
        kept.extend(ok)
        dropped.extend({**b, "reason": f"after being asked again: {b['reason']}"} for b in bad)
    return kept, dropped, None, len(fixable)


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


def complete(
    candidates: list[dict[str, Any]], trajectory: Trajectory, settings: Settings, distiller: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Screened candidates as records to write, and those that fail validation."""
    keep: list[dict[str, Any]] = []
    dropped: list[dict[str, Any]] = []
    for cand in candidates:
        record = {
            "scene": (trajectory.scene or str(cand.get("scene") or "").strip() or "general")[:100],
            "trigger": str(cand.get("trigger") or "").strip()
            or _clip(trajectory.goal, settings.field_max_chars),
            "action": str(cand.get("action") or ""),
            "outcome": str(cand.get("outcome") or trajectory.outcome),
            "lesson": str(cand.get("lesson") or "").strip(),
            "confidence": float(cand["confidence"]),
            "source": _source(trajectory, distiller),
        }
        error = validate(record, settings)
        if error is not None:
            dropped.append({"record": cand, "reason": error})
            continue
        keep.append(record)
    return keep, dropped
