"""Evidence before any model call: what a run shows, found from its structure.

A small model cannot be trusted to find what a run teaches; the run's structure can.
:func:`find_evidence` turns a trajectory into :class:`Finding` objects, one per thing
the run teaches:

- ``fix``: a call failed and a later call of the same tool (for a command line, the
  same program) with other arguments worked. What changed is taken against the call
  that *failed*, not the call just before the fix: the flag added, the value swapped.
- ``prerequisite``: a call failed and the same call worked later, after other calls
  (``pip install pyyaml`` before ``pytest``, ``git pull --rebase`` before ``git push``).
- ``retry``: a call failed and the same call worked right after it (a flaky service).
- ``correction``: the user corrected the agent after it acted (anything but thanks);
  with the call it corrected and the call that followed, if any.

- ``cause``: a call failed, nothing put it right, and its error names what an earlier
  call of another tool acted on (``delete_file`` X, then "X required by ... is missing").

Other failures that are never put right, repeated reads and noise give nothing. A
run without findings has nothing new to teach: the distiller makes no model call.
Each finding carries its confidence (from the evidence, never from the model), the
terms a lesson must name (``key``), the terms of what failed (``avoid``), and a
lesson built by rule, the fallback when the model's lesson fails the screen.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from .calls import (
    COMMAND_KEYS,
    arg_changes,
    arg_values,
    as_program,
    changed_keys,
    command_line,
    describe_changes,
    program,
    render,
)
from .correction_rule import correction_lesson
from .evidence import analyse, is_chinese, units
from .rules import _EN, _ZH, RuleBasedDistiller, _Call, _calls
from .trajectory import Trajectory

_NEGATIONS = frozenset({"don", "dont", "not", "never", "no"})
FindingKind = Literal["fix", "prerequisite", "retry", "correction", "cause"]
MAX_FINDINGS = 3
# Confidence per kind of evidence: a changed call that then worked is the surest.
CONFIDENCE: dict[str, float] = {
    "fix": 0.8,
    "prerequisite": 0.75,
    "retry": 0.65,
    "correction": 0.8,
    "correction-unfollowed": 0.7,
    "cause": 0.7,
}


@dataclass
class Finding:
    """One piece of evidence and what a lesson drawn from it must say.

    Attributes:
        kind: ``fix``, ``prerequisite``, ``retry`` or ``correction``.
        steps: the step numbers it rests on.
        tool: the tool (for a command line, ``shell: git``).
        failed: the failed (or corrected) call, as ``tool {args}``.
        error: the failure's first line.
        fixed: the call that worked (the fix, the prerequisite, what followed).
        added: argument parts the fix has and the failed call lacks.
        removed: argument parts the failed call had and the fix lacks.
        user: the user's words (corrections).
        key: terms one of which a lesson must name.
        avoid: terms of what failed; a lesson must not recommend them.
        confidence: from the evidence.
        rule_lesson: a lesson built by rule, or None.
        changed: the changes in words (``port: 5433 -> 5432``, ``added --user``).
    """

    kind: FindingKind
    steps: list[int]
    tool: str
    failed: str = ""
    error: str = ""
    fixed: str = ""
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    user: str = ""
    key: list[str] = field(default_factory=list)
    avoid: list[str] = field(default_factory=list)
    confidence: float = 0.7
    rule_lesson: str | None = None
    changed: list[str] = field(default_factory=list)


def _swap_lesson(
    tool: str, added: list[str], removed: list[str], chinese: bool, limit: int
) -> str | None:
    """ "When calling export_report, use csv, not pdf" from a correction's changes."""
    w, f = ", ".join(added[:2]), ", ".join(removed[:2])
    kind = "use" if added and removed else "add" if added else "drop" if removed else ""
    if not kind:
        return None
    for template in (_ZH if chinese else _EN)[kind]:
        lesson = template.format(t=tool, w=w or f, f=f)
        if len(lesson) <= limit:
            return lesson
    return None


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:200]


def _terms(parts: list[str]) -> list[str]:
    return [p for p in parts if p.strip() and (units(p) or len(p.strip()) >= 2)]


def _fix_findings(
    trajectory: Trajectory, calls: list[_Call], rule: RuleBasedDistiller
) -> list[Finding]:
    chinese = is_chinese(trajectory)
    out: list[Finding] = []
    used: set[int] = set()
    for i, bad in enumerate(calls):
        if not bad.failed or i in used:
            continue
        me = program(bad)
        later = [(j, c) for j, c in enumerate(calls[i + 1 :], start=i + 1) if program(c) == me]
        same = next((j for j, c in later if not c.failed and c.args == bad.args), None)
        other = next((j for j, c in later if not c.failed and c.args != bad.args), None)
        error = _first_line(bad.error)
        if same is not None:
            between = [c for c in calls[i + 1 : same] if not c.failed]
            used.update(j for j, c in later if j <= same)
            fix = calls[same]
            if between:
                pre = between[-1]
                added = (
                    arg_changes(bad.args, pre.args)[0]
                    if program(pre) == me
                    else arg_values(pre.args)
                )
                key = _terms(added) + [pre.tool] * (pre.tool != bad.tool) + _error_terms(error)
                lesson = _prerequisite_lesson(pre, bad, chinese, rule.max_chars)
                first = command_line(pre) or " ".join([pre.tool, *arg_values(pre.args)])
                out.append(
                    Finding(
                        "prerequisite",
                        sorted({*bad.steps, *pre.steps, *fix.steps}),
                        me,
                        failed=render(bad),
                        error=error,
                        fixed=render(pre),
                        added=added,
                        removed=[],
                        key=key,
                        confidence=CONFIDENCE["prerequisite"],
                        rule_lesson=lesson,
                        changed=[f"ran {first} first, then the same call again"],
                    )
                )
            else:
                out.append(
                    Finding(
                        "retry",
                        sorted({*bad.steps, *fix.steps}),
                        me,
                        failed=render(bad),
                        error=error,
                        fixed=render(fix),
                        key=["retry", "again", "重试", "再试", *_error_terms(error)],
                        confidence=CONFIDENCE["retry"],
                        changed=["nothing: the same call, repeated, worked"],
                        rule_lesson=_retry_lesson(bad, error, chinese, rule.max_chars),
                    )
                )
            continue
        if other is None:  # never put right: noise, unless the error names its cause
            cause = _cause(calls[:i], bad, error)
            if cause is not None:
                out.append(cause)
            continue
        fix = calls[other]
        used.update(j for j, c in later if j <= other)
        added, removed = arg_changes(bad.args, fix.args)
        names = [k for k in changed_keys(bad.args, fix.args) if k not in COMMAND_KEYS]
        out.append(
            Finding(
                "fix",
                sorted({*bad.steps, *fix.steps}),
                me,
                failed=render(bad),
                error=error,
                fixed=render(fix),
                added=added,
                removed=removed,
                key=_terms(added) + names,
                avoid=_terms(removed),
                confidence=CONFIDENCE["fix"],
                rule_lesson=rule._lesson(as_program(bad), as_program(fix), chinese),
                changed=describe_changes(bad.args, fix.args),
            )
        )
    return out


def _cause(before: list[_Call], bad: _Call, error: str) -> Finding | None:
    """A failure never put right whose error names what an earlier call of another tool
    acted on (``delete_file {"name": X}``, then "X required by package.json is
    missing"): that call is its cause, and a lesson names what the error names."""
    text = bad.error.lower()
    for cause in reversed(before):
        if cause.failed or cause.tool == bad.tool:
            continue
        named = [v for v in arg_values(cause.args) if len(v) >= 4 and v.lower() in text]
        if not named:
            continue
        rest = [t for t in re.findall(r"[\w.\-]+\.\w+|\w{4,}", error) if t not in named]
        return Finding(
            "cause",
            sorted({*cause.steps, *bad.steps}),
            program(bad),
            failed=render(bad),
            error=error,
            fixed=render(cause),
            key=[t for t in rest if units(t)][:8],
            confidence=CONFIDENCE["cause"],
            changed=[f"{cause.tool} acted on {', '.join(named)}; the failure names it"],
        )
    return None


def _error_terms(error: str) -> list[str]:
    """Status codes and error names of an error line (``503``, ``ReadTimeout``)."""
    import re

    return re.findall(
        r"\b[1-5]\d\d\b|\b\w+(?:Error|Exception|Timeout)\b|\b[A-Z]\w+-[A-Z]\w+\b", error
    )


def _prerequisite_lesson(pre: _Call, bad: _Call, chinese: bool, limit: int) -> str | None:
    first = command_line(pre) or " ".join([pre.tool, *arg_values(pre.args)])
    command = command_line(bad)
    then = " ".join(command.split()[:2]) if command else bad.tool
    for lesson in (
        (f"{then}前先运行{first}", f"先运行{first}再{then}")
        if chinese
        else (f"Run {first} before {then}", f"Run {first} first")
    ):
        if len(lesson) <= limit:
            return lesson
    return None


def _retry_lesson(bad: _Call, error: str, chinese: bool, limit: int) -> str | None:
    codes = _error_terms(error)
    what = codes[0] if codes else ""
    name = program(bad).split(": ")[-1]
    for lesson in (
        (f"{name}遇到{what}时重试一次", f"{name}失败时重试一次")
        if chinese
        else (f"Retry {name} once on {what}", f"Retry {name} once when it fails")
    ):
        if len(lesson) <= limit and "  " not in lesson and not lesson.endswith(" on "):
            return lesson
    return None


def _correction_findings(
    trajectory: Trajectory, calls: list[_Call], max_chars: int
) -> list[Finding]:
    run = analyse(trajectory)
    goal = units(trajectory.goal)
    out: list[Finding] = []
    for n in run.complaints:
        user = trajectory.steps[n - 1].content
        before = [c for c in calls if c.steps[0] < n]
        after = [c for c in calls if c.steps[0] > n]
        nxt = next(
            (
                k
                for k, s in enumerate(trajectory.steps[n:], start=n + 1)
                if s.kind == "message" and s.role == "user"
            ),
            None,
        )
        follow = next((c for c in after if nxt is None or c.steps[0] < nxt), None)
        corrected = before[-1] if before else None
        added: list[str] = []
        removed: list[str] = []
        if follow is not None and corrected is not None:
            added, removed = arg_changes(corrected.args, follow.args)
            if follow.tool != corrected.tool:
                added.insert(0, follow.tool)
        elif follow is not None:
            added = [follow.tool, *arg_values(follow.args)]
        # the user's words, minus the goal's and minus what the user ruled out ("not PDF")
        ruled_out = set().union(*(units(p) for p in removed)) if removed else set()
        said = sorted(u for u in units(user) - goal - _NEGATIONS - ruled_out if len(u) > 1)
        key = said + _terms(added)
        lesson = None
        if (
            follow is not None
            and corrected is not None
            and follow.tool == corrected.tool
            and command_line(corrected) is None
        ):
            tool = as_program(corrected).tool
            lesson = _swap_lesson(tool, added, removed, is_chinese(trajectory), max_chars)
        if lesson is None and before:
            # the user corrects what the agent did: the last call that went through
            done = next((c for c in reversed(before) if not c.failed), before[-1])
            lesson = correction_lesson(
                user, as_program(done).tool, chinese=is_chinese(trajectory), limit=max_chars
            )
        steps = sorted(
            {n, *(corrected.steps if corrected else []), *(follow.steps if follow else [])}
        )
        out.append(
            Finding(
                "correction",
                steps,
                program(corrected) if corrected else "",
                failed=render(corrected) if corrected else "",
                fixed=render(follow) if follow else "",
                added=added,
                removed=removed,
                user=user.strip()[:500],
                key=key,
                avoid=_terms(removed),
                confidence=CONFIDENCE["correction" if follow else "correction-unfollowed"],
                rule_lesson=lesson,
                changed=describe_changes(corrected.args, follow.args)
                if follow is not None and corrected is not None
                else [],
            )
        )
    return out


def find_evidence(trajectory: Trajectory, *, max_chars: int = 50) -> list[Finding]:
    """The findings of a run (at most :data:`MAX_FINDINGS`); none: nothing to learn."""
    rule = RuleBasedDistiller(max_chars=max_chars)
    calls = _calls(trajectory)
    fixes = _fix_findings(trajectory, calls, rule)
    corrections = _correction_findings(trajectory, calls, max_chars)
    out: list[Finding] = []
    # A fix whose working call is what followed a correction is that correction's.
    followed = {s for c in corrections for s in c.steps}
    for f in fixes:
        if not (set(f.steps) - set(followed)) and corrections:
            continue
        out.append(f)
    out.extend(corrections)
    out.sort(key=lambda f: f.steps[0])
    return out[:MAX_FINDINGS]
