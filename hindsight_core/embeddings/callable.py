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
        query_func: embeds search queries, when they need other treatment than stored
            texts (e5's ``query: `` prefix); default: ``func`` for both.
    """

    def __init__(
        self,
        func: Callable[[list[str]], Any],
        *,
        dim: int,
        model_name: str,
        languages: frozenset[str] | None = frozenset({"en"}),
        query_func: Callable[[list[str]], Any] | None = None,
    ) -> None:
        self._func = func
        self._query_func = query_func or func
        self.dim = dim
        self.model_name = model_name
        self.languages = languages

    def _call(self, func: Callable[[list[str]], Any], texts: Sequence[str]) -> list[list[float]]:
        if inspect.iscoroutinefunction(func):
            raise TypeError(f"{self.model_name}: the embedding function is async; use AsyncMemory")
        return normalize(func(list(texts)), dim=self.dim, source=self.model_name)

    async def _acall(
        self, func: Callable[[list[str]], Any], texts: Sequence[str]
    ) -> list[list[float]]:
        if inspect.iscoroutinefunction(func):
            result = await func(list(texts))
        else:
            result = await asyncio.get_running_loop().run_in_executor(None, func, list(texts))
        return normalize(result, dim=self.dim, source=self.model_name)

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self._call(self._func, texts)

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self._call(self._query_func, texts)

    embed = embed_documents  # the earlier one-method protocol

    async def aembed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return await self._acall(self._func, texts)

    async def aembed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return await self._acall(self._query_func, texts)

    aembed = aembed_documents
