"""The text of a LangChain message's content; no framework import, so the LLM wrapper
(langchain-core only) and the graph nodes (langgraph) share it."""

from __future__ import annotations

from typing import Any


def message_text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a content-block
    list (plain strings and ``{"type": "text", "text": ...}`` blocks), joined."""
    if isinstance(content, str):
        return content
    parts = [
        b if isinstance(b, str) else str(b.get("text", ""))
        for b in content or []
        if isinstance(b, str) or (isinstance(b, dict) and b.get("type") == "text")
    ]
    return "".join(parts)
