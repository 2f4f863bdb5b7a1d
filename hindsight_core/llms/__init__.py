"""LLM providers for reflection, one file per provider; the protocol is in ``base.py``
(and re-exported by ``hindsight_core.reflection``)."""

from .base import LLM, LLMResponse
from .openai import OpenAICompatibleLLM

__all__ = ["LLM", "LLMResponse", "OpenAICompatibleLLM"]
