"""The dedup guard's lexical veto: why two lessons close in embedding space stay apart.

Embedding models place "increase the timeout" and "decrease the timeout" at cosine
~0.99, and an English-only model puts many different Chinese sentences above 0.9.
These cheap lexical checks veto a merge that the cosine threshold alone would make
(``memory.write_flows.WriteFlows.same_meaning``). Every rule is about the form of a
difference (a number, a negation, a unit of time, a name, the order of steps, one word
swapped), not about the words of any data set: what they cost and catch is measured
in ``bench/bench_zh.py`` (the development pairs), ``bench/bench_dedup.py``
(hand-written pairs no rule was tuned on) and ``tests/test_dedup_rules.py`` (fresh
pairs); ``bench/calibrate_dedup.py`` counts the different lessons they let through.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from difflib import SequenceMatcher

from .dedup_lexicon import (
    _APOSTROPHES,
    _CJK_CHAR,
    _CJK_NEGATIONS,
    _CJK_NOT_NEGATIONS,
    _CJK_RUN,
    _CJK_TIME_UNIT,
    _CLAUSE_WORDS,
    _LATIN_WORD,
    _NAME_SHAPE,
    _NEGATING_VERBS,
    _NEGATIONS,
    _NUMBER,
    _OPPOSITE_PAIRS,
    _QUANTITY_WORDS,
    _SAME_TIME_UNIT,
    _SEQUENCE_WORDS,
    _STEP_MARK,
    _SYNONYM,
    _UNIT,
)
from .text import _STOP, _WORD, CJK_FUNCTION_CHARS, has_cjk


def _normal(text: str) -> str:
    """NFKC (full-width letters and digits as ASCII), lower case, no apostrophes
    ("don't" is "dont")."""
    return _APOSTROPHES.sub("", unicodedata.normalize("NFKC", text).lower())


def _negations(text: str) -> int:
    """How many negations a text makes: negation words and characters, "don't" and
    the other contractions, and the verbs that negate (ignore, skip, 忽略)."""
    lowered = _CJK_NOT_NEGATIONS.sub(" ", _normal(text))
    words = _WORD.findall(_CJK_RUN.sub(" ", lowered))
    return sum(w in _NEGATIONS or w in _NEGATING_VERBS for w in words) + sum(
        lowered.count(n) for n in _CJK_NEGATIONS
    )


def _content_units(text: str) -> set[str]:
    """Content words (Latin, stop words removed) and content characters (CJK)."""
    text = _normal(text)
    units = {w for w in _WORD.findall(_CJK_RUN.sub(" ", text)) if w not in _STOP}
    units |= {ch for ch in text if _CJK_CHAR.match(ch) and ch not in CJK_FUNCTION_CHARS}
    return units


def _quantities(text: str) -> tuple[set[str], set[str]]:
    """The numbers (``３０`` is ``30``) and the English quantity words of a text."""
    text = _normal(text)
    words = {
        w[:-1] if w.endswith("s") and w[:-1] in _QUANTITY_WORDS else w  # "30 seconds" / "30 second"
        for w in _WORD.findall(_CJK_RUN.sub(" ", text))
    }
    return set(_NUMBER.findall(text)), words & _QUANTITY_WORDS


def _cjk_time_units(text: str) -> set[str]:
    """The Chinese units of time a text counts in (``_CJK_TIME_UNIT``)."""
    found = _CJK_TIME_UNIT.findall(_normal(text))
    return {_SAME_TIME_UNIT.get(u, u) for u in found}


def _names(text: str) -> set[str]:
    """The words that name things (``_NAME_SHAPE``), lower-cased; not "NEVER" nor "DON'T"."""
    text = _APOSTROPHES.sub("", unicodedata.normalize("NFKC", text))
    words = _LATIN_WORD.findall(text)
    if not has_cjk(text):
        words = [w for w in words if _NAME_SHAPE.match(w)]
    return {w.lower() for w in words} - _JUDGED


_JUDGED = {w for x, y, cjk in _OPPOSITE_PAIRS if not cjk for w in (x, y)}.union(
    _STOP, _NEGATIONS, _NEGATING_VERBS, _QUANTITY_WORDS, _SEQUENCE_WORDS, _CLAUSE_WORDS
)


def _unit_sequence(text: str) -> list[str]:
    """Content units in order: Latin words (stop words out, a plural ``s`` dropped,
    every negation as ``not``) and CJK content characters."""
    out: list[str] = []
    for m in _UNIT.finditer(_normal(text)):
        unit = m.group()
        if _CJK_CHAR.match(unit):
            if unit not in CJK_FUNCTION_CHARS:
                out.append(unit)
        elif unit in _NEGATIONS:
            out.append("not")  # "Do not" / "Don't": the polarity rule compares them
        elif unit not in _STOP and unit not in _CLAUSE_WORDS:
            unit = (
                unit[:-1]
                if len(unit) > 3 and unit.endswith("s") and not unit.endswith("ss")
                else unit
            )
            out.append(_SYNONYM.get(unit, unit))
    return out


def _steps(text: str) -> tuple[list[str], list[frozenset[str]]]:
    """The sequence markers of a text in order, and the content units between them
    (one set per step: before the first marker, after each)."""
    text = _normal(text)
    markers: list[str] = []
    steps: list[set[str]] = [set()]
    pos = 0
    for m in _STEP_MARK.finditer(text):
        steps[-1] |= set(_unit_sequence(text[pos : m.start()]))
        markers.append(m.group())
        steps.append(set())
        pos = m.end()
    steps[-1] |= set(_unit_sequence(text[pos:]))
    return markers, [frozenset(s) for s in steps]


def _reordered(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` put the same steps in another order: the same sequence
    markers, the same content, and a unit under another marker ("先停服务再升级驱动" /
    "先升级驱动再停服务")."""
    if not _STEP_MARK.search(_normal(a)):  # most lessons: no step markers
        return False
    ma, sa = _steps(a)
    mb, sb = _steps(b)
    if ma != mb or Counter(_unit_sequence(a)) != Counter(_unit_sequence(b)):
        return False
    return sa != sb


# Two steps put in an order by position words, as (pattern, whether its first group is
# the first step): "X 前先 Y" / "先 Y 再 X" / "Y before X" / "before X, Y" / "X, then Y".
_ORDER_FORMS = [
    (re.compile(p), first)
    for p, first in [
        (r"(.+?)(?:之前|以前|前)\s*[,，]?\s*先(.+)", False),
        (r"先(.+?)[,，]?\s*(?:再|然后|接着|随后)(.+)", True),
        (r"(.+?)(?:之后|以后|后)\s*[,，]?\s*(?:再|才)(.+)", True),
        (r"^before (.+?),(.+)", False),
        (r"^after (.+?),(.+)", True),
        (r"(.+?),?\s+(?:and )?then (.+)", True),
        (r"(.+?) before (.+)", True),
        (r"(.+?) after (.+)", False),
    ]
]


def _two_steps(text: str) -> tuple[set[str], set[str]] | None:
    """The content units of a text's two steps, first step first (``_ORDER_FORMS``)."""
    text = _normal(text)
    for form, first in _ORDER_FORMS:
        m = form.search(text)
        if m:
            x, y = set(_unit_sequence(m.group(1))), set(_unit_sequence(m.group(2)))
            return (x, y) if first else (y, x)
    return None


def _swapped_steps(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` put two steps in the opposite order however they say it
    ("先升级从库再升级主库" / "升级从库之前先升级主库"): each step of one is more like
    the other's other step than like its own place there."""
    sa, sb = _two_steps(a), _two_steps(b)
    if sa is None or sb is None:
        return False

    def like(x: set[str], y: set[str]) -> float:
        return len(x & y) / len(x | y) if x | y else 0.0

    kept = like(sa[0], sb[0]) + like(sa[1], sb[1])
    crossed = like(sa[0], sb[1]) + like(sa[1], sb[0])
    return crossed > kept and crossed >= 1.0


def _minimal_pair(a: str, b: str) -> str | None:
    """Why two lessons are one sentence with a part swapped or a detail added, or ``None``.

    A rewording restructures a sentence: words move, appear and drop out. A minimal
    pair keeps it and swaps a word ("每批 1000 条" / "每批 100 条", "客服团队" /
    "运维团队", numpy / pandas) or adds a detail ("给订单表加索引" / "给订单表的用户字段
    加索引"). Multilingual models put such pairs closer (0.97-0.998 with
    multilingual-e5-small) than real rewordings (0.94-0.99), so no cosine separates them.
    A swap that removes words another swap puts back elsewhere is a move, hence a
    restructuring ("JSON 解析换成 orjson" / "用 orjson 来解析 JSON"), unless the two
    hold exactly the same words (then the swap exchanges roles: "writes to the
    primary, reads to the replica" / the other way round).
    """
    ua, ub = _unit_sequence(a), _unit_sequence(b)
    ops = [
        op for op in SequenceMatcher(None, ua, ub, autojunk=False).get_opcodes() if op[0] != "equal"
    ]
    if not ops:
        return None
    if all(op[0] == "replace" for op in ops):
        # A unit one swap removes and another swap adds moved; one kept in an equal
        # part ("订单表的用户字段" / "订单表的订单字段") was not.
        sides = [(set(ua[i1:i2]), set(ub[j1:j2])) for _, i1, i2, j1, j2 in ops]
        moved = any(
            sa & sb2 or sb & sa2
            for k, (sa, sb) in enumerate(sides)
            for k2, (sa2, sb2) in enumerate(sides)
            if k != k2
        )
        if moved and Counter(ua) != Counter(ub):
            return None
        swapped = ", ".join(
            f"{''.join(ua[i1:i2])} / {''.join(ub[j1:j2])}" for _, i1, i2, j1, j2 in ops
        )
        return f"the same sentence with other words ({swapped})"
    if len(ops) == 1 and (ops[0][2] - ops[0][1]) + (ops[0][4] - ops[0][3]) >= 2:
        return "one adds a detail to the other"
    return None


def merge_veto(a: str, b: str, *, covered: bool, minimal_pairs: bool = True) -> str | None:
    """Why two lessons close in embedding space must not be merged, or ``None``.

    Args:
        a, b: the two lessons.
        covered: whether the embedding model handles their language; if not, only
            rewordings with the same content words or characters may merge. If so,
            rewordings may use other words, but a minimal pair (one sentence with a
            word swapped or a detail added) never merges.
        minimal_pairs: whether to apply that last rule. A multilingual model needs
            it, so does one whose cosines crowd near 1 (e5), and so does any vector of
            more than lesson and trigger (the shared context lifts a minimal pair's
            cosine); otherwise an English-only model's
            cosine separates English minimal pairs (increase / decrease aside, which the
            opposite terms catch), and the rule would keep apart rewordings that drop a
            phrase ("When calling X, ..." / "With X, ...").
    """
    if a == b:  # the same lesson written again: nothing to compare
        return None
    neg_a, neg_b = _negations(a), _negations(b)
    if (neg_a > 0) != (neg_b > 0):
        return "one is negated"
    if neg_a != neg_b:  # "不要忽略警告" / "忽略警告": a negation cancelled is another lesson
        return "a different number of negations"
    (na, qa), (nb, qb) = _quantities(a), _quantities(b)
    if na != nb:
        return "different numbers"
    if qa != qb or _cjk_time_units(a) != _cjk_time_units(b):
        return "different quantities"
    names_a, names_b = _names(a), _names(b)
    if names_a - names_b and names_b - names_a:
        return f"other names ({', '.join(sorted(names_a ^ names_b))})"
    la, lb = _normal(a), _normal(b)
    wa, wb = set(_WORD.findall(la)), set(_WORD.findall(lb))
    for x, y, cjk in _OPPOSITE_PAIRS:
        if cjk:
            only_a = {t for t in (x, y) if t in la and t not in lb}
            only_b = {t for t in (x, y) if t in lb and t not in la}
            if only_a and only_b and only_a != only_b:
                return f"opposite terms ({x} / {y})"
        elif (x in wa - wb and y in wb - wa) or (y in wa - wb and x in wb - wa):
            return f"opposite terms ({x} / {y})"
    if _reordered(a, b) or _swapped_steps(a, b):
        return "the same steps in another order"
    if not covered and _content_units(a) != _content_units(b):
        return "different wording in a language the embedding model does not cover"
    return _minimal_pair(a, b) if minimal_pairs else None


# A number whole ("1.5" is not "15"), else one CJK character or one Latin word.
_WORDING_UNIT = re.compile(f"{_NUMBER.pattern}|{_UNIT.pattern}", re.UNICODE)


def repeat_key(lesson: str, trigger: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What makes two records the same lesson written again: the words of the lesson
    and of the trigger, up to case, full or half width, whitespace and punctuation.

    With more than lesson and trigger embedded (``document_fields``), two runs that
    learned the same lesson in the same situation, by other actions or with other
    outcomes, lie at cosines of 0.89-1.0 with multilingual-e5-small (median 0.965, 32 %
    under its 0.96 threshold), where unrelated lessons reach 0.94: no threshold
    separates them, but the repeated text does (``write_plan.Planner``).
    """
    return (
        tuple(_WORDING_UNIT.findall(_normal(lesson))),
        tuple(_WORDING_UNIT.findall(_normal(trigger or ""))),
    )
