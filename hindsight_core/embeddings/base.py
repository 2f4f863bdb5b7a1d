"""The embedder protocol and the small helpers every provider shares."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from ..errors import ConfigurationError, EmbeddingError

if TYPE_CHECKING:
    from .profiles import ModelProfile


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of a fixed dimension, queries and documents apart.

    Retrieval models such as e5 are trained with a different prefix for each side
    (``query: `` / ``passage: ``), so searches embed with :meth:`embed_queries` and
    everything stored (records, item fields; dedup compares stored documents with new
    ones) with :meth:`embed_documents`. A symmetric model does the same in both.
    An object with only ``embed`` / ``aembed`` (the earlier protocol) still works:
    :func:`ensure_embedder` wraps it, embedding both sides alike.

    Attributes:
        model_name: recorded in the database; opening it with another model is an error.
        dim: the vector dimension.
        languages: ISO codes the model handles well, or ``None`` for "multilingual".
            Dedup is stricter for text in other languages (see ``dedup_veto.merge_veto``).
    """

    @property
    def model_name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def languages(self) -> frozenset[str] | None: ...

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed texts to be stored and searched (records, item fields)."""
        ...

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed search queries."""
        ...

    async def aembed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        """Async variant of :meth:`embed_documents`."""
        ...

    async def aembed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Async variant of :meth:`embed_queries`."""
        ...


class Profiled:
    """A provider's model profile and what it says, as attributes: ``languages``, and
    the dedup calibration (``dedup_threshold``, ``cosine_floor``) the memory reads."""

    def _take_profile(self, profile: ModelProfile) -> None:
        self.profile = profile
        self.languages = profile.languages
        self.dedup_threshold = profile.dedup_threshold
        self.cosine_floor = profile.cosine_floor


class LazyDim:
    """A dimension known up front (``_dim``: the profile's, or the caller's), taken from
    the database (:meth:`adopt_dim`: opening it then loads no model and calls no
    endpoint), or else found on first need (:meth:`_probe_dim`)."""

    _dim: int | None = None

    def adopt_dim(self, dim: int) -> None:
        """Take the dimension recorded in the database, if not known yet (no probe)."""
        if self._dim is None:
            self._dim = dim

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = self._probe_dim()
        return self._dim

    def _probe_dim(self) -> int:
        raise NotImplementedError  # pragma: no cover - per provider


class NoEmbedder:
    """Stands in where nothing may be embedded (checkpoints, replica probes, items with
    no index): every call raises :class:`~hindsight_core.errors.ConfigurationError`
    saying ``why``."""

    model_name = "none"
    dim = 0
    languages: frozenset[str] | None = None

    def __init__(self, why: str) -> None:
        self.why = why

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        raise ConfigurationError(self.why)

    embed_queries = embed_documents

    async def aembed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed_documents(texts)

    aembed_queries = aembed_documents


class SyncEmbedderMixin:
    """The four methods for providers whose work is synchronous (CPU-bound models):
    they implement ``_embed(texts, query)``. ``embed`` stays as the documents' side
    for code written against the earlier one-method protocol.

    Async calls run the model in the default thread pool so that the event loop stays free.
    """

    def _embed(self, texts: Sequence[str], query: bool) -> list[list[float]]:
        raise NotImplementedError  # pragma: no cover - abstract

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed(texts, False)

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed(texts, True)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed(texts, False)

    async def aembed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return await asyncio.get_running_loop().run_in_executor(
            None, self._embed, list(texts), False
        )

    async def aembed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return await asyncio.get_running_loop().run_in_executor(
            None, self._embed, list(texts), True
        )

    async def aembed(self, texts: Sequence[str]) -> list[list[float]]:
        return await self.aembed_documents(texts)


class SymmetricEmbedder:
    """An embedder of the earlier protocol (``embed`` / ``aembed`` only) as an
    :class:`Embedder`: queries and documents are embedded alike, as before."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    @property
    def model_name(self) -> str:
        return str(self.inner.model_name)

    @property
    def dim(self) -> int:
        return int(self.inner.dim)

    @property
    def languages(self) -> frozenset[str] | None:
        return getattr(self.inner, "languages", frozenset({"en"}))

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = self.inner.embed(texts)
        return vectors

    embed_queries = embed = embed_documents

    async def aembed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if hasattr(self.inner, "aembed"):
            vectors: list[list[float]] = await self.inner.aembed(texts)
            return vectors
        return await asyncio.get_running_loop().run_in_executor(None, self.inner.embed, list(texts))

    aembed_queries = aembed = aembed_documents


_MEMBERS = (
    "model_name",
    "dim",
    "languages",
    "embed_documents",
    "embed_queries",
    "aembed_documents",
    "aembed_queries",
)


def _has(obj: Any, name: str) -> bool:
    """``hasattr`` that does not run properties (``inspect.getattr_static``)."""
    import inspect

    try:
        inspect.getattr_static(obj, name)
    except AttributeError:
        return False
    return True


def is_embedder(obj: Any) -> bool:
    """Whether ``obj`` has every member of :class:`Embedder`, found without running
    its properties (a LangChain ``Embeddings`` has no ``embed_queries``)."""
    return all(_has(obj, a) for a in _MEMBERS)


def ensure_embedder(embedder: Any) -> Embedder:
    """``embedder`` as an :class:`Embedder`: returned as is when it has the query and
    document methods, wrapped in :class:`SymmetricEmbedder` when it has only ``embed``.

    Raises:
        TypeError: it has neither (the message names what is missing).
    """
    # Not isinstance(embedder, Embedder): on Python 3.11 it reads every member with
    # hasattr, so a lazy ``dim`` probed the endpoint or loaded the model right here.
    if is_embedder(embedder):
        found: Embedder = embedder  # every member there, read statically
        return found
    if all(_has(embedder, a) for a in ("embed", "model_name", "dim")):
        return SymmetricEmbedder(embedder)
    raise TypeError(
        f"{type(embedder).__name__} is not an embedder: it needs model_name, dim and "
        "embed_documents / embed_queries (or one embed method for both)"
    )


class Vectors(list[list[float]]):
    """Unit-length vectors as lists (what :meth:`Embedder.embed` returns) that keep
    their float32 matrix: statement parameters and the dedup check use the matrix
    instead of converting 384 Python floats per vector back on every use."""

    __slots__ = ("matrix",)

    def __init__(self, matrix: np.ndarray) -> None:
        super().__init__(matrix.tolist())
        self.matrix = matrix


def as_matrix(vectors: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
    """A batch of vectors as a float32 ``(n, dim)`` array (no copy for :class:`Vectors`)."""
    if isinstance(vectors, Vectors):
        return vectors.matrix
    return np.asarray(vectors, dtype=np.float32)


def normalize(vectors: object, *, dim: int | None = None, source: str = "embedder") -> Vectors:
    """Check and L2-normalise a batch of vectors.

    Raises:
        EmbeddingError: wrong shape, wrong dimension, or non-finite values.
    """
    try:
        arr = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise EmbeddingError(f"{source} returned something that is not a list of vectors") from exc
    if arr.ndim != 2:
        raise EmbeddingError(f"{source} returned an array of shape {arr.shape}; expected (n, dim)")
    if dim is not None and arr.shape[1] != dim:
        raise EmbeddingError(f"{source} returned vectors of dimension {arr.shape[1]}, not {dim}")
    # Squares summed in float64 cannot overflow for float32 input, so a non-finite sum
    # means a NaN or infinite value (one pass instead of isfinite over every value).
    squares = np.einsum("ij,ij->i", arr, arr, dtype=np.float64)
    if not np.isfinite(squares).all():
        raise EmbeddingError(f"{source} returned NaN or infinite values")
    norms = np.sqrt(squares)
    norms[norms == 0] = 1.0
    return Vectors((arr / norms[:, None]).astype(np.float32, copy=False))
