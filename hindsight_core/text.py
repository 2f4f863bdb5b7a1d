"""Text handling shared by the write path and recall: tokens, scripts, the merge veto.

PostgreSQL's full-text search splits on spaces, so Chinese or Japanese text (no
spaces) would be one giant token. We tokenize in Python before the text reaches
the database: Latin words are lower-cased, and runs of CJK characters become
overlapping character bigrams (plus the single character for a run of one).
The result is stored with the ``simple`` configuration, which needs no extension.
"""

from __future__ import annotations

import re
import unicodedata
from difflib import SequenceMatcher

# CJK Unified Ideographs (+ Ext A), Hiragana, Katakana, Hangul syllables, CJK compat.
CJK_RANGES = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK_RUN = re.compile(f"[{CJK_RANGES}]+")
_CJK_CHAR = re.compile(f"[{CJK_RANGES}]")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# Tiny stop list: only words so common that they would dominate keyword match.
_STOP = frozenset(
    "a an the of to in on at for and or is are was were be been it its this that with as by "
    "from do does did not no if then than so".split()
)


def has_cjk(text: str) -> bool:
    """Whether the text contains CJK characters (Chinese, Japanese, Korean)."""
    return _CJK_CHAR.search(text) is not None


def cjk_share(text: str) -> float:
    """Share of the letters in ``text`` that are CJK characters (0..1)."""
    if _CJK_CHAR.search(text) is None:  # most text: no per-character loop
        return 0.0
    letters = [ch for ch in text if ch.isalnum()]
    if not letters:
        return 0.0
    return sum(1 for ch in letters if _CJK_CHAR.match(ch)) / len(letters)


CJK_TEXT_SHARE = 0.3
"""Above this share of CJK letters a text counts as Chinese/Japanese/Korean: for the
language warning and the dedup guard's coverage (``memory/base.py``) and for the
rule-based distiller's language (``reflection``). Mixed text such as "用 pandas 读取
CSV 文件" is ~0.36; an English sentence naming one Chinese term stays below it."""


def is_cjk_text(text: str) -> bool:
    """Whether ``text`` is mostly in CJK script (more than :data:`CJK_TEXT_SHARE`)."""
    return cjk_share(text) > CJK_TEXT_SHARE


def tokens(text: str) -> list[str]:
    """Split text into search tokens: lower-cased words and CJK character bigrams."""
    text = unicodedata.normalize("NFKC", text).lower()
    out: list[str] = []
    pos = 0
    for run in _CJK_RUN.finditer(text):
        out.extend(_words(text[pos : run.start()]))
        chars = run.group()
        if len(chars) == 1:
            out.append(chars)
        else:
            out.extend(chars[i : i + 2] for i in range(len(chars) - 1))
        pos = run.end()
    out.extend(_words(text[pos:]))
    return out


def _words(segment: str) -> list[str]:
    return [w for w in _WORD.findall(segment) if w not in _STOP]


def search_document(*parts: str | None) -> str:
    """The pre-tokenized text stored for full-text search (space-joined tokens)."""
    return " ".join(t for part in parts if part for t in tokens(part))


# Words that make a query a question rather than say what it is about: interrogatives
# and the auxiliaries questions are built with ("What would Caroline ...", "When has
# ..."; do / does / did are in the stop list already). A record that contains "when"
# is no likelier to answer "When did X ...?", yet "when" has a high IDF among chat
# turns (~3, more than most content words) and so decided which turns the keyword side
# ranked first. Left out of queries only: records keep them (they are text like any
# other), so nothing stored changes. LoCoMo dev (bench_locomo.py), store hybrid R@5 /
# R@10 .570 / .662 -> .584 / .680, keyword-only .525 / .601 -> .542 / .614; LongMemEval
# hybrid none worse (bench/README.md).
QUESTION_WORDS = frozenset(
    "what when where who whom whose which why how would could should has have had".split()
)


def tsquery_terms(query: str) -> list[str]:
    """Distinct tokens of a query, safe to OR together into a ``tsquery``, without
    :data:`QUESTION_WORDS` (a query of only such words has no keyword terms: the
    semantic side alone ranks it).

    Only word characters survive tokenization, so no tsquery operator or quote
    can reach PostgreSQL from user input.
    """
    seen: dict[str, None] = {}
    for tok in tokens(query):
        if tok not in QUESTION_WORDS:
            seen.setdefault(tok, None)
    return list(seen)


# ---------------------------------------------------------------------------- dedup guard
# Embedding models place "increase the timeout" and "decrease the timeout" at cosine
# ~0.99, and an English-only model puts many different Chinese sentences above 0.9.
# These cheap lexical checks veto a merge that the cosine threshold alone would make.

_NEGATIONS = frozenset(
    ["not", "no", "never", "dont", "don't", "doesnt", "isnt", "without", "avoid"]
)
_CJK_NEGATIONS = ("不", "别", "勿", "禁止", "避免", "防止", "以免", "没有", "无需", "非")
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
]
_OPPOSITE_PAIRS = [(x, y, has_cjk(x)) for x, y in _OPPOSITES]
# CJK function characters that rewording adds or drops without changing the meaning.
CJK_FUNCTION_CHARS = frozenset(
    "的了地得着过在时用使之先再把被将就都也而且与和及或是要需请到对并会能可以一个这那"
)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def _polarity(text: str) -> bool:
    lowered = unicodedata.normalize("NFKC", text).lower()
    words = set(_WORD.findall(lowered.replace("'", "")))
    return bool(words & _NEGATIONS) or any(n in lowered for n in _CJK_NEGATIONS)


def _content_units(text: str) -> set[str]:
    """Content words (Latin, stop words removed) and content characters (CJK)."""
    text = unicodedata.normalize("NFKC", text).lower()
    units = {w for w in _WORD.findall(_CJK_RUN.sub(" ", text)) if w not in _STOP}
    units |= {ch for ch in text if _CJK_CHAR.match(ch) and ch not in CJK_FUNCTION_CHARS}
    return units


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
_UNIT = re.compile(f"[{CJK_RANGES}]|[^\\W_]+", re.UNICODE)  # one CJK character or one word


def _unit_sequence(text: str) -> list[str]:
    """Content units in order: Latin words (stop words out, a plural ``s`` dropped) and
    CJK content characters."""
    text = unicodedata.normalize("NFKC", text).lower()
    out: list[str] = []
    for m in _UNIT.finditer(text):
        unit = m.group()
        if _CJK_CHAR.match(unit):
            if unit not in CJK_FUNCTION_CHARS:
                out.append(unit)
        elif unit not in _STOP and unit not in _CLAUSE_WORDS:
            unit = (
                unit[:-1]
                if len(unit) > 3 and unit.endswith("s") and not unit.endswith("ss")
                else unit
            )
            out.append(_SYNONYM.get(unit, unit))
    return out


def _minimal_pair(a: str, b: str) -> str | None:
    """Why two lessons are one sentence with a part swapped or a detail added, or ``None``.

    A rewording restructures a sentence: words move, appear and drop out. A minimal
    pair keeps it and swaps a word ("每批 1000 条" / "每批 100 条", "客服团队" /
    "运维团队", numpy / pandas) or adds a detail ("给订单表加索引" / "给订单表的用户字段
    加索引"). Multilingual models put such pairs closer (0.97-0.998 with
    multilingual-e5-small) than real rewordings (0.94-0.99), so no cosine separates them.
    """
    ua, ub = _unit_sequence(a), _unit_sequence(b)
    ops = [
        op for op in SequenceMatcher(None, ua, ub, autojunk=False).get_opcodes() if op[0] != "equal"
    ]
    if not ops:
        return None
    if all(op[0] == "replace" for op in ops):
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
        minimal_pairs: whether to apply that last rule. Only a multilingual model needs
            it: an English-only model's cosine separates English minimal pairs
            (increase / decrease aside, which the opposite terms catch), and the rule
            would keep apart rewordings that drop a phrase ("When calling X, ..." /
            "With X, ...").
    """
    if _polarity(a) != _polarity(b):
        return "one is negated"
    if set(_NUMBER.findall(a)) != set(_NUMBER.findall(b)):
        return "different numbers"
    la, lb = unicodedata.normalize("NFKC", a).lower(), unicodedata.normalize("NFKC", b).lower()
    wa, wb = set(_WORD.findall(la)), set(_WORD.findall(lb))
    for x, y, cjk in _OPPOSITE_PAIRS:
        if cjk:
            only_a = {t for t in (x, y) if t in la and t not in lb}
            only_b = {t for t in (x, y) if t in lb and t not in la}
            if only_a and only_b and only_a != only_b:
                return f"opposite terms ({x} / {y})"
        elif (x in wa - wb and y in wb - wa) or (y in wa - wb and x in wb - wa):
            return f"opposite terms ({x} / {y})"
    if not covered and _content_units(a) != _content_units(b):
        return "different wording in a language the embedding model does not cover"
    return _minimal_pair(a, b) if minimal_pairs else None
