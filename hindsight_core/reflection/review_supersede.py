"""Review's correction of a lesson that misled the run: when the run shows what the lesson
should say instead, a new version supersedes it (``memory.supersede``, docs/versions.md).

With a model, the model phrases the correction from the run's failure, fix or the
user's correction, and the answer is kept only if its new words come from that
evidence (:func:`_grounded`); without one, or when the answer is refused, the
rule-based distiller's lesson from a failed-then-fixed call, or a short correction of
the user's, is the new version (:func:`_rule_correction`).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

from ..errors import HindsightError
from ..models import Namespace
from ..runtime.flow import Flow, Sql
from ..runtime.host import RecordContext
from ..storage import experiences_sql as q
from ._ask import ask_json
from ._driver import RFlow, Store
from .evidence import Run, near_equal, units
from .parse import ParseError, flagged_json
from .review_results import ReviewDecision, ReviewResult
from .rules import RuleBasedDistiller
from .trajectory import Trajectory

__all__ = ["rows_flow", "supersede", "why_misled"]

SUPERSEDE_PROMPT = """\
An agent followed a lesson from its memory, and the run shows the lesson was wrong or
incomplete: {why}. Correct the lesson from the evidence below only: one actionable
sentence of at most {max_chars} characters, in the language of the lesson, saying what
to do instead (take the fix or the user's words from the evidence; add nothing else).
If the evidence does not show what to do instead, do not correct it.
Answer with JSON only: {{"supersede": true, "lesson": "...", "reason": "..."}} or
{{"supersede": false, "reason": "..."}}."""

SUPERSEDE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "supersede": {"type": "boolean"},
        "lesson": {"type": "string"},
        "reason": {"type": "string"},
    },
    "required": ["supersede"],
}
_LEAD = re.compile(r"^\W*(no|nope|wrong|not like that|that's wrong|不对|不是|错了)\b\W*", re.I)


def rows_flow(memory: RecordContext, ns: str, ids: list[uuid.UUID]) -> Flow[dict[Any, Any]]:
    """The stored rows of ``ids`` (current state), by id."""
    yield from memory.ready_flow()
    rows = yield from Sql(q.GET, {"ns": ns, "ids": ids, **memory.decay_params(memory.now())})
    return {r["id"]: r for r in rows}


def _complaints(row: dict[str, Any], run: Run) -> list[int]:
    """The user's corrections in the run that speak about what the lesson says."""
    said = units(f"{row['lesson']} {row['trigger']}")
    return [n for n in run.complaints if said & units(run.texts[n])]


def why_misled(row: dict[str, Any] | None, trajectory: Trajectory, run: Run) -> str | None:
    """Why a used record misled the run (None: it did not, or it is gone or old)."""
    if row is None or row["superseded_by"] is not None or row["archived_at"] is not None:
        return None
    if _complaints(row, run):
        return "followed, and the user corrected it"
    if trajectory.outcome == "failure":
        return "followed, and the run failed"
    return None


def _evidence(row: dict[str, Any], run: Run) -> str:
    """The run's steps that show what went wrong and what was done or said instead."""
    steps = sorted({m for n in [*run.signals, *_complaints(row, run)] for m in run.context[n]})
    return "\n".join(f"{n}. {run.texts[n][:400]}" for n in steps)[:3000]


def _rule_correction(
    row: dict[str, Any], trajectory: Trajectory, run: Run, max_chars: int
) -> str | None:
    """The corrected lesson without a model: the rule distiller's lesson from a failed,
    then fixed call, else the user's correction when it is one short sentence."""
    said = units(f"{row['lesson']} {row['trigger']}")
    for fix in RuleBasedDistiller(max_chars=max_chars).distill(trajectory):
        if said & units(f"{fix['trigger']} {fix['action']} {fix['lesson']}"):  # about it
            return str(fix["lesson"])
    for n in _complaints(row, run):
        text = _LEAD.sub("", trajectory.steps[n - 1].content.strip()).strip()
        text = re.split(r"(?<=[.!?。！？])\s", text)[0].strip()
        if 8 <= len(text) <= max_chars:
            return text[0].upper() + text[1:]
    return None


def _grounded(lesson: str, row: dict[str, Any], evidence: str) -> str | None:
    """Why a model's correction is refused: the old lesson again, or new words that are
    not in the run's evidence (a small model inventing the fix)."""
    if near_equal(lesson, row["lesson"]):
        return "the correction repeats the lesson"
    new = units(lesson) - units(row["lesson"])
    if not new or not new & units(evidence):
        return "the correction is not grounded in the run's failure, fix or correction"
    return None


def _parse_supersede(text: str) -> dict[str, Any]:
    data = flagged_json(text, "supersede", ("true", "yes"))
    if data["supersede"] and not str(data.get("lesson") or "").strip():
        raise ParseError('"supersede": true needs a "lesson"')
    return data


def supersede(
    memory: RecordContext,
    ns: str,
    model: str | None,
    namespace: Namespace | str | None,
    row: dict[str, Any],
    trajectory: Trajectory,
    run: Run,
    why: str,
    result: ReviewResult,
) -> RFlow[None]:
    """Supersede a misleading record with its correction (see the module docstring)."""
    settings, ids = memory.settings, [row["id"]]
    lesson, source, note = None, "rules", None
    if model is not None:
        evidence = _evidence(row, run)
        system = SUPERSEDE_PROMPT.format(why=why, max_chars=settings.lesson_max_chars)
        body = f"lesson: {row['lesson']}\ntrigger: {row['trigger']}\nevidence:\n{evidence}"
        messages = [{"role": "system", "content": system}, {"role": "user", "content": body}]
        answer, error = yield from ask_json(
            memory, ns, model, messages, SUPERSEDE_SCHEMA, "review-supersede", _parse_supersede
        )
        if answer is not None and answer["supersede"]:
            lesson, source = str(answer["lesson"]).strip(), f"llm:{model}"
            note = _grounded(lesson, row, evidence)
        elif answer is not None:
            note = str(answer.get("reason") or "model: nothing to correct")
        else:
            note = str(error)
    if lesson is None or note is not None:
        lesson, source = _rule_correction(row, trajectory, run, settings.lesson_max_chars), "rules"
    if lesson is None:
        reason = f"{why}; no correction in the run" + (f" ({note})" if note else "")
        result.decisions.append(ReviewDecision(action="keep", ids=ids, reason=reason))
        return
    new = {
        "scene": row["scene"],
        "trigger": row["trigger"],
        "action": row["action"],
        "outcome": row["outcome"],
        "lesson": lesson,
        "confidence": row["confidence"],
        "source": {"distiller": source, "review": "supersede"},
    }
    try:
        done = yield from Store(
            memory.supersede_flow(row["id"], new, reason=why, actor="review", namespace=namespace)
        )
    except HindsightError as exc:
        result.errors.append(f"supersede of {row['id']} failed: {exc}")
        result.decisions.append(ReviewDecision(action="skip", ids=ids, reason=str(exc)))
        return
    result.superseded[row["id"]] = done.id
    said = why if note is None else f"{why} (the model's correction was not used: {note})"
    result.decisions.append(
        ReviewDecision(action="supersede", ids=ids, into=done.id, lesson=lesson, reason=said)
    )
