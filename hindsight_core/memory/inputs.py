"""Caller input: argument checks, record validation and the text embedded for a record.

Pure functions shared by the write, recall and curation flows; no I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from ..arguments import MAX_OFFSET, MAX_TOP_K, check_page
from ..embeddings.profiles import LESSON_AND_TRIGGER
from ..errors import ValidationError
from ..models import ExperienceIn, parse_experience
from ..settings import Settings
from ..storage import experiences_sql as q
from .scope import check_scope

MAX_QUERY_CHARS = 10_000
MAX_BATCH = 10_000
RecordInput = ExperienceIn | Mapping[str, Any]
DEFAULT_SCENE = ExperienceIn.model_fields["scene"].default


def embedding_text(
    record: ExperienceIn | Mapping[str, Any], fields: Sequence[str] = LESSON_AND_TRIGGER
) -> str:
    """What is embedded for a record: its ``fields`` one per line, in that order (the
    model profile's ``document_fields``: lesson and trigger by default). The lesson
    without closing punctuation, which moves a short sentence's vector a lot; empty
    fields and the default scene (``general``, which says nothing) are left out.

    The one place that says it: writes, edits, merges, imports and ``reindex`` (which
    reads stored rows, hence the mapping) all embed this text.
    """
    # A mapping lacking a field is a KeyError, not a silently shorter text.
    get = record.__getitem__ if isinstance(record, Mapping) else partial(getattr, record)
    parts = []
    for name in fields:
        value = get(name) or ""
        if name == "lesson":
            value = value.rstrip(" .。!！;；")
        elif name == "scene" and value == DEFAULT_SCENE:
            continue
        if value:
            parts.append(value)
    return "\n".join(parts)


def embed_key(model: str, dim: int, text: str) -> str:
    """A digest of what a stored vector was computed from (model, dimension, text):
    ``reindex`` skips a record whose stored key matches the key of today's text."""
    return hashlib.blake2b(f"{model}\x1f{dim}\x1f{text}".encode(), digest_size=16).hexdigest()


def validate_records(records: Sequence[RecordInput], settings: Settings) -> list[ExperienceIn]:
    """Parse a batch of records, naming the bad entry (``records[i]``) in errors.

    Raises:
        ValidationError: not a list, too many entries, or an entry is malformed.
    """
    if isinstance(records, Mapping | ExperienceIn) or not isinstance(records, Sequence):
        raise ValidationError("records must be a list of records", field="records")
    if len(records) > MAX_BATCH:
        raise ValidationError(
            f"records has {len(records)} entries; write at most {MAX_BATCH} per call",
            field="records",
        )
    parsed = []
    for i, record in enumerate(records):
        try:
            parsed.append(
                parse_experience(
                    record,
                    lesson_max_chars=settings.lesson_max_chars,
                    field_max_chars=settings.field_max_chars,
                )
            )
        except ValidationError as exc:
            if len(records) == 1:
                raise
            raise ValidationError(f"records[{i}]: {exc}", field=f"records[{i}]") from None
    return parsed


def check_query(query: object) -> str:
    if not isinstance(query, str):
        raise ValidationError(f"query must be a string, got {type(query).__name__}", field="query")
    if "\x00" in query:
        raise ValidationError("query contains a NUL byte", field="query")
    query = query.strip()
    if not query:
        raise ValidationError("query is empty", field="query")
    if len(query) > MAX_QUERY_CHARS:
        raise ValidationError(
            f"query is {len(query)} characters; at most {MAX_QUERY_CHARS}", field="query"
        )
    return query


def check_search(
    query: object,
    scene: object,
    top_k: object,
    filters: Mapping[str, Any] | None = None,
    *,
    namespace: object = None,
    namespaces: object = None,
) -> tuple[str, str | None, int, list[tuple[str, Any]]]:
    """A search's arguments, checked before any I/O: a bad one is its own error even
    while the database is unreachable or still starting (not a recall that timed out).
    ``namespace`` / ``namespaces``: which namespaces it reads (``scope.check_scope``).

    Returns:
        The query, scene, top_k and filter items as the search uses them.
    """
    checked = check_query(query), check_scene(scene), check_top_k(top_k), check_filters(filters)
    check_scope(namespace, namespaces)
    return checked


def check_text(value: object, field: str) -> str:
    """A text argument (not a record field): a string without NUL, which PostgreSQL
    cannot hold in text or jsonb and would report as a database error."""
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string, got {type(value).__name__}", field=field)
    if "\x00" in value:
        raise ValidationError(
            f"{field} contains a NUL byte, which cannot be stored or searched", field=field
        )
    return value


def check_scene(scene: object) -> str | None:
    """A scene filter: None, or a non-empty string (stripped, as stored scenes are)."""
    if scene is None:
        return None
    if not isinstance(scene, str) or not scene.strip():
        raise ValidationError("scene must be a non-empty string or None", field="scene")
    return check_text(scene, "scene").strip()


def check_top_k(top_k: object) -> int:
    try:
        value = int(str(top_k)) if not isinstance(top_k, bool) else None
    except ValueError:
        value = None
    if value is None or not 1 <= value <= MAX_TOP_K:
        raise ValidationError(
            f"top_k must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}", field="top_k"
        )
    return value


def check_filters(filters: Mapping[str, Any] | None) -> list[tuple[str, Any]]:
    if filters is None:
        return []
    if not isinstance(filters, Mapping):
        raise ValidationError("filters must be a mapping of field to value", field="filters")
    out = []
    for name in sorted(filters):
        if name not in q.FILTERABLE:
            raise ValidationError(
                f"filters.{name}: cannot filter on this field "
                f"(filterable: {', '.join(q.FILTERABLE)})",
                field=f"filters.{name}",
            )
        value = filters[name]
        kind = q.FILTERABLE[name][1]
        if kind == "bool" and not isinstance(value, bool):
            raise ValidationError(f"filters.{name} must be true or false", field=f"filters.{name}")
        if kind == "text" and (not isinstance(value, str) or "\x00" in value):
            raise ValidationError(f"filters.{name} must be a string", field=f"filters.{name}")
        out.append((name, value))
    return out


__all__ = [
    "MAX_BATCH",
    "MAX_OFFSET",
    "MAX_QUERY_CHARS",
    "MAX_TOP_K",
    "RecordInput",
    "check_filters",
    "check_page",
    "check_query",
    "check_scene",
    "check_text",
    "check_top_k",
    "embed_key",
    "embedding_text",
    "validate_records",
]
