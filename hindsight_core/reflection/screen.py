"""The screen between a distiller's candidates and the memory.

Each check drops a candidate with a reason that :class:`ReflectionResult` reports:

1. ``confidence`` below ``settings.min_confidence``;
2. a *copy*: the lesson equals or nearly equals text of the prompt;
3. *generic*: once the vocabulary every lesson uses and the run's own tool and
   command names are set aside, nothing is left ("be careful", "use ls to list
   files");
4. *grounding*: the lesson cites no step, cites a step the run lacks, or shares no
   content with the steps it cites;
5. *nothing new*: a lesson that cites no failure, retry, correction or complaint
   must quote (``evidence``) what a cited step showed, and share content with it;
6. *failure lessons* (citing a signal step) must share content with the error, the
   corrected call or the complaint (or the call it speaks about), and must not say
   the opposite of the run: recommend what the user said not to do, or the failed
   call's arguments instead of the correction's;
7. length and language: these can be fixed by the model, so they are returned as
   *fixable* with an instruction ("shorten the lesson to at most 50 characters"); the
   distiller sends them back once and drops what still fails, never truncates.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ..dedup_veto import merge_veto
from ..errors import ValidationError
from ..models import parse_experience
from ..settings import Settings
from ..text import CJK_RANGES
from .evidence import (
    Run,
    affirmed_units,
    analyse,
    asked_units,
    changed_units,
    near_equal,
    negated_units,
    normalized,
    prohibitions,
    quoted_in,
    units,
)
from .trajectory import Trajectory

_SENTENCE = re.compile(r"(?<=[.!?。！？])\s+|\n+|[\"“”]")
_STEP_NUMBER = re.compile(r"\d+")
_CJK_CHAR = re.compile(f"[{CJK_RANGES}]")
_LATIN_WORD = re.compile(r"[A-Za-z]+")


def prompt_fragments(*prompts: str) -> list[str]:
    """The sentences and quoted phrases of prompts, to compare lessons with."""
    out: list[str] = []
    for prompt in prompts:
        for part in _SENTENCE.split(prompt):
            part = part.strip(" -*`:,;()[]{}0123456789.")
            if len(normalized(part)) >= 6:
                out.append(part)
    return out


def copies_prompt(lesson: str, fragments: list[str]) -> str | None:
    """The prompt text ``lesson`` copies (equal, nearly equal, or a sentence of it)."""
    nl = normalized(lesson)
    for frag in fragments:
        nf = normalized(frag)
        if near_equal(lesson, frag) or (len(nl) >= 8 and nl in nf):
            return frag
    return None


def cited_steps(value: Any) -> list[int] | None:
    """Step numbers from ``[2, 4]``, ``["2", "step 4"]`` or ``"2, 4"``; None if absent."""
    if value is None or value == "" or value == []:
        return None
    items = value if isinstance(value, list) else [value]
    out: list[int] = []
    for item in items:
        if isinstance(item, bool):
            continue
        if isinstance(item, int | float):
            out.append(int(item))
        elif isinstance(item, str):
            out.extend(int(m) for m in _STEP_NUMBER.findall(item))
    return sorted(set(out)) or None


def _run_names(trajectory: Trajectory) -> set[str]:
    """Units of the run's tool names and command words (``ls`` of ``ls ~/Documents``)."""
    names: set[str] = set()
    for step in trajectory.steps:
        if step.tool:
            names |= units(step.tool.replace("_", " ")) | units(step.tool)
        for value in (step.args or {}).values():
            if isinstance(value, str) and len(value.split()) > 1:  # a command line
                names |= units(value.split()[0])
    return names


def cjk_weight(text: str) -> float:
    """CJK characters over CJK characters plus Latin words: an identifier such as
    ``package-lock.json`` weighs like one Chinese word, not like its 16 letters."""
    cjk = len(_CJK_CHAR.findall(text))
    latin = len(_LATIN_WORD.findall(_CJK_CHAR.sub(" ", text)))
    return cjk / (cjk + latin) if cjk + latin else 0.0


def language_problem(lesson: str, chinese: bool) -> str | None:
    """An instruction when the lesson is not in the run's language, else None."""
    weight = cjk_weight(lesson)
    if chinese and weight < 0.25:
        return "the run is in Chinese: write the lesson in Chinese"
    if not chinese and weight > 0.5:
        return "the run is in English: write the lesson in English"
    return None


def _grounding(cand: dict[str, Any], run: Run, trajectory: Trajectory) -> str | None:
    """Why the lesson is not supported by the steps it cites, or None."""
    lesson = str(cand.get("lesson") or "")
    steps = cited_steps(cand.get("steps"))
    if not steps:
        return "cites no step of the run (it must give the numbers of the steps it draws on)"
    missing = [n for n in steps if n not in run.texts]
    if missing:
        return f"cites step {', '.join(map(str, missing))}, but the run has {len(run.texts)} steps"
    mine = units(lesson)
    cited = set().union(*(units(run.texts[n]) for n in steps))
    if not mine & cited:
        return f"shares no content with the steps it cites ({', '.join(map(str, steps))})"
    signals = [n for n in steps if n in run.context]
    if not signals:  # not a failure lesson: it must quote what a cited step showed
        evidence = str(cand.get("evidence") or "").strip()
        if not evidence and run.signals:
            return (
                "cites none of the run's failures, retries, corrections or complaints "
                f"(steps {', '.join(map(str, run.signals))}) and quotes nothing it learned"
            )
        if not evidence:
            return (
                "nothing new: the run has no error, retry, correction or complaint, and "
                "the record quotes nothing it learned"
            )
        if not any(quoted_in(evidence, run.texts[n]) for n in steps):
            return "its evidence is not a quote of the steps it cites"
        if not mine & units(evidence):
            return "shares no content with its evidence"
        return None
    around = {m for n in signals for m in run.context[n]}
    if not mine & set().union(*(units(run.texts[m]) for m in around)):
        return "shares no content with the error, correction or complaint it cites"
    return _contradiction(lesson, run, trajectory)


def _lead(lesson: str) -> set[str]:
    """The units of the lesson's opening verb, in an imperative ("Delete ...", "删除...");
    none for "删除前..." (before deleting) or an opening generic word ("Check ...")."""
    text = lesson.strip()
    if _CJK_CHAR.match(text):
        return set() if text[2:3] in ("前", "后", "时", "之") else units(text[:2])
    words = re.findall(r"[\w'-]+", text)
    while words and words[0].lower() in ("always", "please", "just"):
        words.pop(0)
    return units(words[0]) if words else set()


def _contradiction(lesson: str, run: Run, trajectory: Trajectory) -> str | None:
    """Why the lesson says the opposite of what the run showed, or None."""
    said = affirmed_units(lesson)
    for n in run.complaints:
        complaint = trajectory.steps[n - 1].content
        if said & asked_units(complaint):
            continue  # it follows what the user asked for instead
        for negated, clause in prohibitions(complaint):
            # the forbidden verb on the forbidden object, or as the lesson's own verb
            if negated & said and (not clause or clause & said or negated & _lead(lesson)):
                return (
                    f"recommends what the user said not to do in step {n} "
                    f"({', '.join(sorted(negated & said))})"
                )
    bad, good = changed_units(run, trajectory)
    if said & bad and not units(lesson) & good and not negated_units(lesson):
        return "recommends the failed call's arguments, not the correction's"
    return None


def screen(
    candidates: list[dict[str, Any]],
    trajectory: Trajectory,
    settings: Settings,
    prompts: list[str],
    *,
    can_fix: bool = True,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Check candidates; returns ``(kept, dropped, fixable)``.

    Args:
        candidates: the parsed records (``lesson``, ``confidence``, ``steps``...).
        trajectory: the run they were distilled from.
        settings: limits (``lesson_max_chars``, ``min_confidence``...).
        prompts: the prompt texts the model saw (lessons must not copy them).
        can_fix: whether a length or language problem may be sent back (else dropped).

    Returns:
        ``kept``: candidates that passed; ``dropped``: ``{"record", "reason"}``;
        ``fixable``: ``{"record", "reason"}`` to send back to the model once, the
        reason saying what to change ("shorten it to ≤ 50 characters").
    """
    run = analyse(trajectory)
    fragments = prompt_fragments(*prompts)
    names = _run_names(trajectory)
    kept: list[dict[str, Any]] = []
    dropped: list[dict[str, Any]] = []
    fixable: list[dict[str, Any]] = []
    for cand in candidates:
        lesson = str(cand.get("lesson") or "").strip()
        confidence = float(cand.get("confidence", 0.0))
        copied = copies_prompt(lesson, fragments)
        reason: str | None = None
        if confidence < settings.min_confidence:
            reason = f"confidence {confidence:g} is below {settings.min_confidence:g}"
        elif copied is not None:
            reason = f"copies the prompt ({copied[:60]!r})"
        elif not units(lesson) - names:
            reason = "generic advice or what the tool does anyway; nothing taken from this run"
        else:
            reason = _grounding(cand, run, trajectory)
        if reason is not None:
            dropped.append({"record": cand, "reason": reason})
            continue
        fixes = []
        if len(lesson) > settings.lesson_max_chars:
            fixes.append(
                f"the lesson is {len(lesson)} characters: shorten it to ≤ "
                f"{settings.lesson_max_chars} characters (a CJK character counts "
                "as one), keeping its point"
            )
        wrong_language = language_problem(lesson, run.chinese)
        if wrong_language:
            fixes.append(wrong_language)
        if fixes:
            reason = "; ".join(fixes)
            if can_fix:
                fixable.append({"record": cand, "reason": reason})
            else:
                dropped.append({"record": cand, "reason": reason + " (asked once)"})
            continue
        kept.append(cand)
    return kept, dropped, fixable


def validate(record: dict[str, Any], settings: Settings) -> str | None:
    """The record's validation error (the write path's own rules), or None."""
    try:
        parse_experience(
            record,
            lesson_max_chars=settings.lesson_max_chars,
            field_max_chars=settings.field_max_chars,
        )
    except ValidationError as exc:
        return str(exc)
    return None


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def screen_merge(
    lesson: str,
    originals: list[str],
    prompts: list[str],
    settings: Settings,
    triggers: Sequence[str] = (),
) -> tuple[str | None, str | None]:
    """Check a merged lesson against the lessons it replaces.

    It must keep what every original says (share content with each, same polarity,
    no opposite terms) and add no claim (no number none of them has, at most one
    content word none of them nor their ``triggers`` use), and must not copy the
    prompt.

    Returns:
        ``(reason, fix)``: ``reason`` drops the merge; ``fix`` asks for a rewrite
        once (length, language); both None when it passes.
    """
    copied = copies_prompt(lesson, prompt_fragments(*prompts))
    if copied is not None:
        return f"the merged lesson copies the prompt ({copied[:60]!r})", None
    mine = units(lesson)
    for i, original in enumerate(originals, start=1):
        if not mine & units(original):
            return f"the merged lesson drops what lesson {i} says ({original!r})", None
        veto = merge_veto(lesson, original, covered=True)
        if veto in ("one is negated",) or (veto or "").startswith("opposite"):
            return f"the merged lesson contradicts lesson {i} ({veto})", None
    numbers = set(_NUMBER.findall(lesson)) - set().union(
        *(set(_NUMBER.findall(o)) for o in originals)
    )
    if numbers:
        return (
            "the merged lesson adds a number none of the lessons has "
            f"({', '.join(sorted(numbers))})"
        ), None
    new = mine - set().union(*(units(o) for o in [*originals, *triggers]))
    if len(new) > 1:
        return f"the merged lesson adds claims ({', '.join(sorted(new))})", None
    fixes = []
    if len(lesson) > settings.lesson_max_chars:
        fixes.append(
            f"the lesson is {len(lesson)} characters: shorten it to ≤ "
            f"{settings.lesson_max_chars} characters (a CJK character counts as one)"
        )
    chinese = cjk_weight(" ".join(originals)) >= 0.25
    wrong_language = language_problem(lesson, chinese)
    if wrong_language:
        fixes.append(wrong_language.replace("the run is", "the lessons are"))
    return None, "; ".join(fixes) or None
