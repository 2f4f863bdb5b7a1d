"""Looking at the store: namespaces and scenes with counts, activity over time,
a record's history and its projected score decay (used by the inspector UI).

Written once as flows (see ``runtime/flow.py``); :class:`InspectMethods` binds each
through the runner in one line and :class:`AsyncInspectMethods` takes the same methods,
awaited (``runtime/twin.py``); they are mixed into :class:`~hindsight_core.Memory` and
:class:`~hindsight_core.AsyncMemory`.
"""

from __future__ import annotations

import uuid
from datetime import date, datetime, timedelta
from typing import Any

from pydantic import BaseModel, Field

from ..arguments import check_int, parse_id
from ..errors import NotFoundError, ValidationError
from ..models import Namespace, ns_from_key, ns_key, show_namespace, validate_namespace
from ..runtime.flow import Flow, Sql
from ..runtime.runner import AsyncRunner, SyncRunner
from ..runtime.twin import awaited
from ..storage import inspect_sql as iq
from .base import MemoryBase
from .inputs import check_scene

MAX_NAMESPACES = 1000
MAX_DAYS = 3650


class NamespaceSummary(BaseModel):
    """One namespace and how many records it holds."""

    namespace: Namespace
    records: int = Field(description="Live (recallable) records.")
    archived: int
    scenes: int
    last_updated: datetime | None


class SceneSummary(BaseModel):
    """One scene of a namespace and its record counts."""

    scene: str
    records: int
    archived: int


class ActivityPoint(BaseModel):
    """How many events of one kind happened on one day (UTC).

    Kinds written by the core: ``used`` / ``unhelpful`` (feedback after recall),
    ``merged`` (a duplicate write), ``merge``, ``archive``, ``restore``, ``forget``,
    ``critical``, ``edited``.
    """

    day: date
    kind: str
    count: int


class RecordEvent(BaseModel):
    """One entry of a record's history."""

    at: datetime
    kind: str
    detail: dict[str, Any] = Field(default_factory=dict)


class DecayPoint(BaseModel):
    """The record's score after decay at one instant (past or projected)."""

    at: datetime
    score: float


class DecayCurve(BaseModel):
    """A record's decayed score from its last use until ``days`` from now.

    Attributes:
        evict_below: the maintenance worker archives non-critical records under this.
        evicted_at: the first projected instant under ``evict_below`` (None if none).
    """

    record_id: uuid.UUID
    critical: bool
    now: datetime
    evict_below: float
    points: list[DecayPoint]
    evicted_at: datetime | None


class InspectFlows(MemoryBase):
    """Read-only views of the store (flows)."""

    def _namespaces_flow(
        self, prefix: Namespace | str | None, limit: int
    ) -> Flow[list[NamespaceSummary]]:
        key = None if prefix is None else ns_key(validate_namespace(prefix, field="prefix"))
        limit = check_int(limit, "limit", 1, MAX_NAMESPACES)
        yield from self.ready_flow(check_model=False)
        rows = yield from Sql(iq.NAMESPACES, {"prefix": key, "limit": limit})
        return [NamespaceSummary(namespace=ns_from_key(r.pop("ns")), **r) for r in rows]

    def _scenes_flow(self, namespace: Namespace | str | None) -> Flow[list[SceneSummary]]:
        ns = self.namespace_key(namespace)
        yield from self.ready_flow(check_model=False)
        rows = yield from Sql(iq.SCENES, {"ns": ns})
        return [SceneSummary(**r) for r in rows]

    def _count_flow(
        self, namespace: Namespace | str | None, scene: str | None, archived: bool | None
    ) -> Flow[int]:
        ns = self.namespace_key(namespace)
        if archived not in (True, False, None):
            raise ValidationError("archived must be true, false or None", field="archived")
        scene = check_scene(scene)
        yield from self.ready_flow(check_model=False)
        rows = yield from Sql(
            iq.count_sql(scene=scene is not None, archived=archived), {"ns": ns, "scene": scene}
        )
        return int(rows[0]["n"])

    def _activity_flow(
        self,
        namespace: Namespace | str | None,
        days: int,
        record_id: object | None,
        all_namespaces: bool,
    ) -> Flow[list[ActivityPoint]]:
        ns = None if all_namespaces else self.namespace_key(namespace)
        days = check_int(days, "days", 1, MAX_DAYS)
        rid = None if record_id is None else parse_id(record_id)
        yield from self.ready_flow(check_model=False)
        now = self.now()
        rows = yield from Sql(
            iq.ACTIVITY,
            {"ns": ns, "record_id": rid, "now": now, "since": now - timedelta(days=days)},
        )
        return [ActivityPoint(day=r["day"], kind=r["kind"], count=r["n"]) for r in rows]

    def _events_flow(
        self, record_id: object, namespace: Namespace | str | None, limit: int
    ) -> Flow[list[RecordEvent]]:
        ns = self.namespace_key(namespace)
        rid = parse_id(record_id)
        limit = check_int(limit, "limit", 1, 10_000)
        yield from self.ready_flow(check_model=False)
        rows = yield from Sql(iq.HISTORY, {"ns": ns, "record_id": rid, "limit": limit})
        return [RecordEvent(at=r["at"], kind=r["kind"], detail=r["detail"] or {}) for r in rows]

    def _decay_curve_flow(
        self, record_id: object, namespace: Namespace | str | None, days: int, points: int
    ) -> Flow[DecayCurve]:
        ns = self.namespace_key(namespace)
        rid = parse_id(record_id)
        days = check_int(days, "days", 1, MAX_DAYS)
        points = check_int(points, "points", 2, 1000)
        yield from self.ready_flow(check_model=False)
        now = self.now()
        rows = yield from Sql(
            iq.DECAY_CURVE,
            {"ns": ns, "id": rid, "days": days, "points": points, **self.decay_params(now)},
        )
        if not rows:
            raise NotFoundError(f"no record {rid} in namespace {show_namespace(ns)}")
        critical = bool(rows[0]["critical"])
        curve = [DecayPoint(at=r["at"], score=r["score"]) for r in rows]
        evict = self.settings.evict_below
        below = next((p.at for p in curve if p.score < evict and p.at >= now), None)
        return DecayCurve(
            record_id=rid,
            critical=critical,
            now=now,
            evict_below=evict,
            points=curve,
            evicted_at=None if critical else below,
        )


class InspectMethods(InspectFlows):
    """Synchronous inspection methods (mixed into :class:`~hindsight_core.Memory`)."""

    _runner: SyncRunner  # Memory's

    def namespaces(
        self, *, prefix: Namespace | str | None = None, limit: int = MAX_NAMESPACES
    ) -> list[NamespaceSummary]:
        """Every namespace (or those under ``prefix``) with its record counts.

        This looks across tenants: it is meant for operators (the inspector, the CLI).
        """
        return self._runner.run(self._namespaces_flow(prefix, limit))

    def scenes(self, *, namespace: Namespace | str | None = None) -> list[SceneSummary]:
        """The scenes of a namespace with live and archived counts, largest first."""
        return self._runner.run(self._scenes_flow(namespace))

    def count_records(
        self,
        *,
        namespace: Namespace | str | None = None,
        scene: str | None = None,
        archived: bool | None = False,
    ) -> int:
        """How many records :meth:`list_records` pages through with the same filters."""
        return self._runner.run(self._count_flow(namespace, scene, archived))

    def activity(
        self,
        *,
        namespace: Namespace | str | None = None,
        days: int = 30,
        record_id: object | None = None,
        all_namespaces: bool = False,
    ) -> list[ActivityPoint]:
        """Events per day and kind over the last ``days`` (feedback, merges, curation)."""
        return self._runner.run(self._activity_flow(namespace, days, record_id, all_namespaces))

    def events(
        self, record_id: object, *, namespace: Namespace | str | None = None, limit: int = 100
    ) -> list[RecordEvent]:
        """A record's events, newest first (``history``: its versions, docs/versions.md)."""
        return self._runner.run(self._events_flow(record_id, namespace, limit))

    def decay_curve(
        self,
        record_id: object,
        *,
        namespace: Namespace | str | None = None,
        days: int = 180,
        points: int = 60,
    ) -> DecayCurve:
        """A record's score after decay from its last use until ``days`` from now."""
        return self._runner.run(self._decay_curve_flow(record_id, namespace, days, points))


class AsyncInspectMethods(InspectFlows):
    """:class:`InspectMethods`, awaited (``runtime/twin.py``; mixed into ``AsyncMemory``)."""

    _runner: AsyncRunner  # AsyncMemory's

    namespaces = awaited(InspectMethods.namespaces)
    scenes = awaited(InspectMethods.scenes)
    count_records = awaited(InspectMethods.count_records)
    activity = awaited(InspectMethods.activity)
    events = awaited(InspectMethods.events)
    decay_curve = awaited(InspectMethods.decay_curve)


__all__ = [
    "ActivityPoint",
    "AsyncInspectMethods",
    "DecayCurve",
    "DecayPoint",
    "InspectFlows",
    "InspectMethods",
    "NamespaceSummary",
    "RecordEvent",
    "SceneSummary",
]
