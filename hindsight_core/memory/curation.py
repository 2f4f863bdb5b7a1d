"""Flows that curate experience records: feedback, forget, archive, restore,
critical, edit and merge. Each writes one event and (but forget) returns the record.
An edit of a lesson's text is a new version (``versions.py``)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from ..arguments import check_int, parse_id
from ..errors import NotFoundError, ValidationError
from ..models import Experience, ExperienceIn, Namespace
from ..runtime.flow import Embed, Flow, Sql, Unit
from ..storage import batch_sql, sharing_sql
from ..storage import experiences_sql as q
from .inputs import RecordInput, embedding_text, validate_records
from .results import Feedback
from .scope import check_by
from .versions import VersionFlows, typo_only
from .write_rows import record_row, search_tsv

MAX_FEEDBACK = 1000  # feedback entries one ``feedback`` call returns at most


class CurationFlows(VersionFlows):
    """Feedback and curation of experience records (flows; see ``runtime/flow.py``).

    Built on :class:`~.read_flows.RecallFlows` (through ``VersionFlows``): every change
    reads the record back.
    """

    # ------------------------------------------------------------------ feedback

    def mark_used_flow(
        self,
        record_id: object,
        helpful: bool,
        namespace: Namespace | str | None,
        by: str | None = None,
    ) -> Flow[Experience]:
        """Feedback on a record (``mark_used``; reflection's review reuses it), recorded
        as an event with who gave it (``by``, default: the namespace; docs/sharing.md)."""
        ns = self.namespace_key(namespace)
        rid = parse_id(record_id)
        if not isinstance(helpful, bool):
            raise ValidationError("helpful must be true or false", field="helpful")
        who = check_by(by, ns)
        yield from self.ready_flow()
        now = self.now()
        stmt = q.MARK_HELPFUL if helpful else q.MARK_UNHELPFUL
        rows = yield from Sql(
            stmt, {"ns": ns, "id": rid, "bonus": self.settings.use_bonus, **self.decay_params(now)}
        )
        if not rows:
            raise NotFoundError(f"no record {rid} in namespace {self._show(ns)}")
        yield from self._event(ns, rid, "used" if helpful else "unhelpful", now, {"by": who})
        return (yield from self._get_flow(rid, namespace))

    def _feedback_flow(
        self, record_id: object, namespace: Namespace | str | None, limit: int
    ) -> Flow[list[Feedback]]:
        """A record's usage feedback, newest first (``feedback``)."""
        ns = self.namespace_key(namespace)
        rid = parse_id(record_id)
        limit = check_int(limit, "limit", 1, MAX_FEEDBACK)
        yield from self.ready_flow()
        rows = yield from Sql(sharing_sql.FEEDBACK, {"ns": ns, "record_id": rid, "limit": limit})
        if not rows:
            yield from self._get_flow(rid, namespace)  # NotFoundError when there is none
        return [Feedback(at=r["at"], helpful=r["kind"] == "used", by=r["by"]) for r in rows]

    def _event(
        self,
        ns: str,
        rid: uuid.UUID | None,
        kind: str,
        now: Any,
        detail: dict[str, Any] | None = None,
    ) -> Flow[None]:
        yield Sql(
            batch_sql.EVENT_ROWS,
            batch_sql.event_rows(
                [
                    {
                        "ns": ns,
                        "record_id": rid,
                        "kind": kind,
                        "now": now,
                        "detail": json.dumps(detail or {}),
                    }
                ]
            ),
            fetch="none",
        )

    # ------------------------------------------------------------------ curation

    def _change_flow(
        self, record_id: object, kind: str, namespace: Namespace | str | None, **extra: Any
    ) -> Flow[Experience | None]:
        """forget / archive / restore / critical: one statement, one event."""
        ns = self.namespace_key(namespace)
        rid = parse_id(record_id)
        yield from self.ready_flow()
        now = self.now()
        # As a write does, before any row: a write holds the namespace's keyword counter
        # when it merges into a record, and archiving that record took the record, then
        # the counter (a deadlock: tests/test_lock_order.py).
        yield Sql(q.LOCK_NAMESPACE, {"ns": ns})
        stmt = {
            "forget": q.DELETE,
            "archive": q.ARCHIVE,
            "restore": q.RESTORE,
            "critical": q.SET_CRITICAL,
        }[kind]
        rows = yield from Sql(stmt, {"ns": ns, "id": rid, "now": now, **extra})
        if not rows:
            exists = yield from Sql(q.GET, {"ns": ns, "ids": [rid], **self.decay_params(now)})
            if not exists:
                raise NotFoundError(f"no record {rid} in namespace {self._show(ns)}")
            state = "archived" if kind == "archive" else "live"
            raise ValidationError(f"record {rid} is already {state}", field="id")
        yield from self._event(ns, rid, kind, now, extra or None)
        if kind == "forget":
            return None
        return (yield from self._get_flow(rid, namespace))

    def _forget_flow(self, record_id: object, namespace: Namespace | str | None) -> Flow[None]:
        """forget: the record deleted, one event."""
        yield from self._change_flow(record_id, "forget", namespace)

    def _curate_flow(
        self, record_id: object, kind: str, namespace: Namespace | str | None, **extra: Any
    ) -> Flow[Experience]:
        """archive / restore / critical, returning the changed record."""
        record = yield from self._change_flow(record_id, kind, namespace, **extra)
        assert record is not None  # only "forget" returns None
        return record

    def _edit_flow(
        self,
        record_id: object,
        changes: Mapping[str, Any],
        namespace: Namespace | str | None,
        actor: str | None = None,
    ) -> Flow[Experience]:
        """Change fields of a record; the embedding is recomputed.

        A change of the lesson or the trigger beyond a typo (``versions.typo_only``)
        writes a new version that supersedes the record, and returns it; the other
        fields (scene, action, outcome, importance, critical) change in place."""
        allowed = {"scene", "trigger", "action", "outcome", "lesson", "importance", "critical"}
        unknown = set(changes) - allowed
        if unknown:
            raise ValidationError(
                f"{sorted(unknown)[0]}: cannot be edited (editable: {', '.join(sorted(allowed))})",
                field=sorted(unknown)[0],
            )
        yield from self.ready_flow()

        def edited(current: Experience) -> tuple[ExperienceIn, str]:
            merged = {k: getattr(current, k) for k in allowed} | dict(changes)
            (rec,) = validate_records([merged], self.settings)
            return rec, embedding_text(rec, self.document_fields)

        def in_place(current: Experience, rec: ExperienceIn) -> bool:
            return typo_only(current.lesson, rec.lesson) and typo_only(current.trigger, rec.trigger)

        # Embedded from a first read (a unit of its own) before this flow takes a
        # connection: none is held, nor the lock, while the model runs.
        rec, text = edited((yield from Unit(self._get_flow(record_id, namespace))))
        self._warn_language([rec.lesson])
        (vector,) = yield from Embed([text])
        # Read again under the lock (as _change_flow takes it, before any row): every
        # editable field is written back from this read, and one read before the lock
        # undid a write merging into the record meanwhile (tests/test_lock_order.py).
        # Changed meanwhile (rare): embedded again, under the lock.
        yield Sql(q.LOCK_NAMESPACE, {"ns": self.namespace_key(namespace)})
        current = yield from self._get_flow(record_id, namespace)
        rec, again = edited(current)
        if not in_place(current, rec):  # a new version, of the record read under the lock
            keep = {"confidence": current.confidence, "source": current.source}
            result = yield from self.supersede_flow(
                current.id,
                rec.model_dump(exclude={"created_at", *keep}, exclude_none=True) | keep,
                reason="edited",
                actor=actor,
                namespace=namespace,
                locked=True,
                embedded=(text, vector),
            )
            return (yield from self._get_flow(result.id, namespace))
        if again != text:
            text, (vector,) = again, (yield from Embed([again]))
        now = self.now()
        yield Sql(
            q.EDIT,
            {
                "ns": self.namespace_key(namespace),
                "id": current.id,
                "now": now,
                "scene": rec.scene,
                "trigger": rec.trigger,
                "action": rec.action,
                "outcome": rec.outcome,
                "lesson": rec.lesson,
                "importance": rec.importance,
                "critical": rec.critical,
                **self._vector_fields(text, vector),
                "search_tsv": search_tsv(rec, self.document_fields),
            },
        )
        was = {"lesson": current.lesson, "trigger": current.trigger}
        yield from self._event(self.namespace_key(namespace), current.id, "edited", now, was)
        return (yield from self._get_flow(current.id, namespace))

    def merge_flow(
        self,
        record_ids: Iterable[object],
        into: RecordInput,
        namespace: Namespace | str | None,
    ) -> Flow[Experience]:
        """Replace several records by one more general lesson that links back to them.

        The sources are archived (restorable) with ``merged_into`` pointing at the new
        record; the new record's ``merged_from`` lists them, its ``occurrences`` and
        ``use_count`` are their sums. Written as is: no dedup against the sources.
        """
        ns = self.namespace_key(namespace)
        ids = [parse_id(r, field=f"ids[{i}]") for i, r in enumerate(record_ids)]
        if len(set(ids)) < 2:
            raise ValidationError("merge needs at least two distinct record ids", field="ids")
        (rec,) = validate_records([into], self.settings)
        yield from self.ready_flow()
        text = embedding_text(rec, self.document_fields)
        (vector,) = yield from Embed([text])  # before the connection and the lock
        now = self.now()
        yield Sql(q.LOCK_NAMESPACE, {"ns": ns})  # as _change_flow; the sources read after it
        sources = yield from Sql(q.GET, {"ns": ns, "ids": ids, **self.decay_params(now)})
        live = {r["id"]: r for r in sources if r["archived_at"] is None}
        missing = [str(i) for i in ids if i not in live]
        if missing:
            raise NotFoundError(
                f"cannot merge: no live record {', '.join(missing)} in namespace {self._show(ns)}"
            )
        old = [str(i) for i in ids if live[i]["superseded_by"] is not None]
        if old:  # an old version is history; its chain's head carries the lesson now
            raise ValidationError(
                f"cannot merge: record {', '.join(old)} is superseded; merge the current "
                "version (see history)",
                field="ids",
            )
        new_id = self._new_id()
        # The general lesson belongs to every scene its sources belonged to.
        scenes = list(
            dict.fromkeys(
                s for r in live.values() for s in (r["scene"], *r["also_scenes"]) if s != rec.scene
            )
        )
        yield Sql(
            batch_sql.INSERT_ROWS,
            batch_sql.insert_rows(
                [
                    record_row(
                        rec,
                        ns=ns,
                        id=new_id,
                        vector=self._vector_fields(text, vector),
                        fields=self.document_fields,
                        critical=rec.critical or any(r["critical"] for r in live.values()),
                        score=max(r["decayed_score"] for r in live.values()),
                        use_count=sum(r["use_count"] for r in live.values()),
                        occurrences=sum(r["occurrences"] for r in live.values()),
                        last_used_at=now,
                        created_at=now,
                        updated_at=now,
                        merged_from=ids,
                        also_scenes=scenes,
                    )
                ]
            ),
            fetch="none",
        )
        yield Sql(q.ARCHIVE_MERGED, {"ns": ns, "ids": ids, "into": new_id, "now": now})
        yield from self._event(ns, new_id, "merge", now, {"from": [str(i) for i in ids]})
        return (yield from self._get_flow(new_id, namespace))


__all__ = ["CurationFlows"]
