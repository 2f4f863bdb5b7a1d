"""What a tool may do with a record: the caller's grant applied (docs/sharing.md).

- search reads the own namespace and every granted one unless ``namespaces``
  narrows it to a part of them; asking for more is an error naming what the grant
  reads (and no record of it);
- feedback and history find the record among the readable namespaces;
- a change (supersede, forget) of a record read from another namespace is refused
  as read-only; an id outside what the grant reads answers "no record", as for
  any unknown id (the core's own answer for the own namespace: nothing leaks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mcp.server.mcpserver.exceptions import ToolError

from hindsight_core.errors import ValidationError

from .._grants import Grant, parse_pattern, show

if TYPE_CHECKING:
    from hindsight_core import AsyncMemory
    from hindsight_core.models import Namespace

    from ._models import TrajectoryIn


def search_scope(grant: Grant, asked: Sequence[str] | None) -> list[Namespace]:
    """The namespaces (or ``prefix/*``) a search reads: all the grant reads, or the
    part of it that ``asked`` names.

    Raises:
        ToolError: a malformed pattern, or one the grant does not read.
    """
    if asked is None:
        return list(grant.readable)
    scope: list[Namespace] = []
    for i, text in enumerate(asked):
        try:
            pattern = parse_pattern(text, field=f"namespaces[{i}]")
        except ValidationError as exc:
            raise ToolError(str(exc)) from None
        if not grant.covers(pattern):
            raise ToolError(
                f"namespaces[{i}]: {show(pattern)} is not readable by {grant.label}, "
                f"which may read {grant.describe()}"
            )
        scope.append(pattern)
    if not scope:
        raise ToolError("namespaces: give at least one, or leave it out to read all you may")
    return list(dict.fromkeys(scope))


async def holder(memory: AsyncMemory, grant: Grant, record_id: str) -> Namespace:
    """The readable namespace that holds ``record_id``; the own one when none does, so
    that the core answers "no record" in its words for an id the grant cannot read."""
    if not grant.shares:
        return grant.write
    found = await memory.locate(record_id, namespaces=list(grant.readable))
    return grant.write if found is None else found


async def writable(memory: AsyncMemory, grant: Grant, record_id: str, what: str) -> Namespace:
    """The own namespace, if ``record_id`` is there or nowhere readable.

    Raises:
        ToolError: the record is read from another namespace (read-only here).
    """
    ns = await holder(memory, grant, record_id)
    if ns != grant.write:
        raise ToolError(read_only(grant, ns, what))
    return ns


def read_only(grant: Grant, ns: Namespace, what: str) -> str:
    """The refusal of a change to a lesson read from another namespace."""
    return (
        f"read-only here: {grant.label} writes {show(grant.write)}; {show(ns)} is read-only, "
        f"so this lesson cannot be {what} from here. Give feedback with update_memory_usage, "
        "or write a corrected lesson of your own with write_memory."
    )


async def shared_feedback(
    memory: AsyncMemory, grant: Grant, data: TrajectoryIn
) -> tuple[TrajectoryIn, list[dict[str, Any]]]:
    """Feedback on the run's lessons read from other namespaces, given here (helpful if
    used, else not), and the run without them for the review of the own namespace."""
    if not grant.shares:
        return data, []
    given: list[dict[str, Any]] = []
    foreign: set[str] = set()
    for rid in dict.fromkeys([*data.used, *data.recalled]):
        try:
            ns = await holder(memory, grant, rid)
        except ValidationError:
            continue  # a malformed id: the review reports it, naming its field
        if ns == grant.write:
            continue
        helpful = rid in data.used
        await memory.mark_used(rid, helpful, namespace=ns, by=grant.label)
        given.append({"id": rid, "namespace": show(ns), "helpful": helpful})
        foreign.add(rid)
    rest = data.model_copy(
        update={
            "recalled": [r for r in data.recalled if r not in foreign],
            "used": [r for r in data.used if r not in foreign],
        }
    )
    return rest, given
