"""The rule-based distiller: lessons from structured runs, without an LLM.

One rule: a tool call that failed, followed by a successful correction, yields
"when <trigger>, <what worked> instead of <what failed>". A correction is a later
successful call of the same tool with other arguments (the lesson names what
changed) or, right after the failure, a successful call of another tool. Lessons
are shortened to the length limit by keeping only the part of the arguments that
changed. Confidence is lower than a model's (0.65 by default), and every record
says ``source.distiller = "rule-based"``. A run in Chinese gets Chinese wording.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from .evidence import failed_step, is_chinese
from .trajectory import Trajectory

NAME = "rule-based"


@dataclass
class _Call:
    tool: str
    args: dict[str, Any]
    failed: bool = False
    error: str = ""
    done: bool = False  # a result or error was seen
    steps: list[int] = field(default_factory=list)  # the call's step and its result's


def _calls(trajectory: Trajectory) -> list[_Call]:
    calls: list[_Call] = []
    for n, step in enumerate(trajectory.steps, start=1):
        if step.kind == "tool_call":
            calls.append(_Call(tool=step.tool or "tool", args=dict(step.args or {}), steps=[n]))
        elif step.kind in ("tool_result", "error"):
            target = next(
                (
                    c
                    for c in reversed(calls)
                    if not c.done and (step.tool is None or c.tool == step.tool)
                ),
                None,
            )
            if target is None:
                if step.kind == "error" and step.tool:  # a failed call reported in one step
                    calls.append(
                        _Call(
                            tool=step.tool,
                            args=dict(step.args or {}),
                            failed=True,
                            error=step.content,
                            done=True,
                            steps=[n],
                        )
                    )
                continue
            target.done = True
            target.steps.append(n)
            target.failed = failed_step(step)
            target.error = step.content if target.failed else ""
    return calls


# Wordings from the most to the least explicit; the first that fits the limit is used.
_EN = {
    "swap": (
        "When {t} fails, use {w} instead of {f}",
        "If {t} fails, use {w} instead",
        "Use {w} instead of {f}",
        "Use {w}, not {f}",
    ),
    "add": (
        "When calling {t}, add {w} instead of omitting it",
        "When calling {t}, always add {w}",
        "{t}: add {w} instead of omitting it",
        "{t}: always add {w}",
    ),
    "drop": (
        "When calling {t}, drop {w} instead of passing it",
        "When calling {t}, never pass {w}",
        "{t}: do not pass {w}",
    ),
    "use": (
        "When calling {t}, use {w} instead of {f}",
        "When calling {t}, use {w}, not {f}",
        "{t}: use {w} instead of {f}",
        "{t}: use {w}, not {f}",
    ),
}
_ZH = {
    "swap": ("{t}出错时改用{w}而不是{f}", "{t}出错时改用{w}"),
    "add": ("调用{t}时加上{w}而不是省略", "{t}要加上{w}"),
    "drop": ("调用{t}时去掉{w}而不是保留", "{t}不要传{w}"),
    "use": ("调用{t}时用{w}而不是{f}", "{t}用{w}而非{f}"),
}


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _diff(old: str, new: str) -> tuple[str, str]:
    """The differing middle of two strings, by words (else by characters)."""
    a, b = old.split(), new.split()
    if len(a) > 1 or len(b) > 1:
        i = 0
        while i < min(len(a), len(b)) and a[i] == b[i]:
            i += 1
        j = 0
        while j < min(len(a), len(b)) - i and a[-1 - j] == b[-1 - j]:
            j += 1
        return " ".join(a[i : len(a) - j]), " ".join(b[i : len(b) - j])
    return old, new


def _clip(text: str, budget: int) -> str:
    text = " ".join(text.split())
    if len(text) <= budget:
        return text
    return text[: max(1, budget - 1)].rstrip() + "…"


class RuleBasedDistiller:
    """Lessons from failed-then-fixed tool calls (no model needed).

    Args:
        max_chars: the lesson length limit (``settings.lesson_max_chars``).
        confidence: the confidence given to every lesson.
        max_records: at most this many lessons per run.
    """

    name = NAME

    def __init__(
        self, *, max_chars: int = 50, confidence: float = 0.65, max_records: int = 3
    ) -> None:
        self.max_chars = max_chars
        self.confidence = confidence
        self.max_records = max_records

    def distill(self, trajectory: Trajectory) -> list[dict[str, Any]]:
        """Candidate records (dicts with the record fields) for a run."""
        chinese = is_chinese(trajectory)
        calls = _calls(trajectory)
        out: list[dict[str, Any]] = []
        seen: set[str] = set()
        for i, bad in enumerate(calls):
            if not bad.failed or len(out) >= self.max_records:
                continue
            fix = next(
                (
                    c
                    for c in calls[i + 1 :]
                    if c.tool == bad.tool and not c.failed and c.args != bad.args
                ),
                None,
            )
            if (
                fix is None
                and i + 1 < len(calls)
                and not calls[i + 1].failed
                and calls[i + 1].tool != bad.tool
            ):
                fix = calls[i + 1]
            if fix is None:
                continue
            lesson = self._lesson(bad, fix, chinese)
            if lesson in seen:
                continue
            seen.add(lesson)
            out.append(self._record(trajectory, bad, fix, lesson, chinese))
        return out

    # ------------------------------------------------------------------ wording

    def _parts(self, bad: _Call, fix: _Call) -> tuple[str, str, str]:
        """(kind, worked, failed): kind is 'swap' (another tool), 'add', 'drop' or 'use'."""
        if fix.tool != bad.tool:
            return "swap", fix.tool, bad.tool
        keys = [
            k for k in sorted(set(bad.args) | set(fix.args)) if bad.args.get(k) != fix.args.get(k)
        ]
        if len(keys) == 1:
            k = keys[0]
            old, new = bad.args.get(k), fix.args.get(k)
            if isinstance(old, str) and isinstance(new, str):
                old, new = _diff(old, new)
                if not old:
                    return "add", new, ""
                if not new:
                    return "drop", old, ""
                return "use", new, old
            if old is None:
                return "add", f"{k}={_show(new)}", ""
            if new is None:
                return "drop", f"{k}={_show(old)}", ""
            return "use", f"{k}={_show(new)}", f"{k}={_show(old)}"
        worked = ", ".join(f"{k}={_show(fix.args[k])}" for k in keys if k in fix.args)
        failed = ", ".join(f"{k}={_show(bad.args[k])}" for k in keys if k in bad.args)
        return "use", worked or "other arguments", failed or "the defaults"

    def _lesson(self, bad: _Call, fix: _Call, chinese: bool) -> str:
        """The first wording that fits the limit; else the shortest, with values clipped."""
        kind, worked, failed = self._parts(bad, fix)
        ladder = (_ZH if chinese else _EN)[kind]
        tool = bad.tool
        for template in ladder:
            lesson = template.format(t=tool, w=worked, f=failed)
            if len(lesson) <= self.max_chars:
                return lesson
        template = min(ladder, key=lambda tpl: len(tpl.format(t=tool, w="", f="")))
        if len(template.format(t=tool, w="", f="")) > self.max_chars - 6:
            tool = _clip(tool, max(3, len(tool) // 2))
        budget = max(2, self.max_chars - len(template.format(t=tool, w="", f="")))
        if "{f}" in template:
            w = _clip(worked, max(1, max(budget // 2, budget - len(failed))))
            f = _clip(failed, max(1, budget - len(w)))
        else:
            w, f = _clip(worked, budget), ""
        return _clip(template.format(t=tool, w=w, f=f), self.max_chars)

    def _record(
        self, trajectory: Trajectory, bad: _Call, fix: _Call, lesson: str, chinese: bool
    ) -> dict[str, Any]:
        def call(c: _Call) -> str:
            return f"{c.tool}({json.dumps(c.args, ensure_ascii=False)})"[:600]

        error = (bad.error.strip().splitlines() or [""])[0][:200]
        if chinese:
            trigger = f"{trajectory.goal}（{bad.tool}出错：{error}）"
            action = f"{call(bad)} 失败，随后 {call(fix)} 成功"
            outcome = f"{trajectory.outcome}：先失败后修正"
        else:
            trigger = f"{trajectory.goal} ({bad.tool} failed: {error})"
            action = f"{call(bad)} failed; then {call(fix)} worked"
            outcome = f"{trajectory.outcome}: failed, then fixed"
        return {
            "scene": trajectory.scene or "general",
            "trigger": trigger[:1000],
            "action": action[:1500],
            "outcome": outcome,
            "lesson": lesson,
            "confidence": self.confidence,
            # cited like a model's lesson, so that the same screen applies
            "steps": sorted({*bad.steps, *fix.steps}),
            "evidence": error,
        }
