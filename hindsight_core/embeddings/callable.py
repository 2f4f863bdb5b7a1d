"""Wrap any function ``texts -> vectors`` (sync or async) as an embedder."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from typing import Any

from .base import normalize


class CallableEmbedder:
    """An embedder from a plain function.

    Args:
        func: ``func(list[str]) -> list[list[float]]``, sync or ``async def``.
        dim: the vector dimension it returns.
        model_name: the name recorded in the database (change it when the function
            changes, so old vectors are not compared with new ones).
        languages: languages the function embeds well; ``None`` for multilingual.
    """

    def __init__(
        self,
        func: Callable[[list[str]], Any],
        *,
        dim: int,
        model_name: str,
        languages: frozenset[str] | None = frozenset({"en"}),
    ) -> None:
        self._func = func
        self._is_async = inspect.iscoroutinefunction(func)
        self.dim = dim
        self.model_name = model_name
        self.languages = languages

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if self._is_async:
            raise TypeError(
                f"{self.model_name}: the embedding function is async; use AsyncMemory"
            )
        return normalize(self._func(list(texts)), dim=self.dim, source=self.model_name)

    async def aembed(self, texts: Sequence[str]) -> list[list[float]]:
        if self._is_async:
            result = await self._func(list(texts))
        else:
            result = await asyncio.get_running_loop().run_in_executor(None, self._func, list(texts))
        return normalize(result, dim=self.dim, source=self.model_name)
