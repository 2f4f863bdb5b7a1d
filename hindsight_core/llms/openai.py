"""Chat completions from any OpenAI-compatible endpoint, through httpx (no SDK).

Works with OpenAI, Ollama (``http://localhost:11434/v1``), vLLM and the llama.cpp
server. Structured output is requested as ``response_format = json_schema``; a
server that rejects that (HTTP 400) is asked again with ``json_object``, then with
no ``response_format`` at all, and the working mode is remembered. The answer is
parsed defensively by the caller either way.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, Literal

import httpx

from ..errors import LLMError
from .base import LLMResponse

ResponseFormat = Literal["json_schema", "json_object", "none"]
_FALLBACK: dict[str, ResponseFormat] = {"json_schema": "json_object", "json_object": "none"}


class OpenAICompatibleLLM:
    """A chat model behind ``POST {base_url}/chat/completions``.

    Args:
        base_url: e.g. ``https://api.openai.com/v1`` or ``http://localhost:11434/v1``.
        model: the model name the endpoint knows.
        api_key: sent as a bearer token when given.
        timeout: seconds per request.
        temperature: sampling temperature (0: as deterministic as the server allows).
        response_format: how to ask for JSON when a schema is given.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 60,
        *,
        temperature: float = 0.0,
        response_format: ResponseFormat = "json_schema",
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model_name = model
        self.temperature = temperature
        self.response_format: ResponseFormat = response_format
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client_args: dict[str, Any] = {"headers": headers, "timeout": timeout}

    def __repr__(self) -> str:
        return f"OpenAICompatibleLLM({self.base_url!r}, {self.model_name!r})"

    # ------------------------------------------------------------------ shared

    def _payload(
        self,
        messages: list[dict[str, str]],
        json_schema: dict[str, Any] | None,
        mode: ResponseFormat,
    ) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "model": self.model_name,
            "messages": messages,
            "temperature": self.temperature,
        }
        if json_schema is not None and mode == "json_schema":
            payload["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": json_schema, "strict": False},
            }
        elif json_schema is not None and mode == "json_object":
            payload["response_format"] = {"type": "json_object"}
        return payload

    def _retry_mode(
        self, response: httpx.Response, json_schema: dict[str, Any] | None, mode: ResponseFormat
    ) -> ResponseFormat | None:
        """The next response_format to try after a 400 about it, else ``None``."""
        if response.status_code not in (400, 422) or json_schema is None or mode not in _FALLBACK:
            return None
        if "response_format" not in response.text and "json" not in response.text.lower():
            return None  # a 400 about something else (context length, model name...)
        return _FALLBACK[mode]

    def _parse(self, response: httpx.Response) -> LLMResponse:
        if response.status_code >= 400:
            raise LLMError(
                f"chat endpoint {self.base_url} answered {response.status_code}: "
                f"{response.text[:300]}"
            )
        try:
            data = response.json()
            text = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise LLMError(
                f"unexpected answer from {self.base_url}/chat/completions: {response.text[:300]}"
            ) from exc
        if not isinstance(text, str):
            raise LLMError(f"{self.base_url}/chat/completions returned no text content")
        usage = data.get("usage") or {}
        return LLMResponse(
            text=text,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
            model=str(data.get("model") or self.model_name),
        )

    def _attempts(
        self, messages: list[dict[str, str]], json_schema: dict[str, Any] | None
    ) -> Generator[dict[str, Any], httpx.Response, LLMResponse]:
        """The request bodies to post, each sent the previous one's response: after a 400
        about ``response_format``, the next weaker mode (remembered). Returns the answer."""
        mode = self.response_format
        while True:
            resp = yield self._payload(messages, json_schema, mode)
            nxt = self._retry_mode(resp, json_schema, mode)
            if nxt is None:
                return self._parse(resp)
            mode = self.response_format = nxt

    def _unreachable(self, exc: httpx.HTTPError) -> LLMError:
        return LLMError(f"cannot reach chat endpoint {self.base_url}: {exc}")

    # ------------------------------------------------------------------ I/O

    def complete(
        self, messages: list[dict[str, str]], *, json_schema: dict[str, Any] | None = None
    ) -> LLMResponse:
        """Send the chat; raises :class:`LLMError` on any failure."""
        attempts = self._attempts(messages, json_schema)
        try:
            with httpx.Client(**self._client_args) as client:
                body = next(attempts)
                while True:
                    resp = client.post(f"{self.base_url}/chat/completions", json=body)
                    body = attempts.send(resp)
        except StopIteration as done:
            response: LLMResponse = done.value
            return response
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from exc

    async def acomplete(
        self, messages: list[dict[str, str]], *, json_schema: dict[str, Any] | None = None
    ) -> LLMResponse:
        """Async :meth:`complete`."""
        attempts = self._attempts(messages, json_schema)
        try:
            async with httpx.AsyncClient(**self._client_args) as client:
                body = next(attempts)
                while True:
                    resp = await client.post(f"{self.base_url}/chat/completions", json=body)
                    body = attempts.send(resp)
        except StopIteration as done:
            response: LLMResponse = done.value
            return response
        except httpx.HTTPError as exc:
            raise self._unreachable(exc) from exc
