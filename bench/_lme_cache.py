"""Embeddings of the LongMemEval haystack turns, computed once and kept under /tmp.

``python bench/_lme_cache.py`` fills the cache (user and assistant turns, ~29k
texts: about 25 minutes on 2 busy cores); the benchmark calls :func:`load` and
embeds only what is missing. Chunks are saved as they are done, so an interrupted
run resumes where it stopped.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import _common as c

DATA = Path("/work/shared/data/longmemeval_s_dev60.json.gz")
DIR = c.CACHE / "lme_vectors"
CHUNK = 1000


def questions(path: Path = DATA) -> list[dict[str, Any]]:
    """The questions, abstention ones (ids ending in ``_abs``) left out."""
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        data = json.load(fh)
    return [q for q in data if not q["question_id"].endswith("_abs")]


def key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def load() -> dict[str, np.ndarray]:
    """Every cached vector, by :func:`key` of its text."""
    out: dict[str, np.ndarray] = {}
    for f in sorted(DIR.glob("chunk_*.npz")):
        z = np.load(f)
        out.update(zip(z["keys"].tolist(), z["vecs"], strict=True))
    return out


def fill(texts: list[str]) -> dict[str, np.ndarray]:
    """Embed the texts not yet cached, saving a chunk at a time."""
    from hindsight_core.embeddings.sentence_transformers import SentenceTransformerEmbedder

    DIR.mkdir(parents=True, exist_ok=True)
    have = load()
    todo = list(dict.fromkeys(t for t in texts if key(t) not in have))
    if todo:
        emb = SentenceTransformerEmbedder()
        start = len(list(DIR.glob("chunk_*.npz")))
        for n, i in enumerate(range(0, len(todo), CHUNK)):
            part = todo[i : i + CHUNK]
            vecs = np.asarray(emb.embed(part), dtype=np.float32)
            keys = np.asarray([key(t) for t in part])
            np.savez(DIR / f"chunk_{start + n:05d}.npz", keys=keys, vecs=vecs)
            have.update(zip(keys.tolist(), vecs, strict=True))
            print(f"embedded {min(i + CHUNK, len(todo))}/{len(todo)}", flush=True)
    return have


def indexed(turn: dict[str, Any], roles: tuple[str, ...] = ("user", "assistant")) -> bool:
    """Whether a turn is stored: non-empty, and of one of ``roles``."""
    return turn["role"] in roles and bool(turn["content"].strip())


def turn_texts(
    qs: list[dict[str, Any]], roles: tuple[str, ...] = ("user", "assistant")
) -> list[str]:
    return [
        t["content"] for q in qs for s in q["haystack_sessions"] for t in s if indexed(t, roles)
    ]


if __name__ == "__main__":
    fill(turn_texts(questions()))
