"""Text handling shared by the write path and recall: tokens, scripts, overlap.

PostgreSQL's full-text search splits on spaces, so Chinese or Japanese text (no
spaces) would be one giant token. We tokenize in Python before the text reaches
the database: Latin words are lower-cased, and runs of CJK characters become
overlapping character bigrams (plus the single character for a run of one).
The result is stored with the ``simple`` configuration, which needs no extension.
"""

from __future__ import annotations

import re
import unicodedata

# CJK Unified Ideographs (+ Ext A), Hiragana, Katakana, Hangul syllables, CJK compat.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_CJK_RUN = re.compile(f"[{_CJK}]+")
_CJK_CHAR = re.compile(f"[{_CJK}]")
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
    letters = [ch for ch in text if ch.isalnum()]
    if not letters:
        return 0.0
    return sum(1 for ch in letters if _CJK_CHAR.match(ch)) / len(letters)


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


def tsquery_terms(query: str) -> list[str]:
    """Distinct tokens of a query, safe to OR together into a ``tsquery``.

    Only word characters survive tokenization, so no tsquery operator or quote
    can reach PostgreSQL from user input.
    """
    seen: dict[str, None] = {}
    for tok in tokens(query):
        seen.setdefault(tok, None)
    return list(seen)


def overlap(a: str, b: str) -> float:
    """Overlap coefficient of the two texts' token sets: |A ∩ B| / min(|A|, |B|).

    Used to guard dedup where the embedding model is weak (text in a language it
    does not cover): two lessons that share few words or bigrams are not merged,
    however close their vectors are.
    """
    ta, tb = set(tokens(a)), set(tokens(b))
    if not ta or not tb:
        return 0.0
    return len(ta & tb) / min(len(ta), len(tb))
