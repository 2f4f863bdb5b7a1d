"""The data Hindsight accepts and returns, with validation in one place.

Input models are strict about names (unknown fields are rejected) and lenient
about representation: numbers given as strings ("0.8") are coerced, timestamps in
any ISO 8601 form are normalised to UTC. Every failure becomes a
:class:`~hindsight_core.errors.ValidationError` whose message names the field.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

import pydantic
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .errors import ValidationError

# Namespace helpers live in .namespaces; re-exported here, where callers import them.
from .namespaces import MAX_LABEL_CHARS as MAX_LABEL_CHARS
from .namespaces import MAX_NAMESPACE_DEPTH as MAX_NAMESPACE_DEPTH
from .namespaces import NS_SEPARATOR as NS_SEPARATOR
from .namespaces import Namespace as Namespace
from .namespaces import ns_from_key as ns_from_key
from .namespaces import ns_key as ns_key
from .namespaces import show_namespace as show_namespace
from .namespaces import validate_namespace as validate_namespace

# --------------------------------------------------------------------------- helpers


def to_utc(value: datetime) -> datetime:
    """Normalise a datetime to UTC; a naive datetime is taken to be UTC already."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


def raise_validation(exc: pydantic.ValidationError, *, prefix: str = "") -> ValidationError:
    """Turn pydantic's error into ours; the message lists every offending field."""
    parts = []
    first_field = None
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(record)"
        first_field = first_field or loc
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        parts.append(f"{prefix}{loc}: {msg}")
    return ValidationError("invalid input: " + "; ".join(parts), field=prefix + (first_field or ""))


def reject_nul(value: Any, path: str) -> None:
    """Raise ``ValueError`` naming the first string under ``value`` (keys included)
    that holds a NUL byte: PostgreSQL cannot store one in text or jsonb, and would
    report it as a database failure."""
    if isinstance(value, str):  # first: the Mapping check is an ABC's (slow)
        if "\x00" in value:
            raise ValueError(f"{path} contains a NUL byte, which cannot be stored")
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            reject_nul(str(k), path)
            reject_nul(v, f"{path}.{k}")
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            reject_nul(v, f"{path}[{i}]")


def _check_text(value: str, info: ValidationInfo) -> str:
    if "\x00" in value:
        raise ValueError("contains a NUL byte, which cannot be stored")
    return value


# --------------------------------------------------------------------------- input


class _Strict(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        str_strip_whitespace=True,
        allow_inf_nan=False,
        frozen=True,
    )


class Source(_Strict):
    """Where a record came from."""

    model_config = ConfigDict(extra="allow", str_strip_whitespace=True, frozen=True)

    agent: str | None = Field(default=None, max_length=200)
    task: str | None = Field(default=None, max_length=200)
    tool: str | None = Field(default=None, max_length=200)

    @model_validator(mode="after")
    def _no_nul(self) -> Source:
        """jsonb cannot store NUL (``\\u0000``): reject it here, not as a database error."""
        reject_nul(self.model_dump(), "source")
        return self


class ExperienceIn(_Strict):
    """An experience record to write.

    Only ``trigger`` and ``lesson`` are required. ``lesson`` is one actionable
    sentence; its length limit (50 characters by default, a CJK character counting
    as one) comes from the settings and is passed in the validation context.
    """

    scene: str = Field(default="general", min_length=1, max_length=100)
    trigger: str = Field(min_length=1)
    action: str = ""
    outcome: str = ""
    lesson: str = Field(min_length=1)
    confidence: float = Field(default=1.0, ge=0, le=1)
    importance: float | None = Field(default=None, ge=0, le=1)
    critical: bool = False
    source: Source = Field(default_factory=Source)
    created_at: datetime | None = None

    @field_validator("scene", "trigger", "action", "outcome", "lesson")
    @classmethod
    def _no_nul(cls, value: str, info: ValidationInfo) -> str:
        value = _check_text(value, info)
        limit_key = "lesson_max_chars" if info.field_name == "lesson" else "field_max_chars"
        limit = (info.context or {}).get(limit_key)
        if limit is not None and len(value) > limit:
            raise ValueError(
                f"is {len(value)} characters; at most {limit} allowed"
                + (" (one sentence, one point)" if info.field_name == "lesson" else "")
            )
        return value

    @field_validator("created_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return to_utc(value) if value is not None else None

    @field_validator("confidence", "importance")
    @classmethod
    def _real(cls, value: float | None) -> float | None:
        # Stored as real (float4): 6e-106 would fail in the database with "underflow".
        return round(value, 6) if value is not None else None


def parse_experience(
    data: ExperienceIn | Mapping[str, Any], *, lesson_max_chars: int, field_max_chars: int
) -> ExperienceIn:
    """Validate one record (a mapping or an :class:`ExperienceIn`) against the limits."""
    if isinstance(data, ExperienceIn):
        data = data.model_dump(exclude_none=True)
    if not isinstance(data, Mapping):
        raise ValidationError(
            f"a record must be a mapping or ExperienceIn, got {type(data).__name__}",
            field="record",
        )
    try:
        return ExperienceIn.model_validate(
            data,
            context={"lesson_max_chars": lesson_max_chars, "field_max_chars": field_max_chars},
        )
    except pydantic.ValidationError as exc:
        raise raise_validation(exc) from None


# --------------------------------------------------------------------------- output


class ScoreBreakdown(BaseModel):
    """Why a record came back: each part of its final score.

    ``relevance = semantic_weight * semantic + keyword_weight * keyword`` (the keyword
    weight scaled by ``1 - cosine_floor`` of the embedding model: 0.3 of it for e5
    models, see ``embeddings.profiles.keyword_weight``) and
    ``final = relevance * decay ** score_weight``. In item search the relevance is
    divided by that of an item whose field is the query's text, so that an exact match
    scores 1 for every query (``storage.items_search_sql.hybrid_search_sql``), and with
    a model whose profile has a hub correction (e5) ``semantic`` is the cosine less that
    correction (``embeddings.profiles.ModelProfile.hub_correction``).
    """

    semantic: float
    keyword: float
    relevance: float
    decay: float = Field(description="The record's decayed score (1.0 when new).")
    final: float
    scan: Literal["exact", "index"] | None = Field(
        default=None,
        description="How the semantic candidates were found: 'exact' (every row of the "
        "namespace compared) or 'index' (the approximate ANN index); see "
        "HINDSIGHT_SEMANTIC_SCAN.",
    )


class Experience(BaseModel):
    """A stored experience record, as read back."""

    id: uuid.UUID
    namespace: Namespace
    scene: str
    trigger: str
    action: str
    outcome: str
    lesson: str
    confidence: float
    importance: float | None
    critical: bool
    source: dict[str, Any]
    score: float = Field(description="Stored score, before decay since last use.")
    decayed_score: float = Field(description="Score after decay, as recall sees it now.")
    use_count: int
    occurrences: int
    last_used_at: datetime | None
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None
    merged_into: uuid.UUID | None = None
    merged_from: list[uuid.UUID] = Field(default_factory=list)
    version: int = Field(default=1, description="1 for a first version, then 2, 3, ...")
    lineage: uuid.UUID | None = Field(
        default=None, description="The chain's first version's id (None: never versioned)."
    )
    supersedes: uuid.UUID | None = Field(default=None, description="The version before.")
    superseded_by: uuid.UUID | None = Field(
        default=None, description="The version after; None for a current record."
    )
    superseded_at: datetime | None = None
    superseded_reason: str | None = None
    superseded_actor: str | None = Field(
        default=None, description="Who superseded it: a namespace or an MCP token's name."
    )
    scenes: list[str] = Field(
        default_factory=list,
        description=(
            "Every scene the record was written under: its own scene first, then those of "
            "the writes merged into it; a scene filter finds the record under each."
        ),
    )

    def compact(self) -> dict[str, Any]:
        """The few fields an agent needs: lesson and trigger first, then the id."""
        return {
            "lesson": self.lesson,
            "trigger": self.trigger,
            "scene": self.scene,
            "id": str(self.id),
        }


class SearchHit(BaseModel):
    """One recall result."""

    record: Experience
    namespace: Namespace = Field(
        description="The namespace the record lives in (``record.namespace``): with "
        "``search(namespaces=...)``, which of those read it came from."
    )
    score: float
    breakdown: ScoreBreakdown

    def compact(self) -> dict[str, Any]:
        """Lesson, trigger, scene, id and the final score, for an agent's context."""
        return {**self.record.compact(), "score": round(self.score, 4)}


class WriteResult(BaseModel):
    """What a write did: ``inserted`` a new record or ``merged`` into an existing one."""

    id: uuid.UUID
    status: Literal["inserted", "merged"]
    similarity: float | None = Field(
        default=None, description="Cosine similarity to the record merged into."
    )
    supersedes: uuid.UUID | None = Field(
        default=None,
        description="The version this one superseded (``supersede``): the head of the "
        "chain of the id asked for, which another writer may have superseded meanwhile.",
    )


class MaintenanceReport(BaseModel):
    """What :meth:`Memory.maintain` changed."""

    archived: int
    expired_items: int
    expired_tasks: int


class ReindexReport(BaseModel):
    """What :meth:`Memory.reindex` did: records re-embedded, and records skipped because
    their vector already came from the configured model and their current text."""

    reembedded: int
    skipped: int


class Stats(BaseModel):
    """Counts for ``hindsight stats``."""

    records: int
    archived: int
    namespaces: int
    items: int
    scenes: dict[str, int]
    embedding_model: str | None
    embedding_dim: int | None
    llm_calls: int = 0
    llm_prompt_tokens: int = 0
    llm_completion_tokens: int = 0
    reads: dict[str, float] = Field(
        default_factory=dict,
        description="With read replicas: how this memory's reads were served since it "
        "was created (replica, primary, waited, skipped_down, skipped_lag, failed, "
        "no_replica) "
        "and the largest replica lag seen (max_lag_seconds).",
    )


class Item(BaseModel):
    """A generic namespaced JSON document (LangGraph store items, LangMem memories)."""

    namespace: Namespace
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None = None


class ItemHit(BaseModel):
    """An item returned by :meth:`Memory.search_items`, with its score."""

    item: Item
    score: float | None
    breakdown: ScoreBreakdown | None = None


def now_utc() -> datetime:
    """The current time in UTC (the default clock)."""
    return datetime.now(UTC)
