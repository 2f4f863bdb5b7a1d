"""The LLM distiller: evidence first, the model only phrases it.

The run's evidence is found by rule (``findings.py``: the failure and its fix, the
user's correction and what followed); a run without evidence makes no model call.
For each finding the model gets the evidence (not the goal, not the whole run) and a
versioned prompt (``prompts/distill_v3.md``) asking for one lesson. The lesson is
screened against that evidence (``check.py``); one that fails is asked for once
more in a fresh request saying what was wrong, then replaced by the finding's
rule-built lesson, or by nothing. Confidence is the evidence's, never the model's.
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..runtime.host import FlowContext
from ..settings import Settings
from ._ask import ask_json, load_prompt
from ._driver import RFlow
from .check import check_lesson
from .evidence import is_chinese
from .findings import Finding, find_evidence
from .parse import parse_lesson
from .screen import prompt_fragments, validate
from .trajectory import Step, Trajectory

PROMPT_VERSION = "distill_v3"
MAX_STEP_CHARS = 600
MAX_STEPS = 60


def lesson_schema(max_chars: int) -> dict[str, Any]:
    """``{"lesson": str}``; the bound (twice the limit) stops a rambling answer early
    under constrained decoding, and still lets the screen see it was too long."""
    return {
        "type": "object",
        "properties": {"lesson": {"type": "string", "maxLength": 2 * max_chars}},
        "required": ["lesson"],
    }


# One worked example per kind of evidence, in the run's language: small models follow
# an example's form far better than a description of it. Lessons copying them are
# caught as prompt copies.
_EXAMPLES = {
    "English": [
        (
            "Evidence 1 of 1: a call failed; a changed call of the same tool then worked.\n"
            'Failed call: shell {"cmd": "tar -xf site.tgz"}\n'
            "Error: tar: This does not look like a tar archive\n"
            'Call that worked: shell {"cmd": "tar -xzf site.tgz"}\n'
            "What changed: cmd: added -xzf; removed -xf",
            "Add -z to tar when extracting a .tgz file",
        ),
        (
            "Evidence 1 of 1: the user corrected the agent.\n"
            'What the agent did: send_email {"to": "client@acme.example"}\n'
            "What the user said: Don't write to clients yourself, send me the draft.",
            "Send client emails to the user as drafts first",
        ),
    ],
    "Chinese": [
        (
            "Evidence 1 of 1: a call failed; a changed call of the same tool then worked.\n"
            'Failed call: shell {"cmd": "tar -xf site.tgz"}\n'
            "Error: tar: 这不是 tar 归档\n"
            'Call that worked: shell {"cmd": "tar -xzf site.tgz"}\n'
            "What changed: cmd: added -xzf; removed -xf",
            "解压 .tgz 文件时给 tar 加上 -z",
        ),
        (
            "Evidence 1 of 1: the user corrected the agent.\n"
            'What the agent did: send_email {"to": "client@acme.example"}\n'
            "What the user said: 别直接给客户发邮件，先把草稿给我。",
            "给客户的邮件先作为草稿交给用户",
        ),
    ],
}


def example_lessons() -> list[str]:
    """The example lessons of the prompt (a lesson must not copy them)."""
    return [lesson for examples in _EXAMPLES.values() for _, lesson in examples]


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


def language_name(trajectory: Trajectory) -> str:
    """The language lessons of this run are written in."""
    if not is_chinese(trajectory):
        return "English"
    text = trajectory.text()
    if re.search("[\u3040-\u30ff]", text):
        return "Japanese"
    if re.search("[\uac00-\ud7af]", text):
        return "Korean"
    return "Chinese"


def system_prompt(trajectory: Trajectory, settings: Settings) -> str:
    """The instructions of a phrasing request (``prompts/distill_v3.md``)."""
    return load_prompt(
        PROMPT_VERSION, max_chars=settings.lesson_max_chars, language=language_name(trajectory)
    )


_KINDS = {
    "fix": "a call failed; a changed call of the same tool then worked",
    "prerequisite": "a call failed; after another call, the same call worked",
    "retry": "a call failed; the same call, repeated, worked",
    "correction": "the user corrected the agent",
    "cause": "a call failed and was not put right; its error names what an earlier call did",
}


def render_finding(finding: Finding, number: int, total: int) -> str:
    """One piece of evidence as the model sees it (no goal: small models repeat it)."""
    lines = [f"Evidence {number} of {total}: {_KINDS[finding.kind]}."]
    if finding.kind == "correction":
        if finding.failed:
            lines.append(f"What the agent did: {finding.failed}")
        lines.append(f"What the user said: {finding.user}")
        if finding.fixed:
            lines.append(f"What the agent did next: {finding.fixed}")
    else:
        lines.append(f"Failed call: {finding.failed}")
        if finding.error:
            lines.append(f"Error: {finding.error}")
        label = {
            "prerequisite": "Call made before it worked",
            "retry": "Repeated call",
            "cause": "Earlier call it names",
        }
        lines.append(f"{label.get(finding.kind, 'Call that worked')}: {finding.fixed}")
    if finding.changed:
        lines.append("What changed: " + "; ".join(finding.changed[:4]))
    elif finding.added:
        lines.append("What it ran: " + " ".join(finding.added[:8]))
    return "\n".join(lines)


def phrase_messages(
    trajectory: Trajectory,
    settings: Settings,
    finding: Finding,
    number: int,
    total: int,
    problem: str | None = None,
) -> list[dict[str, str]]:
    """The chat messages asking for one lesson; ``problem``: what was wrong with the
    last answer (the request is sent fresh, without that answer)."""
    language = language_name(trajectory)
    user = render_finding(finding, number, total)
    if problem:
        user += (
            f"\n\nAn earlier lesson for this evidence could not be used ({problem}). "
            "Write a new one that avoids this."
        )
    user += f"\n\nThe lesson, in {language}, at most {settings.lesson_max_chars} characters:"
    shots: list[dict[str, str]] = []
    for evidence, lesson in _EXAMPLES.get(language, _EXAMPLES["English"]):
        shots.append({"role": "user", "content": evidence})
        shots.append(
            {"role": "assistant", "content": json.dumps({"lesson": lesson}, ensure_ascii=False)}
        )
    return [
        {"role": "system", "content": system_prompt(trajectory, settings)},
        *shots,
        {"role": "user", "content": user},
    ]


def distill_messages(trajectory: Trajectory, settings: Settings) -> list[dict[str, str]]:
    """The messages of the run's first request (the system prompt alone without evidence)."""
    findings = find_evidence(trajectory, max_chars=settings.lesson_max_chars)
    if not findings:
        return [{"role": "system", "content": system_prompt(trajectory, settings)}]
    return phrase_messages(trajectory, settings, findings[0], 1, len(findings))


def _candidate(finding: Finding, lesson: str, trajectory: Trajectory, by: str) -> dict[str, Any]:
    if finding.kind == "correction":
        trigger = f"{trajectory.goal} (the user said: {finding.user})"
        action = finding.failed + (f"; then {finding.fixed}" if finding.fixed else "")
    else:
        trigger = f"{trajectory.goal} ({finding.tool} failed: {finding.error})"
        action = f"{finding.failed} failed; then {finding.fixed} worked"
    return {
        "lesson": lesson,
        "confidence": finding.confidence,
        "steps": finding.steps,
        "evidence": finding.user or finding.error,
        "trigger": trigger,
        "action": action,
        "phrased_by": by,
    }


def llm_distill(
    memory: FlowContext, ns: str, model: str, trajectory: Trajectory
) -> RFlow[tuple[list[dict[str, Any]], list[dict[str, Any]], str | None, int]]:
    """Find the run's evidence, ask the model to phrase one lesson per finding, screen.

    A run without evidence makes no model call. A lesson that fails the screen is
    asked for once more (fresh, with what was wrong); what still fails gives way to
    the finding's rule-built lesson when that passes, else to nothing.

    Returns:
        ``(kept, dropped, error, asked_again)``: the candidates that passed, the
        dropped ones with reasons, the error when the run was skipped (the model
        failed twice), and how many lessons were asked for again.
    """
    settings = memory.settings
    findings = find_evidence(trajectory, max_chars=settings.lesson_max_chars)
    kept: list[dict[str, Any]] = []
    dropped: list[dict[str, Any]] = []
    asked = 0
    fragments = prompt_fragments(system_prompt(trajectory, settings), *example_lessons())
    chinese = is_chinese(trajectory)

    def check(lesson: str, finding: Finding) -> tuple[str | None, str | None]:
        return check_lesson(
            lesson,
            finding,
            trajectory,
            prompt_fragments=fragments,
            others=[k["lesson"] for k in kept],
            max_chars=settings.lesson_max_chars,
            chinese=chinese,
        )

    for i, finding in enumerate(findings, start=1):
        if finding.confidence < settings.min_confidence:  # not worth a model call
            dropped.append(
                {
                    "record": {"lesson": finding.rule_lesson or "", "steps": finding.steps},
                    "reason": f"the evidence's confidence {finding.confidence:g} is below "
                    f"{settings.min_confidence:g}",
                }
            )
            continue
        problem: str | None = None
        phrased: str | None = None
        for attempt in (1, 2):
            messages = phrase_messages(trajectory, settings, finding, i, len(findings), problem)
            lesson, error = yield from ask_json(
                memory,
                ns,
                model,
                messages,
                lesson_schema(settings.lesson_max_chars),
                "distill" if attempt == 1 else "distill-fix",
                parse_lesson,
                attempts=2 if attempt == 1 else 1,
            )
            if lesson is None:
                if attempt == 1:  # the model failed twice: the run is skipped
                    return kept, dropped, error, asked
                break
            reason, fix = check(lesson, finding)
            if reason is None and fix is None:
                phrased = lesson
                break
            why = reason or fix or ""
            prefix = "" if attempt == 1 else "after being asked again: "
            dropped.append(
                {"record": {"lesson": lesson, "steps": finding.steps}, "reason": prefix + why}
            )
            asked += attempt == 1
            problem = why
        if phrased is not None:
            kept.append(_candidate(finding, phrased, trajectory, "model"))
        elif finding.rule_lesson:  # never the goal: the evidence, worded by rule
            reason, fix = check(finding.rule_lesson, finding)
            if reason is None and fix is None:
                kept.append(_candidate(finding, finding.rule_lesson, trajectory, "rule"))
            else:
                dropped.append(
                    {
                        "record": {"lesson": finding.rule_lesson, "steps": finding.steps},
                        "reason": f"rule-built lesson: {reason or fix}",
                    }
                )
    return kept, dropped, None, asked


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
    limit = settings.field_max_chars
    for cand in candidates:
        source = _source(trajectory, distiller)
        if cand.get("phrased_by") == "rule":  # the model's lesson failed; the rule's wording
            source["phrased_by"] = "rule"
        record = {
            "scene": (trajectory.scene or str(cand.get("scene") or "").strip() or "general")[:100],
            "trigger": _clip(str(cand.get("trigger") or "").strip() or trajectory.goal, limit),
            "action": _clip(str(cand.get("action") or ""), limit),
            "outcome": str(cand.get("outcome") or trajectory.outcome),
            "lesson": str(cand.get("lesson") or "").strip(),
            "confidence": float(cand["confidence"]),
            "source": source,
        }
        error = validate(record, settings)
        if error is not None:
            dropped.append({"record": cand, "reason": error})
            continue
        keep.append(record)
    return keep, dropped
