"""Shared by the LangGraph store tests: a cheap deterministic embedding function."""

from __future__ import annotations

import math
import random
from urllib.parse import quote

DIMS = 48
_PROJ: dict[str, list[float]] = {}


def char_embed(texts: list[str]) -> list[list[float]]:
    """Character random projections (deterministic per character), length 2 (not unit)."""
    out = []
    for text in texts:
        vec = [0.0] * DIMS
        for ch in text:
            proj = _PROJ.get(ch)
            if proj is None:
                rng = random.Random(ord(ch))
                proj = _PROJ[ch] = [rng.gauss(0, 1) for _ in range(DIMS)]
            vec = [a + b for a, b in zip(vec, proj, strict=True)]
        norm = math.sqrt(sum(x * x for x in vec)) or 1.0
        out.append([x / norm * 2.0 for x in vec])  # not unit length: ip/l2 see raw values
    return out


def pg_url(url: str, options: str = "") -> str:
    """The fixture's SQLAlchemy URL as a plain libpq URL for psycopg / PostgresStore,
    with server ``options`` (``-c name=value ...``) if given."""
    plain = url.replace("postgresql+psycopg://", "postgresql://", 1)
    if not options:
        return plain
    return f"{plain}{'&' if '?' in plain else '?'}options={quote(options)}"
