"""Our ``Embedder`` from a LlamaIndex ``BaseEmbedding``, e.g. ``Settings.embed_model``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from llama_index.core.base.embeddings.base import BaseEmbedding

from hindsight_core.embeddings import normalize, profile_for
from hindsight_core.errors import EmbeddingError


class LlamaIndexEmbedder:
    """Adapts a LlamaIndex ``BaseEmbedding`` to Hindsight's ``Embedder`` protocol.

    Example:
        >>> from llama_index.core import Settings
        >>> memory = Memory(("acme", "bot"), embedder=LlamaIndexEmbedder(Settings.embed_model))

    Args:
        embed_model: the LlamaIndex embedding model.
        dim: its dimension; default: found by embedding one short text on first use.
        model_name: recorded in the database (a different model later is an error,
            fixed with ``hindsight reindex``); default: the model's ``model_name``.
        languages: languages the model embeds well (ISO codes), ``None`` for any;
            default: known for known models (``profile_for``), else English only, so
            that dedup of other languages also requires shared wording.
    """

    def __init__(
        self,
        embed_model: BaseEmbedding,
        *,
        dim: int | None = None,
        model_name: str | None = None,
        languages: frozenset[str] | None | Literal["profile"] = "profile",
    ) -> None:
        if not isinstance(embed_model, BaseEmbedding):
            raise TypeError(
                f"expected a llama_index BaseEmbedding, got {type(embed_model).__name__}"
            )
        self.embed_model = embed_model
        self.model_name = model_name or f"llamaindex:{embed_model.model_name}"
        profile = profile_for(embed_model.model_name)
        self.languages = profile.languages if languages == "profile" else languages
        self.dedup_threshold = profile.dedup_threshold
        self._dim = dim

    @property
    def dim(self) -> int:
        """The vector dimension (probed once when not given)."""
        if self._dim is None:
            try:
                probe = self.embed_model.get_text_embedding("dimension probe")
            except Exception as exc:
                raise EmbeddingError(f"{self.model_name}: {exc}") from exc
            self._dim = len(probe)
        return self._dim

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed stored texts with ``get_text_embedding_batch``; vectors are L2-normalised."""
        if not texts:
            return []
        try:
            vectors = self.embed_model.get_text_embedding_batch(list(texts))
        except Exception as exc:  # any provider's error, named and chained
            raise EmbeddingError(f"{self.model_name}: {exc}") from exc
        return normalize(vectors, dim=self.dim, source=self.model_name)

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed search queries with ``get_query_embedding`` (the model's query
        instruction or prefix, where it has one)."""
        try:
            vectors = [self.embed_model.get_query_embedding(t) for t in texts]
        except Exception as exc:
            raise EmbeddingError(f"{self.model_name}: {exc}") from exc
        return normalize(vectors, dim=self.dim, source=self.model_name) if vectors else []

    embed = embed_documents  # the earlier one-method protocol

    async def aembed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed stored texts with ``aget_text_embedding_batch``."""
        if not texts:
            return []
        try:
            vectors = await self.embed_model.aget_text_embedding_batch(list(texts))
        except Exception as exc:
            raise EmbeddingError(f"{self.model_name}: {exc}") from exc
        return normalize(vectors, dim=self.dim, source=self.model_name)

    async def aembed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed search queries with ``aget_query_embedding``."""
        try:
            vectors = [await self.embed_model.aget_query_embedding(t) for t in texts]
        except Exception as exc:
            raise EmbeddingError(f"{self.model_name}: {exc}") from exc
        return normalize(vectors, dim=self.dim, source=self.model_name) if vectors else []

    aembed = aembed_documents
