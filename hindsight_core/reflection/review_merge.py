"""Review's merge of look-alikes: clusters of near-duplicate records in a scene, and one
more general lesson for each, asked of the model and screened before it is written.

Pairs of live records at cosine similarity >= ``settings.review_merge_similarity``
are grouped into clusters (:func:`clusters_flow`); the model is asked whether each
cluster says one thing and, if so, for one lesson (:func:`review_cluster`), written
with ``memory.merge`` (the sources are archived and linked). The lesson must pass
``screen.screen_merge`` (after one rewrite for length or language): see the review's
module docstring (``review.py``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from typing import Any

from ..errors import HindsightError, ValidationError
from ..models import Experience, Namespace, parse_experience
from ..runtime.flow import Flow, Sql
from ..runtime.host import RecordContext
from ..storage import experiences_sql as q
from ..storage import review_sql
from ._ask import ask_json, load_prompt
from ._driver import RFlow, Store
from .parse import ParseError, coerce_number, flagged_json
from .review_results import ReviewDecision, ReviewResult
from .screen import screen_merge

__all__ = ["clusters_flow", "connected_groups", "review_cluster"]

MERGE_PROMPT = "merge_v2"
MAX_CLUSTERS = 3
MAX_CLUSTER_SIZE = 8
MAX_SCAN = 500

MERGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "merge": {"type": "boolean"},
        "reason": {"type": "string"},
        "record": {
            "type": "object",
            "properties": {
                "trigger": {"type": "string"},
                "action": {"type": "string"},
                "outcome": {"type": "string"},
                "lesson": {"type": "string"},
                "confidence": {"type": "number"},
            },
        },
    },
    "required": ["merge"],
}


def connected_groups(pairs: Iterable[tuple[uuid.UUID, uuid.UUID]]) -> list[list[uuid.UUID]]:
    """The connected groups of ``pairs`` (an id paired with one of a group joins it),
    largest first, in the same order for the same ``pairs`` (sizes tied: the group
    met first). Pure: :func:`clusters_flow` keeps the first ``MAX_CLUSTERS``."""
    parent: dict[uuid.UUID, uuid.UUID] = {}

    def root(x: uuid.UUID) -> uuid.UUID:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        parent[root(a)] = root(b)
    groups: dict[uuid.UUID, list[uuid.UUID]] = {}
    for x in list(parent):
        groups.setdefault(root(x), []).append(x)
    return sorted(groups.values(), key=len, reverse=True)


def clusters_flow(
    memory: RecordContext, namespace: Namespace | str | None, scene: str, threshold: float
) -> Flow[list[list[dict[str, Any]]]]:
    """Clusters (connected pairs above ``threshold``) of live records in one scene."""
    ns = memory.namespace_key(namespace)
    yield from memory.ready_flow()
    pairs = yield from Sql(
        review_sql.near_pairs_sql(memory.embedder.dim),
        {"ns": ns, "scene": scene, "threshold": threshold, "max_records": MAX_SCAN},
    )
    out: list[list[dict[str, Any]]] = []
    for ids in connected_groups([(p["a"], p["b"]) for p in pairs])[:MAX_CLUSTERS]:
        rows = yield from Sql(
            q.GET, {"ns": ns, "ids": ids[:MAX_CLUSTER_SIZE], **memory.decay_params(memory.now())}
        )
        live = [r for r in rows if r["archived_at"] is None]
        if len(live) >= 2:
            out.append(sorted(live, key=lambda r: r["created_at"]))
    return out


def _parse_merge(text: str) -> dict[str, Any]:
    data = flagged_json(text, "merge", ("true", "yes", "1"))
    if data["merge"]:
        record = data.get("record")
        if not isinstance(record, dict) or not str(record.get("lesson") or "").strip():
            raise ParseError('"merge": true needs a "record" with a "lesson"')
        if record.get("confidence") is not None:
            record["confidence"] = coerce_number(record["confidence"], "record.confidence")
    return data


def _merge_messages(
    cluster: list[dict[str, Any]], scene: str, max_chars: int
) -> list[dict[str, str]]:
    system = load_prompt(MERGE_PROMPT, count=len(cluster), scene=scene, max_chars=max_chars)
    body = "\n".join(
        f"{i}. lesson: {r['lesson']}\n   trigger: {r['trigger']}"
        for i, r in enumerate(cluster, start=1)
    )
    return [{"role": "system", "content": system}, {"role": "user", "content": body}]


def review_cluster(
    memory: RecordContext,
    ns: str,
    model: str | None,
    namespace: Namespace | str | None,
    scene: str,
    cluster: list[dict[str, Any]],
    result: ReviewResult,
) -> RFlow[None]:
    """Merge ``cluster`` into one lesson if the model says it is one point, noting the
    decision (merge, keep or skip, and why) in ``result``."""
    ids = [r["id"] for r in cluster]
    if model is None:
        result.decisions.append(
            ReviewDecision(
                action="skip", ids=ids, reason="near-duplicates; no LLM configured to merge them"
            )
        )
        return
    settings = memory.settings
    messages = _merge_messages(cluster, scene, settings.lesson_max_chars)
    answer, error = yield from ask_json(
        memory, ns, model, messages, MERGE_SCHEMA, "review-merge", _parse_merge
    )
    if answer is not None and answer["merge"]:
        answer, error = yield from _screened(memory, ns, model, messages, cluster, answer)
    if answer is None:
        result.errors.append(f"merge of {len(ids)} records skipped: {error}")
        result.decisions.append(ReviewDecision(action="skip", ids=ids, reason=str(error)))
        return
    if not answer["merge"]:
        result.decisions.append(
            ReviewDecision(
                action="keep",
                ids=ids,
                reason=str(answer.get("reason") or "model: different points"),
            )
        )
        return
    rec = answer["record"]
    into = {
        "scene": scene,
        "trigger": str(rec.get("trigger") or cluster[0]["trigger"]),
        "action": str(rec.get("action") or ""),
        "outcome": str(rec.get("outcome") or ""),
        "lesson": str(rec["lesson"]).strip(),
        "confidence": rec.get("confidence", max(r["confidence"] for r in cluster)),
        "source": {"distiller": f"llm:{model}", "review": "merge"},
    }
    try:
        parse_experience(
            into,
            lesson_max_chars=settings.lesson_max_chars,
            field_max_chars=settings.field_max_chars,
        )
        merged: Experience = yield from Store(memory.merge_flow(ids, into, namespace))
    except (ValidationError, HindsightError) as exc:
        result.errors.append(f"merge of {len(ids)} records failed: {exc}")
        result.decisions.append(ReviewDecision(action="skip", ids=ids, reason=str(exc)))
        return
    result.merged.append(merged)
    result.decisions.append(
        ReviewDecision(
            action="merge",
            ids=ids,
            into=merged.id,
            lesson=merged.lesson,
            reason=str(answer.get("reason") or "model: same point"),
        )
    )


def _screened(
    memory: RecordContext,
    ns: str,
    model: str,
    messages: list[dict[str, str]],
    cluster: list[dict[str, Any]],
    answer: dict[str, Any],
) -> RFlow[tuple[dict[str, Any] | None, str | None]]:
    """The merge answer if its lesson passes :func:`screen_merge` (after one rewrite for
    length or language), else ``(None, why)``."""
    originals = [str(r["lesson"]) for r in cluster]
    triggers = [str(r["trigger"]) for r in cluster]
    settings = memory.settings
    lesson = str(answer["record"]["lesson"]).strip()
    reason, fix = screen_merge(lesson, originals, [messages[0]["content"]], settings, triggers)
    if reason is not None:
        return None, reason
    if fix is None:
        return answer, None
    again = [
        *messages,
        {"role": "assistant", "content": json.dumps(answer, ensure_ascii=False)},
        {
            "role": "user",
            "content": f"The merged lesson cannot be stored: {fix}. Answer "
            "again with the same JSON object, the lesson rewritten.",
        },
    ]
    retry, error = yield from ask_json(
        memory, ns, model, again, MERGE_SCHEMA, "review-merge-fix", _parse_merge, attempts=1
    )
    if retry is None or not retry["merge"]:
        return None, f"{fix} ({error or 'the model withdrew the merge when asked again'})"
    reason, fix = screen_merge(
        str(retry["record"]["lesson"]).strip(),
        originals,
        [messages[0]["content"]],
        settings,
        triggers,
    )
    if reason is not None or fix is not None:
        return None, f"after being asked again: {reason or fix}"
    return retry, None
