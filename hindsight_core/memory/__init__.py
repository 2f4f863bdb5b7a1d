"""Experience records: the public front ends ``Memory`` and ``AsyncMemory``.

Each operation is a flow (``write_flows``, ``read_flows``, ``curation``,
``lifecycle``, ``inspection``) run by the drivers of ``hindsight_core.runtime``;
that is how the two front ends share one implementation.
"""

from .aio import AsyncMemory
from .results import RecallResult
from .sync import Memory

__all__ = ["AsyncMemory", "Memory", "RecallResult"]
