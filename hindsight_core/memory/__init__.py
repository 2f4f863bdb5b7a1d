"""Experience records: the public front ends ``Memory`` and ``AsyncMemory``.

Each operation is a flow (``write_flows``, ``read_flows``, ``curation``,
``lifecycle``, ``inspection``) run by the drivers of ``hindsight_core.runtime``;
that is how the two front ends share one implementation.
"""

from typing import TYPE_CHECKING

from .aio import AsyncMemory
from .results import Feedback, RecallResult
from .sync import Memory

if TYPE_CHECKING:  # the front ends implement the internal API (mypy checks it here)
    from ..runtime.host import AsyncFlowHost, FlowHost, RecordContext

    _sync_host: type[FlowHost] = Memory
    _async_host: type[AsyncFlowHost] = AsyncMemory
    _records: tuple[type[RecordContext], ...] = (Memory, AsyncMemory)

__all__ = ["AsyncMemory", "Feedback", "Memory", "RecallResult"]
