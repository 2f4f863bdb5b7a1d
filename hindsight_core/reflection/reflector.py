"""``Reflector`` / ``AsyncReflector``: distill a finished run into lessons, review it.

``reflect`` picks the distiller: with a model, the run's evidence is found first
(``findings.py``; none: no model call) and the model phrases one lesson per piece,
screened against it (``check.py``), else the rule-based one, whose lessons go through
the citation screen (``screen.py``: confidence, copies, generic advice, grounding,
"nothing new"). After validation, a candidate that repeats a lesson recalled during
the run reinforces it (``reinforce.py``); the rest are written with
``memory.write_many`` (so dedup applies: a lesson the store already holds merges
into it).
It never raises for a model failure: a failed call or unusable answer is retried
once with the error, then the run is skipped and logged, and the result says so.
Storage failures are reported the same way. Only bad arguments (a malformed
trajectory or namespace) raise.

Both classes drive the same generator flows (``_driver.py``); neither has logic
of its own.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from ..errors import HindsightError, ValidationError
from ..models import Namespace, WriteResult
from ..runtime.host import RecordContext
from ._driver import RFlow, Store, drive_async, drive_sync
from .distiller import complete, llm_distill
from .llm import LLM
from .reinforce import reinforce
from .review import ReviewResult, review_flow
from .rules import RuleBasedDistiller
from .screen import screen
from .tasks import TaskFlows
from .trajectory import Trajectory

if TYPE_CHECKING:
    from ..memory import AsyncMemory, Memory

log = logging.getLogger("hindsight.reflection")


class ReflectionResult(BaseModel):
    """What :meth:`Reflector.reflect` did.

    Attributes:
        written: one entry per record written (``inserted``, or ``merged`` into an
            existing near-duplicate), in the order of ``records``.
        records: the records that were written (as dicts), aligned with ``written``.
        dropped: candidates not written, each ``{"record": ..., "reason": ...}``
            (below the confidence floor, a copy of the prompt, generic, not
            grounded in the steps it cites, nothing new, contradicting the run, still
            too long or in the wrong language after being asked again, invalid).
        reinforced: recalled records that a candidate repeated (``merged``, with
            the similarity); those candidates are not in ``records``.
        asked_again: how many lessons were sent back once for length or language.
        skipped: the run could not be distilled (model failed twice, storage failed).
        error: why it was skipped.
        distiller: ``llm:<model>`` or ``rule-based``.
    """

    written: list[WriteResult] = Field(default_factory=list)
    dropped: list[dict[str, Any]] = Field(default_factory=list)
    skipped: bool = False
    error: str | None = None
    distiller: str = ""
    records: list[dict[str, Any]] = Field(default_factory=list)
    reinforced: list[WriteResult] = Field(default_factory=list)
    asked_again: int = 0


def _trajectory(value: Trajectory | dict[str, Any]) -> Trajectory:
    if isinstance(value, Trajectory):
        return value
    if isinstance(value, dict):
        import pydantic

        from ..models import raise_validation

        try:
            return Trajectory.model_validate(value)
        except pydantic.ValidationError as exc:
            raise raise_validation(exc, prefix="trajectory.") from None
    raise ValidationError(f"expected a Trajectory, got {type(value).__name__}", field="trajectory")


def reflect_flow(
    memory: RecordContext,
    llm: LLM | None,
    trajectory: Trajectory,
    namespace: Namespace | str | None,
) -> RFlow[ReflectionResult]:
    """Distill, screen, write; drop the task log once distilled."""
    ns = memory.namespace_key(namespace)
    settings = memory.settings
    asked = 0
    if llm is None:
        distiller = RuleBasedDistiller(max_chars=settings.lesson_max_chars)
        name = distiller.name
        candidates, dropped, _ = screen(
            distiller.distill(trajectory), trajectory, settings, [], can_fix=False
        )
        error = None
    else:
        name = f"llm:{llm.model_name}"
        candidates, dropped, error, asked = yield from llm_distill(
            memory, ns, llm.model_name, trajectory
        )
    if error is not None:
        log.warning("reflection skipped (%s): %s; goal: %.80s", name, error, trajectory.goal)
        return ReflectionResult(skipped=True, error=error, distiller=name, dropped=dropped)
    records, more_dropped = complete(candidates, trajectory, settings, name)
    dropped.extend(more_dropped)
    written: list[WriteResult] = []
    reinforced: list[WriteResult] = []
    try:
        if records and trajectory.recalled:
            repeats = yield from reinforce(memory, namespace, trajectory.recalled, records)
            reinforced = list(repeats.values())
            records = [r for i, r in enumerate(records) if i not in repeats]
        if records:
            written = yield from Store(memory.write_flow(records, namespace))
        task = trajectory.source.get("task")
        if task is not None:
            yield Store(TaskFlows(memory).drop(_task_id(task), namespace))
    except HindsightError as exc:
        log.error("reflection could not be stored (%s): %s", name, exc)
        return ReflectionResult(
            skipped=True,
            error=f"storage failed: {exc}",
            distiller=name,
            dropped=dropped,
            records=records,
            asked_again=asked,
        )
    for d in dropped:
        log.info("reflection dropped a candidate: %s", d["reason"])
    for rec, res in zip(records, written, strict=True):
        log.info("reflection %s %s: %s", res.status, res.id, rec["lesson"])
    for res in reinforced:
        log.info("reflection reinforced recalled record %s", res.id)
    if not records:
        log.info("reflection (%s): no new lesson", name)
    return ReflectionResult(
        written=written,
        dropped=dropped,
        distiller=name,
        records=records,
        reinforced=reinforced,
        asked_again=asked,
    )


def _task_id(value: Any) -> Any:
    """A task id from ``source["task"]``; other provenance strings are not task logs."""
    import uuid

    try:
        return uuid.UUID(str(value))
    except ValueError:
        return uuid.UUID(int=0)  # matches no task log


class Reflector:
    """Reflection for a :class:`~hindsight_core.Memory`.

    Args:
        memory: where lessons are written and reviewed.
        llm: the distilling model; ``None`` uses the rule-based distiller (and
            review then reinforces and decays, but does not merge).

    Example:
        >>> result = Reflector(memory, llm=llm_from_settings(memory.settings)).reflect(
        ...     Trajectory(goal="...", steps=[...], outcome="success"))
        >>> [r["lesson"] for r in result.records]
    """

    def __init__(self, memory: Memory, llm: LLM | None = None) -> None:
        self.memory = memory
        self.llm = llm

    @property
    def distiller(self) -> str:
        """``llm:<model>`` or ``rule-based``."""
        return f"llm:{self.llm.model_name}" if self.llm is not None else RuleBasedDistiller.name

    def reflect(
        self, trajectory: Trajectory | dict[str, Any], *, namespace: Namespace | str | None = None
    ) -> ReflectionResult:
        """Distill a finished run into 0-3 lessons and write them (deduplicated)."""
        flow = reflect_flow(self.memory, self.llm, _trajectory(trajectory), namespace)
        return drive_sync(flow, self.memory, self.llm)

    def review(
        self, trajectory: Trajectory | dict[str, Any], *, namespace: Namespace | str | None = None
    ) -> ReviewResult:
        """Reinforce used records, decay unused ones, merge near-duplicates."""
        model = self.llm.model_name if self.llm is not None else None
        flow = review_flow(self.memory, model, _trajectory(trajectory), namespace)
        return drive_sync(flow, self.memory, self.llm)


class AsyncReflector:
    """:class:`Reflector` for :class:`~hindsight_core.AsyncMemory` (same API, awaited).

    :meth:`submit` runs a reflection as an asyncio task and never raises into the
    caller; :meth:`wait` awaits the pending ones (call it before shutting down).
    """

    def __init__(self, memory: AsyncMemory, llm: LLM | None = None) -> None:
        self.memory = memory
        self.llm = llm
        self._tasks: set[asyncio.Task[ReflectionResult]] = set()

    @property
    def distiller(self) -> str:
        return f"llm:{self.llm.model_name}" if self.llm is not None else RuleBasedDistiller.name

    async def reflect(
        self, trajectory: Trajectory | dict[str, Any], *, namespace: Namespace | str | None = None
    ) -> ReflectionResult:
        flow = reflect_flow(self.memory, self.llm, _trajectory(trajectory), namespace)
        return await drive_async(flow, self.memory, self.llm)

    async def review(
        self, trajectory: Trajectory | dict[str, Any], *, namespace: Namespace | str | None = None
    ) -> ReviewResult:
        model = self.llm.model_name if self.llm is not None else None
        flow = review_flow(self.memory, model, _trajectory(trajectory), namespace)
        return await drive_async(flow, self.memory, self.llm)

    def submit(
        self, trajectory: Trajectory | dict[str, Any], namespace: Namespace | str | None = None
    ) -> asyncio.Task[ReflectionResult]:
        """Reflect in the background on the running loop; the task's result is a
        :class:`ReflectionResult` (``skipped`` with the error if anything failed)."""
        task = asyncio.get_running_loop().create_task(self._safe(trajectory, namespace))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _safe(self, trajectory: Any, namespace: Namespace | str | None) -> ReflectionResult:
        try:
            return await self.reflect(trajectory, namespace=namespace)
        except Exception as exc:  # background: report, never raise into the agent
            log.exception("background reflection failed")
            return ReflectionResult(
                skipped=True, error=f"{type(exc).__name__}: {exc}", distiller=self.distiller
            )

    @property
    def pending(self) -> int:
        """Reflections submitted and not finished."""
        return len(self._tasks)

    async def wait(self) -> list[ReflectionResult]:
        """Wait for every submitted reflection; returns their results."""
        if not self._tasks:
            return []
        return list(await asyncio.gather(*list(self._tasks)))
