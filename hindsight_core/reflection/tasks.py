"""The task log: working memory for agents without a framework.

``start_task`` opens a log, ``log_step`` appends to it, ``end_task`` closes it and
returns the :class:`Trajectory` to reflect on. Logs live in ``hindsight_tasks``;
each write pushes ``expires_at`` to now + ``settings.task_ttl_hours``, so a task
that is abandoned (never ended, or ended and never distilled) is swept by
``maintain`` once that much time passes without activity. A successful
:meth:`Reflector.reflect` of the trajectory drops its log.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any

import pydantic

from ..arguments import parse_id, unique_ids
from ..errors import NotFoundError, ValidationError
from ..models import Namespace
from ..runtime.flow import Flow, Sql
from ..runtime.host import AsyncFlowHost, FlowContext, FlowHost
from ..runtime.runner import AsyncRunner, SyncRunner
from ..runtime.twin import awaited
from ..storage import tasks_sql as t
from .trajectory import Step, Trajectory

OUTCOMES = ("success", "failure", "partial", "unknown")


def _step(step: Step | Mapping[str, Any]) -> Step:
    if isinstance(step, Step):
        return step
    if not isinstance(step, Mapping):
        raise ValidationError(
            f"a step must be a Step or a mapping, got {type(step).__name__}", field="step"
        )
    try:
        return Step.model_validate(dict(step))
    except pydantic.ValidationError as exc:
        from ..models import raise_validation

        raise raise_validation(exc, prefix="step.") from None


class TaskFlows:
    """The task log's operations as flows over a memory (sync or async)."""

    def __init__(self, memory: FlowContext) -> None:
        self.memory = memory

    def _expires(self) -> tuple[Any, Any]:
        now = self.memory.now()
        return now, now + timedelta(hours=self.memory.settings.task_ttl_hours)

    def start(
        self,
        goal: str,
        namespace: Namespace | str | None,
        scene: str | None,
        source: Mapping[str, Any] | None,
    ) -> Flow[uuid.UUID]:
        ns = self.memory.namespace_key(namespace)
        if not isinstance(goal, str) or not goal.strip() or "\x00" in goal:
            raise ValidationError("goal must be a non-empty string", field="goal")
        if scene is not None and (not isinstance(scene, str) or not scene.strip()):
            raise ValidationError("scene must be a non-empty string or None", field="scene")
        meta: dict[str, Any] = {"scene": scene, "source": dict(source or {}), "used": []}
        yield from self.memory.ready_flow()
        now, expires = self._expires()
        task_id = uuid.uuid4()
        yield Sql(
            t.START_TASK,
            {
                "ns": ns,
                "id": task_id,
                "goal": goal.strip(),
                "now": now,
                "expires": expires,
                "meta": json.dumps(meta),
            },
            fetch="none",
        )
        return task_id

    def log(
        self,
        task_id: object,
        steps: Iterable[Step | Mapping[str, Any]],
        namespace: Namespace | str | None,
    ) -> Flow[None]:
        ns = self.memory.namespace_key(namespace)
        tid = parse_id(task_id, field="task_id")
        payload = [_step(s).model_dump(exclude_none=True) for s in steps]
        text = json.dumps(payload, ensure_ascii=False)
        if "\\u0000" in text:
            raise ValidationError("a step contains a NUL byte", field="step")
        yield from self.memory.ready_flow()
        now, expires = self._expires()
        rows = yield from Sql(
            t.APPEND_STEPS, {"ns": ns, "id": tid, "steps": text, "now": now, "expires": expires}
        )
        if not rows:
            yield from self._missing(ns, tid)

    def note_recall(
        self,
        task_id: object,
        recalled: Iterable[object],
        used: Iterable[object],
        namespace: Namespace | str | None,
    ) -> Flow[None]:
        ns = self.memory.namespace_key(namespace)
        tid = parse_id(task_id, field="task_id")
        rec = unique_ids(recalled, "recalled")
        use = unique_ids(used, "used")
        yield from self.memory.ready_flow()
        now, expires = self._expires()
        rows = yield from Sql(
            t.NOTE_RECALL,
            {
                "ns": ns,
                "id": tid,
                "recalled": rec + use,
                "used": [str(u) for u in use],
                "now": now,
                "expires": expires,
            },
        )
        if not rows:
            yield from self._missing(ns, tid)

    def end(
        self, task_id: object, outcome: str, final_state: str, namespace: Namespace | str | None
    ) -> Flow[Trajectory]:
        ns = self.memory.namespace_key(namespace)
        tid = parse_id(task_id, field="task_id")
        if outcome not in OUTCOMES:
            raise ValidationError(
                f"outcome must be one of {', '.join(OUTCOMES)}, got {outcome!r}", field="outcome"
            )
        if not isinstance(final_state, str) or "\x00" in final_state:
            raise ValidationError("final_state must be a string", field="final_state")
        yield from self.memory.ready_flow()
        now, expires = self._expires()
        rows = yield from Sql(
            t.END_TASK,
            {
                "ns": ns,
                "id": tid,
                "outcome": outcome,
                "now": now,
                "expires": expires,
                "meta": json.dumps({"final_state": final_state}),
            },
        )
        if not rows:
            yield from self._missing(ns, tid)
        return (yield from self.get(tid, namespace))

    def get(self, task_id: object, namespace: Namespace | str | None) -> Flow[Trajectory]:
        ns = self.memory.namespace_key(namespace)
        tid = parse_id(task_id, field="task_id")
        yield from self.memory.ready_flow()
        rows = yield from Sql(t.GET_TASK, {"ns": ns, "id": tid})
        if not rows:
            raise NotFoundError(
                f"no task {tid} in this namespace (it ended and was distilled, or expired)"
            )
        return to_trajectory(rows[0])

    def drop(self, task_id: object, namespace: Namespace | str | None) -> Flow[bool]:
        ns = self.memory.namespace_key(namespace)
        tid = parse_id(task_id, field="task_id")
        yield from self.memory.ready_flow()
        rows = yield from Sql(t.DROP_TASK, {"ns": ns, "id": tid})
        return bool(rows)

    def _missing(self, ns: str, tid: uuid.UUID) -> Flow[None]:
        rows = yield from Sql(t.GET_TASK, {"ns": ns, "id": tid})
        if not rows:
            raise NotFoundError(f"no task {tid} in this namespace (never started, or expired)")
        raise ValidationError(f"task {tid} has already ended", field="task_id")


def to_trajectory(row: Mapping[str, Any]) -> Trajectory:
    """A task log row as a :class:`Trajectory` (``source["task"]`` is the task id)."""
    meta = row["meta"] or {}
    source = {**(meta.get("source") or {}), "task": str(row["id"])}
    return Trajectory(
        goal=row["goal"],
        steps=[Step.model_validate(s) for s in row["steps"] or []],
        outcome=row["outcome"] or "unknown",
        final_state=meta.get("final_state") or "",
        recalled=list(row["recalled"] or []),
        used=[uuid.UUID(u) for u in meta.get("used") or []],
        scene=meta.get("scene"),
        source=source,
    )


class TaskLog:
    """Working memory of running tasks, for agents without a framework.

    Args:
        memory: a :class:`~hindsight_core.Memory` (any ``runtime.host.FlowHost``).

    Example:
        >>> log = TaskLog(memory)
        >>> tid = log.start_task("clean up ~/Downloads", scene="file-cleanup")
        >>> log.log_step(tid, {"kind": "tool_call", "tool": "rm", "args": {"path": "a.exe"}})
        >>> trajectory = log.end_task(tid, "success")
        >>> Reflector(memory).reflect(trajectory)  # drops the log once distilled
    """

    def __init__(self, memory: FlowHost) -> None:
        self.memory = memory
        self._flows = TaskFlows(memory)
        self._runner = SyncRunner(memory, lambda: memory.embedder)  # on the primary

    def start_task(
        self,
        goal: str,
        *,
        namespace: Namespace | str | None = None,
        scene: str | None = None,
        source: Mapping[str, Any] | None = None,
    ) -> uuid.UUID:
        """Open a task log; returns its id."""
        return self._runner.run(self._flows.start(goal, namespace, scene, source))

    def log_step(
        self,
        task_id: object,
        step: Step | Mapping[str, Any],
        *,
        namespace: Namespace | str | None = None,
    ) -> None:
        """Append a step (a :class:`Step` or a mapping with the same fields)."""
        return self._runner.run(self._flows.log(task_id, [step], namespace))

    def note_recall(
        self,
        task_id: object,
        recalled: Iterable[object] = (),
        used: Iterable[object] = (),
        *,
        namespace: Namespace | str | None = None,
    ) -> None:
        """Remember which records were shown to the agent, and which of them helped."""
        return self._runner.run(self._flows.note_recall(task_id, recalled, used, namespace))

    def end_task(
        self,
        task_id: object,
        outcome: str = "success",
        final_state: str = "",
        *,
        namespace: Namespace | str | None = None,
    ) -> Trajectory:
        """Close the log and return the trajectory (kept until distilled or expired)."""
        return self._runner.run(self._flows.end(task_id, outcome, final_state, namespace))

    def get_trajectory(
        self, task_id: object, *, namespace: Namespace | str | None = None
    ) -> Trajectory:
        """The trajectory so far (of a running or ended task)."""
        return self._runner.run(self._flows.get(task_id, namespace))

    def drop_task(self, task_id: object, *, namespace: Namespace | str | None = None) -> bool:
        """Delete a task log; returns whether it existed."""
        return self._runner.run(self._flows.drop(task_id, namespace))


class AsyncTaskLog:
    """:class:`TaskLog` for :class:`~hindsight_core.AsyncMemory` (same API, awaited)."""

    def __init__(self, memory: AsyncFlowHost) -> None:
        self.memory = memory
        self._flows = TaskFlows(memory)
        self._runner = AsyncRunner(memory, lambda: memory.embedder)  # on the primary

    # TaskLog's methods, awaited (``runtime/twin.py``).
    start_task = awaited(TaskLog.start_task)
    log_step = awaited(TaskLog.log_step)
    note_recall = awaited(TaskLog.note_recall)
    end_task = awaited(TaskLog.end_task)
    get_trajectory = awaited(TaskLog.get_trajectory)
    drop_task = awaited(TaskLog.drop_task)
