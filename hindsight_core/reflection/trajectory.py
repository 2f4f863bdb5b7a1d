"""A framework-neutral record of one task run, and when to reflect on it.

A :class:`Trajectory` is what the distiller reads: the goal, the ordered steps
(thoughts, tool calls with arguments, results, errors, messages), the outcome and
final state, and which recalled records were shown to the agent (``recalled``) and
which of those helped (``used``). Adapters build one from their own run format;
agents without a framework use :class:`~hindsight_core.reflection.TaskLog`.

Reflection happens at task boundaries, not every turn. :class:`Boundary` says
whether one is reached: the task was ended explicitly, ``idle_rounds`` model turns
passed without a new tool call, or a caller-supplied condition fired.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ..models import reject_nul

StepKind = Literal["thought", "tool_call", "tool_result", "error", "message"]
Outcome = Literal["success", "failure", "partial", "unknown"]
BoundaryReason = Literal["explicit", "idle", "condition"]

_FAILURE = re.compile(
    r"^\s*(error|exception|traceback|failed|failure|fatal|permission denied|错误|失败|异常)",
    re.IGNORECASE,
)


class Step(BaseModel):
    """One step of a run.

    Attributes:
        kind: ``thought``, ``tool_call``, ``tool_result``, ``error`` or ``message``.
        content: the text of the step (a result, an error message, a thought...).
        tool: the tool's name, for tool calls, results and errors.
        args: the tool call's arguments.
        role: for messages: ``user``, ``assistant``, ``system``.
    """

    model_config = ConfigDict(extra="forbid")

    kind: StepKind
    content: str = ""
    tool: str | None = None
    args: dict[str, Any] | None = None
    role: str | None = None

    @field_validator("content", "tool", "args", "role")
    @classmethod
    def _no_nul(cls, value: Any, info: ValidationInfo) -> Any:
        reject_nul(value, str(info.field_name))
        return value

    @property
    def failed(self) -> bool:
        """Whether this step reports a failure (an error, or a result that reads as one)."""
        return self.kind == "error" or (
            self.kind == "tool_result" and bool(_FAILURE.match(self.content))
        )


class Trajectory(BaseModel):
    """A finished (or finishing) task run, ready for :meth:`Reflector.reflect`.

    Attributes:
        goal: what the agent was asked to do.
        steps: what it did, in order.
        outcome: ``success``, ``failure``, ``partial`` or ``unknown``.
        final_state: how things stood at the end, in a sentence or two.
        recalled: ids of records that were shown to the agent during the run.
        used: ids of those that helped.
        scene: the scene tag lessons from this run are filed under (else the model's).
        source: provenance copied onto the records (``agent``, ``task``, ``tool``...).
            ``source["task"]`` names the task log that is dropped once distilled.
    """

    model_config = ConfigDict(extra="forbid")

    goal: str
    steps: list[Step] = Field(default_factory=list)
    outcome: Outcome = "unknown"
    final_state: str = ""
    recalled: list[uuid.UUID] = Field(default_factory=list)
    used: list[uuid.UUID] = Field(default_factory=list)
    scene: str | None = None
    source: dict[str, Any] = Field(default_factory=dict)

    @field_validator("goal", "final_state", "scene", "source")
    @classmethod
    def _no_nul(cls, value: Any, info: ValidationInfo) -> Any:
        # The run's text reaches PostgreSQL (task logs, lessons' scene and source).
        reject_nul(value, str(info.field_name))
        return value

    def text(self) -> str:
        """All the text of the run (goal, steps, final state), for language detection."""
        parts = [self.goal, self.final_state]
        parts.extend(s.content for s in self.steps)
        return "\n".join(p for p in parts if p)


def idle_rounds(steps: Sequence[Step]) -> int:
    """Model turns (assistant messages and thoughts) since the last tool call."""
    count = 0
    for step in reversed(steps):
        if step.kind == "tool_call":
            break
        if step.kind == "thought" or (step.kind == "message" and step.role in (None, "assistant")):
            count += 1
    return count


class Boundary:
    """Decides when a run is over and should be reflected on.

    Args:
        idle_rounds: this many model turns without a new tool call end the task
            (``None`` disables the rule).
        until: a termination condition of the caller's, given the trajectory so far.

    Example:
        >>> boundary = Boundary(idle_rounds=3, until=lambda t: "DONE" in t.final_state)
        >>> boundary.reached(trajectory)            # None while the task runs
        >>> boundary.reached(trajectory, ended=True)
        'explicit'
    """

    def __init__(
        self, *, idle_rounds: int | None = 3, until: Callable[[Trajectory], bool] | None = None
    ) -> None:
        if idle_rounds is not None and idle_rounds < 1:
            raise ValueError("idle_rounds must be at least 1 (or None)")
        self.idle_rounds = idle_rounds
        self.until = until

    def reached(self, trajectory: Trajectory, *, ended: bool = False) -> BoundaryReason | None:
        """Why the task is over (``explicit``, ``idle``, ``condition``), or ``None``.

        ``explicit``: ``ended`` was passed (the user or agent said the task is done)
        or the trajectory already has an outcome other than ``unknown``.
        """
        if ended or trajectory.outcome != "unknown":
            return "explicit"
        if self.idle_rounds is not None and idle_rounds(trajectory.steps) >= self.idle_rounds:
            return "idle"
        if self.until is not None and self.until(trajectory):
            return "condition"
        return None
