"""Use a LangChain ``Embeddings`` (or a plain function) as a Hindsight embedder."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Literal

from hindsight_core.embeddings import Embedder, ensure_embedder, profile_for
from hindsight_core.embeddings.base import is_embedder
from hindsight_core.errors import EmbeddingError


class LangChainEmbedder:
    """Adapts a LangChain ``Embeddings`` to :class:`hindsight_core.Embedder`.

    Stored texts go through ``embed_documents`` / ``aembed_documents`` and search
    queries through ``embed_query`` / ``aembed_query``, as LangGraph's ``PostgresStore``
    does (models with query instructions or prefixes need it), and vectors are passed
    on unchanged (not re-normalised), so inner-product and L2 scores match that store's.

    Args:
        embeddings: the LangChain embeddings object.
        dims: the dimension it returns (checked on every call).
        model_name: recorded with the index; default derived from the class and model.
        languages: languages it embeds well, ``None`` for any; default: known for
            known models (``profile_for``), else English only.
    """

    def __init__(
        self,
        embeddings: Any,
        *,
        dims: int,
        model_name: str | None = None,
        languages: frozenset[str] | None | Literal["profile"] = "profile",
    ) -> None:
        self.embeddings = embeddings
        self.dim = int(dims)
        model = getattr(embeddings, "model", None) or getattr(embeddings, "model_name", None)
        self.model_name = model_name or (
            f"langchain:{type(embeddings).__name__}" + (f":{model}" if model else "")
        )
        profile = profile_for(str(model or self.model_name))
        self.languages = profile.languages if languages == "profile" else languages
        self.dedup_threshold = profile.dedup_threshold

    def _check(self, vectors: Any, n: int) -> list[list[float]]:
        out = [list(map(float, v)) for v in vectors]
        if len(out) != n or any(len(v) != self.dim for v in out):
            raise EmbeddingError(
                f"{self.model_name} returned {len(out)} vectors of dimension "
                f"{sorted({len(v) for v in out})}; expected {n} of {self.dim} (index dims)"
            )
        return out

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self._check(self.embeddings.embed_documents(list(texts)), len(texts))

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self._check([self.embeddings.embed_query(t) for t in texts], len(texts))

    embed = embed_documents  # the earlier one-method protocol

    async def aembed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self._check(await self.embeddings.aembed_documents(list(texts)), len(texts))

    async def aembed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = await asyncio.gather(*(self.embeddings.aembed_query(t) for t in texts))
        return self._check(vectors, len(texts))

    aembed = aembed_documents


def as_embedder(embed: Any, dims: int) -> Embedder:
    """An :class:`Embedder` from what LangGraph's ``IndexConfig["embed"]`` accepts.

    ``embed`` may be our own embedder, a LangChain ``Embeddings``, a function
    ``texts -> vectors`` (sync or async), or a ``"provider:model"`` string.
    """
    if is_embedder(embed):  # ours: a LangChain Embeddings has no embed_queries
        ours: Embedder = embed
        return ours
    if hasattr(embed, "embed") and hasattr(embed, "model_name"):
        return ensure_embedder(embed)  # ours, of the earlier one-method protocol
    from langgraph.store.base.embed import ensure_embeddings

    return LangChainEmbedder(ensure_embeddings(embed), dims=dims)
