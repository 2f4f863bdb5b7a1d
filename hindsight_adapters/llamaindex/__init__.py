"""Hindsight for LlamaIndex: lessons in ``Memory`` blocks and chat-engine/agent memory.

- :class:`HindsightMemoryBlock` — a ``BaseMemoryBlock`` for ``llama_index.core.memory.Memory``;
- :class:`HindsightMemory` — a ``BaseMemory`` for ``SimpleChatEngine``, ``FunctionAgent``...;
- :class:`LlamaIndexEmbedder` / :class:`LlamaIndexLLM` — reuse ``Settings.embed_model`` /
  ``Settings.llm`` as Hindsight's embedder and reflection model.

Needs the ``llamaindex`` extra: ``pip install 'agent-hindsight[llamaindex]'``.
"""

from __future__ import annotations

try:
    import llama_index.core  # noqa: F401
except ImportError:  # pragma: no cover - depends on the environment
    from hindsight_core.errors import missing_extra

    raise missing_extra("llama-index-core", "llamaindex") from None

from ._bridge import CoreBridge, render_lessons
from ._messages import trajectory_from
from .block import HindsightMemoryBlock
from .embeddings import LlamaIndexEmbedder
from .llm import LlamaIndexLLM
from .memory import HindsightMemory

__all__ = [
    "CoreBridge",
    "HindsightMemory",
    "HindsightMemoryBlock",
    "LlamaIndexEmbedder",
    "LlamaIndexLLM",
    "render_lessons",
    "trajectory_from",
]
