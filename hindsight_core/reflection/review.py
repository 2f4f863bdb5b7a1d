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

Every decision is in the returned :class:`ReviewResult` (``review_results.py``) and in
the log. The correction is ``review_supersede.py``, the merge ``review_merge.py``; this
module runs the review in that order.
"""

from __future__ import annotations

import logging

from ..errors import HindsightError, NotFoundError
from ..models import Experience, Namespace
from ..runtime.host import RecordContext
from ._driver import RFlow, Store
from .evidence import analyse
from .review_merge import clusters_flow, review_cluster
from .review_results import ReviewDecision, ReviewResult
from .review_supersede import rows_flow, supersede, why_misled
from .trajectory import Trajectory

__all__ = ["ReviewDecision", "ReviewResult", "review_flow"]

log = logging.getLogger("hindsight.reflection")


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
    stored = yield from Store(rows_flow(memory, ns, list(used)))
    misled = {rid: why for rid in used if (why := why_misled(stored.get(rid), trajectory, run))}
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
        yield from supersede(
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
            yield from review_cluster(memory, ns, model, namespace, scene, cluster, result)
    for d in result.decisions:
        log.info(
            "review: %s %s (%s)%s",
            d.action,
            ", ".join(map(str, d.ids)),
            d.reason,
            f" -> {d.into}: {d.lesson}" if d.into else "",
        )
    return result
