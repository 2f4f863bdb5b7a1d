"""Text handling shared by the write path and recall: tokens, scripts (the dedup guard
is in ``dedup_veto.py``).

PostgreSQL's full-text search splits on spaces, so Chinese or Japanese text (no
spaces) would be one giant token. We tokenize in Python before the text reaches
the database: Latin words are lower-cased, and runs of CJK characters become
overlapping character bigrams (plus the single character for a run of one).
The result is stored with the ``simple`` configuration, which needs no extension.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

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
# hybrid none worse (bench/HISTORY.md).
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


_ENGLISH_WORD = re.compile(r"[a-z]{3,}")
_VOWELS = frozenset("aeiouy")


# Cached: recall asks for each query term's forms several times per call
# (``fulltext_sql``: the term query, its common share, the rare terms).
@lru_cache(maxsize=4096)
def word_forms(term: str) -> tuple[str, ...]:
    """The inflected forms a query term stands for: ``term`` first, then the other
    regular inflections of its English base (plural and third person ``-s`` /
    ``-es`` / ``-ies``, ``-ed`` / ``-ied``, ``-ing``, with a final ``e`` dropped or a
    final consonant doubled as English spells them): "painted" stands for "paint",
    "paints", "painting", ...; "kids" for "kid"; "activities" for "activity".

    Recall matches a query term by any of its forms (``fulltext_sql``): a question
    says "What did she paint?" of a record that says "painting", and the stored text
    is never stemmed (nothing stored changes, no re-index). Inflections only, not
    derivations ("painter", "happily"), whose meaning moves further. Forms that are no
    English word (an over-generated "runing") match nothing and cost nothing; a
    wrong base can add a real word ("news" -> "new"), which BM25 then counts with the
    group's own document frequency. Terms that are not lower-case ASCII words of three
    letters or more (CJK bigrams, numbers, identifiers) stand for themselves.
    """
    if not _ENGLISH_WORD.fullmatch(term):
        return (term,)
    forms: dict[str, None] = {term: None}
    bases = _bases(term)
    for base in bases[1:] or bases:  # an inflected term's own inflections are no words
        for form in _inflections(base):
            forms.setdefault(form, None)
    return tuple(forms)


def _bases(term: str) -> list[str]:
    """Candidate bases of an inflected English word (over-generated on purpose)."""
    out = [term]
    if len(term) < 4:
        return out
    for suffix in ("ing", "ed", "es", "s"):
        if term.endswith(suffix) and not term.endswith("ss") and len(term) - len(suffix) >= 3:
            base = term[: -len(suffix)]
            out.append(base)
            if suffix != "s":
                out.append(base + "e")  # making -> make, raced -> race, races -> race
            if len(base) >= 4 and base[-1] == base[-2] and base[-1] not in _VOWELS:
                out.append(base[:-1])  # running -> run, planned -> plan
    if term.endswith(("ies", "ied")) and len(term) >= 5:
        out.append(term[:-3] + "y")  # activities -> activity, tried -> try
    return out


def _inflections(base: str) -> list[str]:
    """The regular inflections of an English base (``base`` included)."""
    if len(base) < 3:
        return [base]
    out = [base]
    if base.endswith(("s", "x", "z", "ch", "sh")):
        out.append(base + "es")
    elif base[-1] == "y" and base[-2] not in _VOWELS:
        out += [base[:-1] + "ies", base[:-1] + "ied"]
    else:
        out.append(base + "s")
    if base.endswith("e"):
        out += [base + "d", base[:-1] + "ing"]
    else:
        out += [base + "ed", base + "ing"]
        # A final consonant after one short vowel doubles: plan -> planned, run -> running.
        short = base[-2] in _VOWELS and base[-3] not in _VOWELS
        if short and base[-1] not in _VOWELS and base[-1] not in "swx":
            out += [base + base[-1] + "ed", base + base[-1] + "ing"]
    return out


# CJK function characters that rewording adds or drops without changing the meaning.
CJK_FUNCTION_CHARS = frozenset(
    "的了地得着过在时用使之先再把被将就都也而且与和及或是要需请到对并会能可以一个这那"
)
