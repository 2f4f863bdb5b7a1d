"""What the MCP tools take and return (pydantic, so every tool has an output schema).

Results are compact on purpose: an agent's context is precious, so a search hit
carries the lesson and trigger first, then the id to give feedback with, and
nothing else a model would have to read past.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_TEXT = 20_000
"""Hard cap on any one string argument; the core applies the configured, smaller limits."""
MAX_STEPS = 500


class MemoryHit(BaseModel):
    """One recalled lesson."""

    lesson: str = Field(description="The reusable advice; apply it if the trigger matches.")
    trigger: str = Field(description="When the lesson applies.")
    scene: str
    id: str = Field(description="Pass to update_memory_usage after using the lesson.")
    score: float = Field(description="Final ranking score (higher is better).")
    namespace: str = Field(
        description="Where the lesson is stored; one not your own is shared with you: "
        "give feedback on it, but do not supersede or forget it (read-only)."
    )


class SearchResult(BaseModel):
    """What ``search_memory`` found."""

    results: list[MemoryHit] = Field(default_factory=list)
    warning: str | None = Field(
        default=None,
        description="Set when memory was unavailable or slow: results are empty, carry on.",
    )


class WriteOutcome(BaseModel):
    """What ``write_memory`` did."""

    id: str
    status: Literal["inserted", "merged"] = Field(
        description="merged: a near-duplicate lesson existed and was reinforced instead."
    )
    similarity: float | None = Field(
        default=None, description="Cosine similarity to the record merged into."
    )


class SupersedeOutcome(BaseModel):
    """What ``supersede_memory`` did: the corrected lesson is a new version."""

    id: str = Field(description="The new version's id (recalled from now on).")
    supersedes: str = Field(description="The version it replaced (kept in the history).")


class VersionOut(BaseModel):
    """One version of a lesson, in ``memory_history``."""

    id: str
    version: int
    lesson: str
    trigger: str
    current: bool = Field(description="True for the version recalled now.")
    superseded_at: str | None = None
    superseded_reason: str | None = None
    superseded_actor: str | None = None


class HistoryOut(BaseModel):
    """Every version of a lesson, oldest first."""

    versions: list[VersionOut]


class UsageOutcome(BaseModel):
    """The record after ``update_memory_usage``."""

    id: str
    helpful: bool
    score: float
    use_count: int


class ForgetOutcome(BaseModel):
    """Confirms a deletion."""

    id: str
    forgotten: bool = True


class StepIn(BaseModel):
    """One step of a task run."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["thought", "tool_call", "tool_result", "error", "message"]
    content: str = Field(default="", max_length=MAX_TEXT)
    tool: str | None = Field(default=None, max_length=200)
    args: dict[str, Any] | None = None
    role: str | None = Field(default=None, max_length=50)


class TrajectoryIn(BaseModel):
    """A finished task run, to distill lessons from."""

    model_config = ConfigDict(extra="forbid")

    goal: str = Field(min_length=1, max_length=MAX_TEXT, description="What the task was.")
    steps: list[StepIn] = Field(default_factory=list, max_length=MAX_STEPS)
    outcome: Literal["success", "failure", "partial", "unknown"] = "unknown"
    final_state: str = Field(default="", max_length=MAX_TEXT)
    recalled: list[str] = Field(
        default_factory=list, max_length=200, description="Ids of lessons shown to the agent."
    )
    used: list[str] = Field(
        default_factory=list, max_length=200, description="Ids of lessons that helped."
    )
    scene: str | None = Field(default=None, max_length=100)


class ReflectOutcome(BaseModel):
    """What ``reflect_task`` distilled and stored."""

    written: list[WriteOutcome] = Field(default_factory=list)
    lessons: list[str] = Field(default_factory=list, description="The lessons written, in order.")
    dropped: int = Field(default=0, description="Candidate lessons not written (see reasons).")
    dropped_reasons: list[str] = Field(
        default_factory=list,
        description="Why each was dropped: low confidence, a copy of "
        "the prompt, generic, not grounded in the steps it cites, nothing new, too long...",
    )
    reinforced: list[str] = Field(
        default_factory=list,
        description="Ids of recalled lessons a candidate repeated: "
        "reinforced instead of written again.",
    )
    skipped: bool = Field(default=False, description="True when nothing could be distilled.")
    error: str | None = None
    distiller: str = Field(description="'llm:<model>' or 'rule-based' (no LLM configured).")
    note: str | None = None


class ReviewOutcome(BaseModel):
    """What ``review_task`` changed."""

    detail: dict[str, Any] = Field(default_factory=dict)
    llm: bool = Field(description="Whether an LLM was available (needed to merge lessons).")
    note: str | None = None


class StatsOut(BaseModel):
    """The ``memory://stats`` resource: counts for the caller's namespace."""

    namespace: list[str]
    reads: list[str] = Field(
        default_factory=list,
        description="What you may read besides your namespace (search_memory reads it too).",
    )
    records: int
    archived: int
    scenes: dict[str, int]
    embedding_model: str | None
    embedding_dim: int | None
