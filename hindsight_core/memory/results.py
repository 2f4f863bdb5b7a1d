"""Result types of the front ends beyond the records themselves: ``recall``'s (degrade,
don't block: how a failure becomes one) and ``feedback``'s."""

from __future__ import annotations

import logging
from datetime import datetime

from pydantic import BaseModel, Field

from ..models import SearchHit

log = logging.getLogger("hindsight")


class RecallResult(BaseModel):
    """Hits, or an empty list and a warning when recall could not be done."""

    hits: list[SearchHit] = Field(default_factory=list)
    warning: str | None = None

    @property
    def degraded(self) -> bool:
        """Whether recall failed or timed out (and so returned nothing)."""
        return self.warning is not None


def degraded(exc: BaseException) -> RecallResult:
    """The empty result for a failed recall, with a logged warning."""
    reason = str(exc) or type(exc).__name__
    if isinstance(exc, TimeoutError):
        reason = "recall timed out"
    log.warning("recall degraded to no lessons: %s", reason)
    return RecallResult(warning=f"memory unavailable, continuing without lessons: {reason}")


class Feedback(BaseModel):
    """One usage feedback on a record (``mark_used``), as recorded."""

    at: datetime = Field(description="When it was given (UTC).")
    helpful: bool
    by: str | None = Field(
        description="Who gave it: ``mark_used``'s ``by`` (an MCP token's name, say), else "
        "the namespace it was called with (``acme/agent-b`` for an agent reading a "
        "shared lesson); None for feedback recorded before it was kept."
    )
