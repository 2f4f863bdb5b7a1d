"""The embedder protocol and the small helpers every provider shares."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from ..errors import EmbeddingError


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of a fixed dimension.

    Attributes:
        model_name: recorded in the database; opening it with another model is an error.
        dim: the vector dimension.
        languages: ISO codes the model handles well, or ``None`` for "multilingual".
            Dedup is stricter for text in other languages (see ``text.overlap``).
    """

    @property
    def model_name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def languages(self) -> frozenset[str] | None: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Embed texts (documents or queries) into unit-length vectors."""
        ...

    async def aembed(self, texts: Sequence[str]) -> list[list[float]]:
        """Async variant of :meth:`embed`."""
        ...


class SyncEmbedderMixin:
    """``aembed`` for providers whose work is synchronous (CPU-bound models).

    The model runs in the default thread pool so that the event loop stays free.
    """

    def embed(self, texts: Sequence[str]) -> list[list[float]]:  # pragma: no cover - abstract
        raise NotImplementedError

    async def aembed(self, texts: Sequence[str]) -> list[list[float]]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self.embed, list(texts))


class Vectors(list[list[float]]):
    """Unit-length vectors as lists (what :meth:`Embedder.embed` returns) that keep
    their float32 matrix: statement parameters and the dedup check use the matrix
    instead of converting 384 Python floats per vector back (~7 us each)."""

    __slots__ = ("matrix",)

    def __init__(self, matrix: np.ndarray) -> None:
        super().__init__(matrix.tolist())
        self.matrix = matrix


def as_matrix(vectors: Sequence[Sequence[float]] | np.ndarray) -> np.ndarray:
    """A batch of vectors as a float32 ``(n, dim)`` array (no copy for :class:`Vectors`)."""
    if isinstance(vectors, Vectors):
        return vectors.matrix
    return np.asarray(vectors, dtype=np.float32)


def normalize(
    vectors: object, *, dim: int | None = None, source: str = "embedder"
) -> Vectors:
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
