"""What a review after a task decided (:class:`ReviewResult`), one decision at a time."""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import BaseModel, Field

from ..models import Experience

__all__ = ["ReviewDecision", "ReviewResult"]


class ReviewDecision(BaseModel):
    """One thing review decided, and why."""

    action: Literal["reinforce", "decay", "merge", "supersede", "keep", "skip", "missing"]
    ids: list[uuid.UUID]
    reason: str
    into: uuid.UUID | None = None
    lesson: str | None = None


class ReviewResult(BaseModel):
    """What :meth:`Reflector.review` did."""

    reinforced: list[uuid.UUID] = Field(default_factory=list)
    decayed: list[uuid.UUID] = Field(default_factory=list)
    merged: list[Experience] = Field(default_factory=list)
    superseded: dict[uuid.UUID, uuid.UUID] = Field(
        default_factory=dict, description="Misleading record -> its corrected new version."
    )
    decisions: list[ReviewDecision] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
