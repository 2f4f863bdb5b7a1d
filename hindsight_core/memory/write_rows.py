"""A write plan's statement parameters: one dict per row of ``batch_sql.INSERT_ROWS`` /
``MERGE_ROWS`` / ``EVENT_ROWS`` (:func:`insert_params`, :func:`merge_params`).

:func:`record_row` is the one builder of an inserted row, for writes, merges and
imports alike; :func:`search_tsv` the one tokenization of a record for keyword search.
The plan itself is decided in ``write_plan.py``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from ..embeddings.profiles import LESSON_AND_TRIGGER
from ..models import ExperienceIn
from ..storage import fulltext_sql as fts
from ..text import search_document, tokens
from .write_plan import WritePlan


def record_row(
    rec: Any,
    *,
    ns: str,
    id: uuid.UUID,
    vector: Mapping[str, Any],
    fields: Sequence[str] = LESSON_AND_TRIGGER,
    **state: Any,
) -> dict[str, Any]:
    """One record's row of ``batch_sql.INSERT_ROWS`` (through ``batch_sql.insert_rows``).

    Args:
        rec: the record's content (``ExperienceIn`` or an imported record: ``scene``,
            ``trigger``, ``action``, ``outcome``, ``lesson``, ``confidence``,
            ``importance``, ``critical``, ``source``).
        ns: the namespace key.
        id: the record's id.
        vector: its ``embedding`` and ``embed_key`` (``MemoryBase._vector_fields``).
        fields: the fields the model embeds (``MemoryBase.document_fields``), also
            indexed for keyword search (:func:`search_tsv`).
        state: the lifecycle columns (``score``, ``use_count``, ``occurrences``,
            ``last_used_at``, ``created_at``, ``updated_at``, ``archived_at``,
            ``merged_into``, ``merged_from``, ``also_scenes``); a given ``critical``
            overrides the record's.
    """
    return {
        "ns": ns,
        "id": id,
        "scene": rec.scene,
        "trigger": rec.trigger,
        "action": rec.action,
        "outcome": rec.outcome,
        "lesson": rec.lesson,
        "confidence": rec.confidence,
        "importance": rec.importance,
        "critical": rec.critical,
        "source": json.dumps(rec.source.model_dump(exclude_none=True)),
        "score": 1.0,
        "use_count": 0,
        "occurrences": 1,
        "last_used_at": None,
        "archived_at": None,
        "merged_into": None,
        "merged_from": [],
        "also_scenes": [],
        **state,
        **vector,
        "search_tsv": search_tsv(rec, fields),
    }


def search_tsv(rec: Any, fields: Sequence[str] = LESSON_AND_TRIGGER) -> str:
    """The ``search_tsv`` parameter of a record, tokenized: lesson, trigger and scene,
    then the other ``fields`` the model embeds (``action``, ``outcome`` with a
    multilingual e5 model, whose profile embeds the whole record).

    The keyword side reads what the semantic side reads: a task description shares its
    words with a record's situation (what was done, what happened) as much as with its
    advice, which is why e5 embeds every field (``embeddings.profiles._e5``); indexed
    for keywords too, a word of the action is evidence on both sides instead of
    counting against the record on one (bench/HISTORY.md, "LoCoMo with the default model").
    With lesson and trigger embedded (MiniLM) the text is what it was.
    """
    extra = [getattr(rec, f) for f in fields if f not in ("lesson", "trigger", "scene")]
    return fts.tsvector_literal(tokens(search_document(rec.lesson, rec.trigger, rec.scene, *extra)))


def insert_params(
    plan: WritePlan,
    records: Sequence[ExperienceIn],
    *,
    ns: str,
    now: datetime,
    vectors: Callable[[int], Mapping[str, Any]],
    which: Sequence[int] | None = None,
    fields: Sequence[str] = LESSON_AND_TRIGGER,
) -> list[dict[str, Any]]:
    """``INSERT`` rows for the plan's new records (``which``: these of them, by batch
    index; all by default); ``vectors(i)``: record ``i``'s vector fields; ``fields``:
    the embedded fields (:func:`record_row`). A record that
    absorbed later batch records starts with their occurrences, used now."""
    rows = []
    for i in plan.inserts if which is None else which:
        rec, absorbed = records[i], plan.absorbed[i]
        rows.append(
            record_row(
                rec,
                ns=ns,
                id=plan.ids[i],
                vector=vectors(i),
                fields=fields,
                occurrences=1 + absorbed,
                last_used_at=now if absorbed else None,
                created_at=rec.created_at or now,
                updated_at=now,
                also_scenes=plan.scenes[i],
            )
        )
    return rows


def merge_params(
    plan: WritePlan, *, ns: str, now: datetime
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ``batch_sql.MERGE_ROWS`` and ``EVENT_ROWS`` rows of the plan's merges into
    stored records (two empty lists when there are none)."""
    updates = [
        {
            "ns": ns,
            "id": rid,
            "now": now,
            "added": m.added,
            "critical": m.critical,
            "importance": m.importance,
            "scenes": m.scenes,
        }
        for rid, m in plan.merges.items()
    ]
    events = [
        {
            "ns": ns,
            "record_id": rid,
            "kind": "merged",
            "now": now,
            "detail": json.dumps({"added": m.added}),
        }
        for rid, m in plan.merges.items()
    ]
    return updates, events
