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

from .text import _STOP, _WORD, CJK_FUNCTION_CHARS, CJK_RANGES, has_cjk

_CJK_CHAR = re.compile(f"[{CJK_RANGES}]")
_CJK_RUN = re.compile(f"[{CJK_RANGES}]+")

_NEGATIONS = frozenset(
    "not no never nor cannot dont doesnt didnt isnt arent wasnt werent cant wont shouldnt "
    "wouldnt couldnt mustnt neednt hasnt havent hadnt without avoid".split()
)
# Verbs that say "not" by themselves: "don't compare the case" is "ignore the case",
# and "不区分大小写" is "忽略大小写". Counted for polarity only; in a sentence they stay words
# (a swap of "don't run" for "skip" is still one word swapped for another).
_NEGATING_VERBS = frozenset(
    "ignore ignores ignored ignoring skip skips skipped skipping omit omits omitted "
    "omitting".split()
)
_CJK_NEGATIONS = (
    "不", "别", "勿", "禁止", "避免", "防止", "以免", "没有", "无需", "无须", "非",
    "忽略", "跳过", "省略",
)  # fmt: skip
# Words that hold a negation character and negate nothing ("不同" different, "不断"
# continually, "非常" very, "无论" whatever, "级别" level, "分别" each).
_CJK_NOT_NEGATIONS = re.compile(
    "不同|不断|不停|不过|不少|不久|不仅|不管|不论|差不多|非常|无论"
    "|分别|区别|差别|特别|级别|类别|识别|个别|别人|别的"
)
_OPPOSITES = [
    ("increase", "decrease"),
    ("before", "after"),
    ("enable", "disable"),
    ("always", "never"),
    ("add", "remove"),
    ("more", "less"),
    ("higher", "lower"),
    ("above", "below"),
    ("min", "max"),
    ("minimum", "maximum"),
    ("true", "false"),
    ("on", "off"),
    ("open", "close"),
    ("start", "stop"),
    ("include", "exclude"),
    ("allow", "deny"),
    ("upper", "lower"),
    ("first", "last"),
    ("tabs", "spaces"),
    ("local", "utc"),
    ("sync", "async"),
    ("earlier", "later"),
    ("larger", "smaller"),
    ("longer", "shorter"),
    ("up", "down"),
    ("raise", "lower"),
    ("accept", "reject"),
    ("keep", "delete"),
    ("keep", "remove"),
    ("之前", "之后"),
    ("前", "后"),
    ("增加", "减少"),
    ("开启", "关闭"),
    ("允许", "拒绝"),
    ("打开", "关闭"),
    ("提高", "降低"),
    ("最大", "最小"),
    ("保留", "删除"),
    ("相同", "不同"),
]
_OPPOSITE_PAIRS = [(x, y, has_cjk(x)) for x, y in _OPPOSITES]
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# English quantities without digits: a lesson that says "daily" and one that says
# "weekly" (or "one hour" / "one day") differ like "1" and "7" do, and an English-only
# model's cosine does not separate them (all-MiniLM-L6-v2: 0.95). A closed class, like
# the digits; Chinese quantity characters are also parts of other words (天气, 一定), so
# there the minimal-pair and content-character rules judge.
_QUANTITY_WORDS = frozenset(
    "zero one two three four five six seven eight nine ten eleven twelve fifteen twenty "
    "thirty forty fifty sixty hundred thousand million billion dozen half twice double "
    "triple once millisecond milliseconds ms second seconds sec secs minute minutes min mins "
    "hour hours hr hrs day days week weeks month months year years hourly daily nightly "
    "weekly monthly quarterly yearly annually kb mb gb tb kib mib gib tib percent".split()
)
# Chinese units of time after a numeral or 每 ("每天" / "每周", "一小时" / "一天"): the
# digits rule's closed class for the words a rewording keeps while it moves them
# ("数据库每周全量备份一次" / "每天给数据库做一次全量备份"). Not the characters alone:
# 天 and 日 are also parts of other words (天气, 日志).
_CJK_TIME_UNIT = re.compile(
    r"(?:每|[\d一二两三四五六七八九十百千万半几])\s*个?\s*"
    r"(毫秒|秒钟|秒|分钟|小时|钟头|天|日|周|星期|礼拜|月|季度|年)"
)
_SAME_TIME_UNIT = {"秒钟": "秒", "钟头": "小时", "日": "天", "星期": "周", "礼拜": "周"}
# What names a thing in a lesson (a tool, a format, a level, a signal): in text mostly
# in Chinese, every Latin word ("用 orjson 来解析 JSON"); in English, a word in capitals
# or with a digit inside (SIGTERM, YAML, argon2). Two lessons that each name something
# the other does not are about other things however they are worded ("基础镜像用
# debian" / "Docker 基础镜像选 alpine", 0.976 with multilingual-e5-small); one that only
# adds a name adds a detail.
_NAME_SHAPE = re.compile(r"^(?:[A-Z0-9][A-Z0-9]+|\w*[a-zA-Z]\d\w*|\w*\d[a-zA-Z]\w*)$")
_LATIN_WORD = re.compile(r"[^\W_]+", re.ASCII)
# Words and characters that put steps in an order ("先 A 再 B", "A, then B"). Not
# before / after / 前 / 后: their clause moves with them in a rewording ("Check X before
# Y" / "Before Y, check X"), and swapping them is an opposite term already.
_SEQUENCE_WORDS = frozenset({"then", "first", "next", "finally", "afterwards", "later"})
_CJK_SEQUENCE = ("然后", "接着", "随后", "最后", "先", "再")
_STEP_MARK = re.compile("|".join([*_CJK_SEQUENCE, *(rf"\b{w}\b" for w in _SEQUENCE_WORDS)]))
# Words a rewording swaps for each other: one word of each group stands for all, so
# "Check X" / "Verify X" is not taken for a minimal pair.
_SYNONYMS = [
    ("check", "verify", "confirm", "validate", "ensure", "inspect"),
    ("delete", "remove", "erase"),
    ("use", "utilize", "employ"),
    ("run", "execute"),
    ("make", "create"),
    ("big", "large", "huge"),
    ("fast", "quick"),
    ("deleting", "removing"),
    ("using", "utilizing"),
]
_SYNONYM = {w: group[0] for group in _SYNONYMS for w in group}
# Words that open a clause a rewording adds or drops ("When calling X, ..." / "With X, ...").
_CLAUSE_WORDS = frozenset({"when", "while", "whenever", "during"})
# One CJK character, or one Latin word: a word stops at a CJK character ("apply发布" is
# two units), which ``[^\W_]+`` alone would swallow (CJK characters are word characters).
_UNIT = re.compile(f"[{CJK_RANGES}]|(?:(?![{CJK_RANGES}])[^\\W_])+", re.UNICODE)
_APOSTROPHES = re.compile("['\u2019]")


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
