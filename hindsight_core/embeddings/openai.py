"""Embeddings from any OpenAI-compatible ``/embeddings`` endpoint.

Works with OpenAI, Azure-style gateways, Ollama (``http://localhost:11434/v1``),
vLLM and Hugging Face TEI. Uses httpx directly: no SDK needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from ..errors import EmbeddingError
from .base import LazyDim, Profiled, normalize
from .profiles import ModelProfile, prefixed, profile_for


class OpenAIEmbedder(Profiled, LazyDim):
    """Embeds through an OpenAI-compatible HTTP API.

    Args:
        base_url: e.g. ``https://api.openai.com/v1``.
        model: the model name the endpoint knows.
        api_key: sent as a bearer token when given.
        dimensions: the vector size; when unknown, asked of the endpoint once.
        profile: languages, query/document prefixes and dedup threshold; default: the
            model's (``profiles.profile_for``; e5 served by TEI or vLLM gets its
            ``query: `` / ``passage: `` prefixes from it).
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str | None = None,
        dimensions: int | None = None,
        batch_size: int = 64,
        timeout: float = 30.0,
        profile: ModelProfile | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model_name = model
        self.batch_size = batch_size
        self._take_profile(profile or profile_for(model))
        self._dim = dimensions
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client_args: dict[str, Any] = {"headers": headers, "timeout": timeout}
        self._tls: Any = None  # ssl.SSLContext, made on first use (:meth:`_options`)

    def _options(self) -> dict[str, Any]:
        """A call's client options, with one TLS context for every call: a new client
        loads the CA bundle into a new context otherwise, which ``aembed`` did on the
        event loop, stalling every other request of an MCP server meanwhile."""
        if self._tls is None:
            self._tls = httpx.create_ssl_context()
        return {**self._client_args, "verify": self._tls}

    def _probe_dim(self) -> int:
        return len(self.embed_documents(["dimension probe"])[0])

    def _payload(self, batch: Sequence[str]) -> dict[str, Any]:
        return {"model": self.model_name, "input": list(batch)}

    def _parse(self, response: httpx.Response) -> list[list[float]]:
        if response.status_code >= 400:
            raise EmbeddingError(
                f"embedding endpoint {self.base_url} answered {response.status_code}: "
                f"{response.text[:300]}"
            )
        try:
            data = sorted(response.json()["data"], key=lambda d: d["index"])
            return [d["embedding"] for d in data]
        except (KeyError, TypeError, ValueError) as exc:
            raise EmbeddingError(f"unexpected answer from {self.base_url}/embeddings") from exc

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed(prefixed(texts, self.profile.document_prefix))

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return self._embed(prefixed(texts, self.profile.query_prefix))

    embed = embed_documents  # the earlier one-method protocol

    async def aembed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return await self._aembed(prefixed(texts, self.profile.document_prefix))

    async def aembed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        return await self._aembed(prefixed(texts, self.profile.query_prefix))

    aembed = aembed_documents

    def _embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        try:
            with httpx.Client(**self._options()) as client:
                for i in range(0, len(texts), self.batch_size):
                    batch = texts[i : i + self.batch_size]
                    resp = client.post(f"{self.base_url}/embeddings", json=self._payload(batch))
                    out.extend(self._parse(resp))
        except httpx.HTTPError as exc:
            raise EmbeddingError(f"cannot reach embedding endpoint {self.base_url}: {exc}") from exc
        return normalize(out, dim=self._dim, source=self.model_name) if out else []

    async def _aembed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        try:
            async with httpx.AsyncClient(**self._options()) as client:
                for i in range(0, len(texts), self.batch_size):
                    batch = texts[i : i + self.batch_size]
                    resp = await client.post(
                        f"{self.base_url}/embeddings", json=self._payload(batch)
                    )
                    out.extend(self._parse(resp))
        except httpx.HTTPError as exc:
            raise EmbeddingError(f"cannot reach embedding endpoint {self.base_url}: {exc}") from exc
        return normalize(out, dim=self._dim, source=self.model_name) if out else []
