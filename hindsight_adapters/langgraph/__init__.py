"""LangGraph adapters: ``HindsightStore`` (BaseStore), agent tools, and more.

Names are imported lazily so that ``import hindsight_adapters.langgraph`` stays light
and a missing ``langgraph`` extra fails only where it is used.
"""

from __future__ import annotations

import importlib
from typing import Any

from hindsight_core.errors import missing_extra

_LAZY = {
    # checkpointer
    "HindsightCheckpointer": ".checkpoint",
    # reflection after a run, recall before one, a LangChain chat model as the LLM
    "LangChainLLM": ".llm",
    "MEMORY_HEADER": ".recall",
    "areflect_thread": ".reflection",
    "arecall_lessons": ".recall",
    "athread_trajectory": ".reflection",
    "messages_trajectory": ".reflection",
    "recall_lessons": ".recall",
    "recall_node": ".recall",
    "reflect_thread": ".reflection",
    "reflection_node": ".reflection",
    "thread_trajectory": ".reflection",
    # store
    "HindsightStore": ".store",
    "HindsightSearchItem": "._store_ops",
    "LangChainEmbedder": ".embeddings",
    # agent tools
    "create_memory_tools": ".tools",
    "search_memory": ".tools",
    "write_memory": ".tools",
    "update_memory_usage": ".tools",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(module, __name__), name)
    except ImportError as exc:
        if "langgraph" in str(exc) or "langchain" in str(exc):
            raise missing_extra(f"LangGraph (needed by {name})", "langgraph") from None
        raise
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
