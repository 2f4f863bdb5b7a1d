"""The public front ends; see ``flow.py`` for how they share one implementation."""

from .aio import AsyncMemory
from .recall import RecallResult
from .sync import Memory

__all__ = ["AsyncMemory", "Memory", "RecallResult"]
