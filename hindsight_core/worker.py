"""Pending reflections for the maintenance worker (``hindsight worker``).

A task log that ended (``TaskLog.end_task``) but was never distilled is a
pending reflection: the agent may have crashed, or it leaves reflection to the
worker. After a grace period (so that an agent reflecting right away is not
raced) the worker reflects on the oldest ones, a bounded batch per sweep;
reflecting drops the task log. A run that cannot be distilled (the model failed
twice) is skipped for the rest of the worker's life and expires with its log.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .models import Namespace, ns_from_key
from .runtime.flow import Flow, Sql
from .storage import worker_sql

if TYPE_CHECKING:
    from .memory import Memory
    from .reflection import LLM, Trajectory
    from .runtime.host import FlowContext

GRACE = timedelta(minutes=1)


def pending_flow(
    memory: FlowContext, limit: int, grace: timedelta, skip: set[uuid.UUID]
) -> Flow[list[tuple[Namespace, Trajectory]]]:
    """The oldest ended task logs, as ``(namespace, trajectory)`` pairs."""
    from .reflection.tasks import to_trajectory

    yield from memory.ready_flow()
    rows = yield from Sql(
        worker_sql.PENDING_TASKS,
        {"before": memory.now() - grace, "limit": limit, "skip": [str(s) for s in skip]},
    )
    return [(ns_from_key(row["ns"]), to_trajectory(row)) for row in rows]


def reflect_pending(
    memory: Memory,
    *,
    llm: LLM | None,
    limit: int,
    grace: timedelta = GRACE,
    skip: set[uuid.UUID] | None = None,
) -> dict[str, Any]:
    """Reflect on up to ``limit`` pending task logs (all namespaces).

    Args:
        memory: the worker's memory.
        llm: the distilling model, or ``None`` for the rule-based distiller.
        limit: most task logs handled in this call.
        grace: only task logs ended at least this long ago.
        skip: ids not to try again; ids of runs that could not be distilled are added.

    Returns:
        ``{"reflected": n, "written": n, "skipped": n}``.
    """
    from .reflection import Reflector

    skip = skip if skip is not None else set()
    reflector = Reflector(memory, llm=llm)
    pending = memory.run_flow(pending_flow(memory, limit, grace, skip))
    report = {"reflected": 0, "written": 0, "skipped": 0}
    for namespace, trajectory in pending:
        result = reflector.reflect(trajectory, namespace=namespace)
        if result.skipped:
            skip.add(uuid.UUID(trajectory.source["task"]))
            report["skipped"] += 1
        else:
            report["reflected"] += 1
            report["written"] += len(result.written)
    return report
