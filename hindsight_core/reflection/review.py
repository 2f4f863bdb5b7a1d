"""Review after a task: reinforce what helped, decay what did not, correct what misled,
merge look-alikes.

- every record in ``trajectory.used`` gets ``mark_used(helpful=True)`` (score +0.1,
  decay clock reset); every other record in ``trajectory.recalled`` gets
  ``mark_used(helpful=False)`` (score -0.1);
- a used record that misled (the run failed although it was followed, or a user's
  correction in the run speaks about what it says) is marked unhelpful and, when the
  run shows what it should say instead, superseded by the corrected lesson
  (``memory.supersede``, docs/versions.md): with a model, the model phrases it from
  the run's failure, fix or correction and the answer is kept only if its new words
  come from that evidence; without one (or when the model's answer is refused), the
  rule-based distiller's lesson from a failed-then-fixed call, or a short correction
  of the user's, is the new version;
- in the trajectory's scene (or the scenes of the recalled records), pairs of live
  records at cosine similarity >= ``settings.review_merge_similarity`` are grouped
  into clusters; the model is asked whether each cluster says one thing and, if so,
  for one more general lesson, written with ``memory.merge`` (the sources are
  archived, not deleted, and stay linked through ``merged_into``/``merged_from``).
  The merged lesson is screened (``screen.screen_merge``): it must keep what every
  original says and add no claim, and must not copy the prompt; one that is too
  long or in the wrong language is sent back once with the reason, then the merge
  is skipped. Without a model, clusters are reported but not merged.

Every decision is in the returned :class:`ReviewResult` and in the log.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..errors import HindsightError, NotFoundError, ValidationError
from ..models import Experience, Namespace, parse_experience
from ..runtime.flow import Flow, Sql
from ..runtime.host import RecordContext
from ..storage import experiences_sql as q
from ..storage import review_sql
from ._ask import ask_json, load_prompt
from ._driver import RFlow, Store
from .evidence import Run, analyse, near_equal, units
from .parse import ParseError, coerce_number, extract_json
from .rules import RuleBasedDistiller
from .screen import screen_merge
from .trajectory import Trajectory

log = logging.getLogger("hindsight.reflection")

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
    parent: dict[uuid.UUID, uuid.UUID] = {}

    def root(x: uuid.UUID) -> uuid.UUID:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for p in pairs:
        parent[root(p["a"])] = root(p["b"])
    groups: dict[uuid.UUID, list[uuid.UUID]] = {}
    for x in list(parent):
        groups.setdefault(root(x), []).append(x)
    out: list[list[dict[str, Any]]] = []
    for ids in sorted(groups.values(), key=len, reverse=True)[:MAX_CLUSTERS]:
        rows = yield from Sql(
            q.GET, {"ns": ns, "ids": ids[:MAX_CLUSTER_SIZE], **memory.decay_params(memory.now())}
        )
        live = [r for r in rows if r["archived_at"] is None]
        if len(live) >= 2:
            out.append(sorted(live, key=lambda r: r["created_at"]))
    return out


def _parse_merge(text: str) -> dict[str, Any]:
    data = extract_json(text)
    if not isinstance(data, dict) or "merge" not in data:
        raise ParseError('expected {"merge": true|false, ...}')
    merge = data["merge"]
    if isinstance(merge, str):
        merge = merge.strip().lower() in ("true", "yes", "1")
    data["merge"] = bool(merge)
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


def review_flow(
    memory: RecordContext,
    model: str | None,
    trajectory: Trajectory,
    namespace: Namespace | str | None,
) -> RFlow[ReviewResult]:
    """The review (see the module docstring); ``model`` is ``None`` without an LLM."""
    ns = memory.namespace_key(namespace)
    result = ReviewResult()
    used = set(trajectory.used)
    scenes: list[str] = [trajectory.scene] if trajectory.scene else []
    run = analyse(trajectory)
    stored = yield from Store(_rows_flow(memory, ns, list(used)))
    misled = {rid: why for rid in used if (why := _misled(stored.get(rid), trajectory, run))}
    for rid in dict.fromkeys([*trajectory.recalled, *trajectory.used]):
        helpful = rid in used and rid not in misled
        try:
            rec: Experience = yield from Store(
                memory.mark_used_flow(rid, helpful, namespace, by="review")
            )
        except NotFoundError:
            result.decisions.append(
                ReviewDecision(
                    action="missing", ids=[rid], reason="no such record in this namespace"
                )
            )
            continue
        (result.reinforced if helpful else result.decayed).append(rid)
        result.decisions.append(
            ReviewDecision(
                action="reinforce" if helpful else "decay",
                ids=[rid],
                lesson=rec.lesson,
                reason="recalled and used" if helpful else misled.get(rid, "recalled but not used"),
            )
        )
        if rec.scene not in scenes:
            scenes.append(rec.scene)
    for rid, why in misled.items():
        yield from _supersede(
            memory, ns, model, namespace, stored[rid], trajectory, run, why, result
        )
    threshold = memory.settings.review_merge_similarity
    for scene in scenes:
        try:
            clusters = yield from Store(clusters_flow(memory, namespace, scene, threshold))
        except HindsightError as exc:
            result.errors.append(f"finding near-duplicates in scene {scene!r}: {exc}")
            continue
        for cluster in clusters:
            yield from _review_cluster(memory, ns, model, namespace, scene, cluster, result)
    for d in result.decisions:
        log.info(
            "review: %s %s (%s)%s",
            d.action,
            ", ".join(map(str, d.ids)),
            d.reason,
            f" -> {d.into}: {d.lesson}" if d.into else "",
        )
    return result


def _review_cluster(
    memory: RecordContext,
    ns: str,
    model: str | None,
    namespace: Namespace | str | None,
    scene: str,
    cluster: list[dict[str, Any]],
    result: ReviewResult,
) -> RFlow[None]:
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


# ------------------------------------------------------------------ supersede

SUPERSEDE_PROMPT = """\
An agent followed a lesson from its memory, and the run shows the lesson was wrong or
incomplete: {why}. Correct the lesson from the evidence below only: one actionable
sentence of at most {max_chars} characters, in the language of the lesson, saying what
to do instead (take the fix or the user's words from the evidence; add nothing else).
If the evidence does not show what to do instead, do not correct it.
Answer with JSON only: {{"supersede": true, "lesson": "...", "reason": "..."}} or
{{"supersede": false, "reason": "..."}}."""

SUPERSEDE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "supersede": {"type": "boolean"},
        "lesson": {"type": "string"},
        "reason": {"type": "string"},
    },
    "required": ["supersede"],
}
_LEAD = re.compile(r"^\W*(no|nope|wrong|not like that|that's wrong|不对|不是|错了)\b\W*", re.I)


def _rows_flow(memory: RecordContext, ns: str, ids: list[uuid.UUID]) -> Flow[dict[Any, Any]]:
    """The stored rows of ``ids`` (current state), by id."""
    yield from memory.ready_flow()
    rows = yield from Sql(q.GET, {"ns": ns, "ids": ids, **memory.decay_params(memory.now())})
    return {r["id"]: r for r in rows}


def _complaints(row: dict[str, Any], run: Run) -> list[int]:
    """The user's corrections in the run that speak about what the lesson says."""
    said = units(f"{row['lesson']} {row['trigger']}")
    return [n for n in run.complaints if said & units(run.texts[n])]


def _misled(row: dict[str, Any] | None, trajectory: Trajectory, run: Run) -> str | None:
    """Why a used record misled the run (None: it did not, or it is gone or old)."""
    if row is None or row["superseded_by"] is not None or row["archived_at"] is not None:
        return None
    if _complaints(row, run):
        return "followed, and the user corrected it"
    if trajectory.outcome == "failure":
        return "followed, and the run failed"
    return None


def _evidence(row: dict[str, Any], run: Run) -> str:
    """The run's steps that show what went wrong and what was done or said instead."""
    steps = sorted({m for n in [*run.signals, *_complaints(row, run)] for m in run.context[n]})
    return "\n".join(f"{n}. {run.texts[n][:400]}" for n in steps)[:3000]


def _rule_correction(
    row: dict[str, Any], trajectory: Trajectory, run: Run, max_chars: int
) -> str | None:
    """The corrected lesson without a model: the rule distiller's lesson from a failed,
    then fixed call, else the user's correction when it is one short sentence."""
    said = units(f"{row['lesson']} {row['trigger']}")
    for fix in RuleBasedDistiller(max_chars=max_chars).distill(trajectory):
        if said & units(f"{fix['trigger']} {fix['action']} {fix['lesson']}"):  # about it
            return str(fix["lesson"])
    for n in _complaints(row, run):
        text = _LEAD.sub("", trajectory.steps[n - 1].content.strip()).strip()
        text = re.split(r"(?<=[.!?。！？])\s", text)[0].strip()
        if 8 <= len(text) <= max_chars:
            return text[0].upper() + text[1:]
    return None


def _grounded(lesson: str, row: dict[str, Any], evidence: str) -> str | None:
    """Why a model's correction is refused: the old lesson again, or new words that are
    not in the run's evidence (a small model inventing the fix)."""
    if near_equal(lesson, row["lesson"]):
        return "the correction repeats the lesson"
    new = units(lesson) - units(row["lesson"])
    if not new or not new & units(evidence):
        return "the correction is not grounded in the run's failure, fix or correction"
    return None


def _parse_supersede(text: str) -> dict[str, Any]:
    data = extract_json(text)
    if not isinstance(data, dict) or "supersede" not in data:
        raise ParseError('expected {"supersede": true|false, ...}')
    flag = data["supersede"]
    data["supersede"] = (
        flag.strip().lower() in ("true", "yes") if isinstance(flag, str) else bool(flag)
    )
    if data["supersede"] and not str(data.get("lesson") or "").strip():
        raise ParseError('"supersede": true needs a "lesson"')
    return data


def _supersede(
    memory: RecordContext,
    ns: str,
    model: str | None,
    namespace: Namespace | str | None,
    row: dict[str, Any],
    trajectory: Trajectory,
    run: Run,
    why: str,
    result: ReviewResult,
) -> RFlow[None]:
    """Supersede a misleading record with its correction (see the module docstring)."""
    settings, ids = memory.settings, [row["id"]]
    lesson, source, note = None, "rules", None
    if model is not None:
        evidence = _evidence(row, run)
        system = SUPERSEDE_PROMPT.format(why=why, max_chars=settings.lesson_max_chars)
        body = f"lesson: {row['lesson']}\ntrigger: {row['trigger']}\nevidence:\n{evidence}"
        messages = [{"role": "system", "content": system}, {"role": "user", "content": body}]
        answer, error = yield from ask_json(
            memory, ns, model, messages, SUPERSEDE_SCHEMA, "review-supersede", _parse_supersede
        )
        if answer is not None and answer["supersede"]:
            lesson, source = str(answer["lesson"]).strip(), f"llm:{model}"
            note = _grounded(lesson, row, evidence)
        elif answer is not None:
            note = str(answer.get("reason") or "model: nothing to correct")
        else:
            note = str(error)
    if lesson is None or note is not None:
        lesson, source = _rule_correction(row, trajectory, run, settings.lesson_max_chars), "rules"
    if lesson is None:
        reason = f"{why}; no correction in the run" + (f" ({note})" if note else "")
        result.decisions.append(ReviewDecision(action="keep", ids=ids, reason=reason))
        return
    new = {
        "scene": row["scene"],
        "trigger": row["trigger"],
        "action": row["action"],
        "outcome": row["outcome"],
        "lesson": lesson,
        "confidence": row["confidence"],
        "source": {"distiller": source, "review": "supersede"},
    }
    try:
        done = yield from Store(
            memory.supersede_flow(row["id"], new, reason=why, actor="review", namespace=namespace)
        )
    except HindsightError as exc:
        result.errors.append(f"supersede of {row['id']} failed: {exc}")
        result.decisions.append(ReviewDecision(action="skip", ids=ids, reason=str(exc)))
        return
    result.superseded[row["id"]] = done.id
    said = why if note is None else f"{why} (the model's correction was not used: {note})"
    result.decisions.append(
        ReviewDecision(action="supersede", ids=ids, into=done.id, lesson=lesson, reason=said)
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
