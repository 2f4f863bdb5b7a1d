"""Degrade, don't block: the result type of ``recall`` and how a failure becomes one."""

from __future__ import annotations

import logging

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
