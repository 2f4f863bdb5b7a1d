"""Flows for experience records: write (with dedup), recall, feedback, curation."""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ..errors import NotFoundError, ValidationError
from ..models import (
    Experience,
    ExperienceIn,
    Namespace,
    ScoreBreakdown,
    SearchHit,
    WriteResult,
    parse_experience,
    parse_id,
    raise_validation,
)
from ..storage import experiences_sql as q
from ..text import merge_veto, search_document, tokens, tsquery_terms
from .base import MemoryBase
from .flow import Embed, Flow, Sql

MAX_QUERY_CHARS = 10_000
MAX_TOP_K = 100
MAX_BATCH = 10_000
RecordInput = ExperienceIn | Mapping[str, Any]


def embedding_text(record: ExperienceIn) -> str:
    """What is embedded for a record: the lesson (without closing punctuation, which
    moves a short sentence's vector a lot), then its trigger."""
    return f"{record.lesson.rstrip(' .。!！;；')}\n{record.trigger}"


class RecordFlows(MemoryBase):
    """Write, recall and curate experience records (flows; see ``flow.py``)."""

    # ------------------------------------------------------------------ dedup guard

    def same_meaning(self, a: str, b: str, similarity: float) -> bool:
        """Whether two lessons at ``similarity`` may be merged.

        The cosine threshold alone merges different lessons: all-MiniLM-L6-v2 puts
        "increase the timeout" and "decrease the timeout" at 0.99, and two different
        Chinese lessons near 0.9. So a merge also needs no lexical veto
        (``text.merge_veto``: negation, numbers, opposite terms, and for text the
        model does not cover, the same content words).
        """
        if similarity < self.settings.dedup_threshold:
            return False
        covered = self._covered(a) and self._covered(b)
        return merge_veto(a, b, covered=covered) is None

    # ------------------------------------------------------------------ write

    def _parse_records(self, records: Sequence[RecordInput]) -> list[ExperienceIn]:
        if isinstance(records, Mapping | ExperienceIn) or not isinstance(records, Sequence):
            raise ValidationError("records must be a list of records", field="records")
        if len(records) > MAX_BATCH:
            raise ValidationError(
                f"records has {len(records)} entries; write at most {MAX_BATCH} per call",
                field="records",
            )
        parsed = []
        for i, record in enumerate(records):
            try:
                parsed.append(
                    parse_experience(
                        record,
                        lesson_max_chars=self.settings.lesson_max_chars,
                        field_max_chars=self.settings.field_max_chars,
                    )
                )
            except ValidationError as exc:
                if len(records) == 1:
                    raise
                raise ValidationError(f"records[{i}]: {exc}", field=f"records[{i}]") from None
        return parsed

    def _write_flow(
        self, records: Sequence[RecordInput], namespace: Namespace | str | None
    ) -> Flow[list[WriteResult]]:
        ns = self._ns(namespace)
        parsed = self._parse_records(records)
        if not parsed:
            return []
        yield from self._ready_flow()
        self._warn_language([p.lesson for p in parsed])
        vectors = yield Embed([embedding_text(p) for p in parsed])
        now = self._now()
        literals = [q.vector_literal(v) for v in vectors]
        yield Sql(q.LOCK_NAMESPACE, {"ns": ns})
        yield Sql(q.SET_DEDUP_EF_SEARCH)
        rows = yield Sql(q.nearest_many(self.embedder.dim), {"ns": ns, "vectors": literals})
        neighbours: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for row in rows:
            neighbours[row["i"] - 1].append(row)

        matrix = np.asarray(vectors, dtype=np.float32)
        sims = matrix @ matrix.T
        results: list[WriteResult] = []
        inserts: list[int] = []  # indexes into parsed
        insert_ids: dict[int, uuid.UUID] = {}
        insert_extra: dict[int, int] = defaultdict(int)  # merged into a batch insert
        merges: dict[uuid.UUID, dict[str, Any]] = {}
        for i, rec in enumerate(parsed):
            target: tuple[uuid.UUID, float, int | None] | None = None
            for n in neighbours[i]:
                if self.same_meaning(rec.lesson, n["lesson"], n["similarity"]):
                    target = (n["id"], float(n["similarity"]), None)
                    break
            for j in inserts:
                sim = float(sims[i, j])
                better = target is None or sim > target[1]
                if better and self.same_meaning(rec.lesson, parsed[j].lesson, sim):
                    target = (insert_ids[j], sim, j)
            if target is None:
                inserts.append(i)
                insert_ids[i] = self._new_id()
                results.append(WriteResult(id=insert_ids[i], status="inserted"))
                continue
            target_id, sim, batch_index = target
            results.append(WriteResult(id=target_id, status="merged", similarity=round(sim, 4)))
            if batch_index is not None:
                insert_extra[batch_index] += 1
            else:
                m = merges.setdefault(
                    target_id, {"added": 0, "critical": False, "importance": None}
                )
                m["added"] += 1
                m["critical"] = m["critical"] or rec.critical
                if rec.importance is not None:
                    m["importance"] = max(m["importance"] or 0.0, rec.importance)

        if inserts:
            params = []
            for i in inserts:
                rec = parsed[i]
                created = rec.created_at or now
                params.append({
                    "ns": ns, "id": insert_ids[i], "scene": rec.scene, "trigger": rec.trigger,
                    "action": rec.action, "outcome": rec.outcome, "lesson": rec.lesson,
                    "confidence": rec.confidence, "importance": rec.importance,
                    "critical": rec.critical,
                    "source": json.dumps(rec.source.model_dump(exclude_none=True)),
                    "score": 1.0, "use_count": 0, "occurrences": 1 + insert_extra[i],
                    "last_used_at": now if insert_extra[i] else None,
                    "created_at": created, "updated_at": now, "archived_at": None,
                    "merged_into": None, "merged_from": [],
                    "embedding": literals[i],
                    "search_tsv": q.tsvector_literal(
                        tokens(search_document(rec.lesson, rec.trigger, rec.scene))
                    ),
                })
            yield Sql(q.INSERT, params, fetch="none")
        if merges:
            yield Sql(
                q.MERGE_DUPLICATE,
                [{"ns": ns, "id": rid, "now": now, **m} for rid, m in merges.items()],
                fetch="none",
            )
            yield Sql(q.INSERT_EVENT, [
                {"ns": ns, "record_id": rid, "kind": "merged", "now": now,
                 "detail": json.dumps({"added": m["added"]})} for rid, m in merges.items()
            ], fetch="none")
        return results

    # ------------------------------------------------------------------ recall

    def _search_flow(
        self,
        query: str,
        namespace: Namespace | str | None,
        scene: str | None,
        top_k: int,
        filters: Mapping[str, Any] | None,
        timeout_ms: int | None = None,
    ) -> Flow[list[SearchHit]]:
        ns = self._ns(namespace)
        query = _check_query(query)
        top_k = _check_top_k(top_k)
        if scene is not None and (not isinstance(scene, str) or not scene.strip()):
            raise ValidationError("scene must be a non-empty string or None", field="scene")
        filter_items = _check_filters(filters)
        yield from self._ready_flow()
        vector = yield from self._embed_one_query(query)
        terms = tsquery_terms(query)
        # Reads only: without a timeout to set, no transaction (saves BEGIN + COMMIT).
        ac = timeout_ms is None
        common = (yield from self._common_terms_flow(ac)) if terms else frozenset()
        rare = [t for t in terms if t not in common]
        stmt = q.search_sql(
            self.embedder.dim,
            scene=scene is not None,
            keyword=bool(terms),
            filters=tuple(name for name, _ in filter_items),
            candidates=max(40, top_k * 4),
            scan_limit=self.settings.keyword_scan_limit,
            keyword_candidates=bool(rare),
        )
        params: dict[str, Any] = {
            "ns": ns, "scene": scene and scene.strip(), "qvec": q.vector_literal(vector),
            "tsq": q.tsquery_literal(terms), "tsq_cand": q.tsquery_literal(rare),
            "top_k": top_k,
            "w_sem": self.settings.semantic_weight, "w_kw": self.settings.keyword_weight,
            "score_weight": self.settings.score_weight, **self._decay_params(self._now()),
        }
        for i, (_, value) in enumerate(filter_items):
            params[f"f{i}"] = value
        if timeout_ms is not None:
            yield Sql(q.SET_LOCAL_TIMEOUT, {"ms": str(int(timeout_ms))})
        rows = yield Sql(stmt, params, autocommit=ac)
        return [
            SearchHit(
                record=self._record(row),
                score=row["final"],
                breakdown=ScoreBreakdown(
                    semantic=row["semantic"], keyword=row["keyword"],
                    relevance=row["relevance"], decay=row["decayed_score"], final=row["final"],
                ),
            )
            for row in rows
        ]

    def _common_terms_flow(self, autocommit: bool = False) -> Flow[frozenset[str]]:
        """Terms too frequent to generate keyword candidates (cached for a minute)."""
        now = time.monotonic()
        if self._common_terms is not None and now - self._common_terms[0] < 60:
            return self._common_terms[1]
        rows = yield Sql(q.COMMON_TERMS, {"limit": self.settings.keyword_scan_limit},
                         autocommit=autocommit)
        terms = frozenset(r["term"] for r in rows)
        self._common_terms = (now, terms)
        return terms

    # ------------------------------------------------------------------ read

    def _get_flow(self, record_id: object, namespace: Namespace | str | None) -> Flow[Experience]:
        ns = self._ns(namespace)
        rid = parse_id(record_id)
        yield from self._ready_flow()
        rows = yield Sql(q.GET, {"ns": ns, "ids": [rid], **self._decay_params(self._now())})
        if not rows:
            raise NotFoundError(f"no record {rid} in namespace {self._show(ns)}")
        return self._record(rows[0])

    def _list_flow(
        self,
        namespace: Namespace | str | None,
        *,
        scene: str | None = None,
        archived: bool | None = False,
        order_by: str = "created_at",
        descending: bool = True,
        limit: int = 50,
        offset: int = 0,
        all_namespaces: bool = False,
    ) -> Flow[list[Experience]]:
        ns = None if all_namespaces else self._ns(namespace)
        if order_by not in q.SORTABLE:
            raise ValidationError(
                f"order_by must be one of {', '.join(q.SORTABLE)}; got {order_by!r}",
                field="order_by",
            )
        limit, offset = _check_page(limit, offset)
        yield from self._ready_flow()
        stmt = q.list_sql(
            order_by=order_by, descending=descending, scene=scene is not None,
            archived=archived, all_ns=all_namespaces,
        )
        rows = yield Sql(stmt, {
            "ns": ns, "scene": scene, "limit": limit, "offset": offset,
            **self._decay_params(self._now()),
        })
        return [self._record(r) for r in rows]

    # ------------------------------------------------------------------ feedback & curation

    def _mark_used_flow(
        self, record_id: object, helpful: bool, namespace: Namespace | str | None
    ) -> Flow[Experience]:
        ns = self._ns(namespace)
        rid = parse_id(record_id)
        if not isinstance(helpful, bool):
            raise ValidationError("helpful must be true or false", field="helpful")
        yield from self._ready_flow()
        now = self._now()
        stmt = q.MARK_HELPFUL if helpful else q.MARK_UNHELPFUL
        rows = yield Sql(stmt, {"ns": ns, "id": rid, "bonus": self.settings.use_bonus,
                                **self._decay_params(now)})
        if not rows:
            raise NotFoundError(f"no record {rid} in namespace {self._show(ns)}")
        yield from self._event(ns, rid, "used" if helpful else "unhelpful", now)
        return (yield from self._get_flow(rid, namespace))

    def _event(
        self, ns: str, rid: uuid.UUID | None, kind: str, now: Any,
        detail: dict[str, Any] | None = None,
    ) -> Flow[None]:
        yield Sql(q.INSERT_EVENT, {"ns": ns, "record_id": rid, "kind": kind, "now": now,
                                   "detail": json.dumps(detail or {})}, fetch="none")

    def _change_flow(
        self, record_id: object, kind: str, namespace: Namespace | str | None, **extra: Any
    ) -> Flow[Experience | None]:
        """forget / archive / restore / critical: one statement, one event."""
        ns = self._ns(namespace)
        rid = parse_id(record_id)
        yield from self._ready_flow()
        now = self._now()
        stmt = {"forget": q.DELETE, "archive": q.ARCHIVE, "restore": q.RESTORE,
                "critical": q.SET_CRITICAL}[kind]
        rows = yield Sql(stmt, {"ns": ns, "id": rid, "now": now, **extra})
        if not rows:
            exists = yield Sql(q.GET, {"ns": ns, "ids": [rid], **self._decay_params(now)})
            if not exists:
                raise NotFoundError(f"no record {rid} in namespace {self._show(ns)}")
            state = "archived" if kind == "archive" else "live"
            raise ValidationError(f"record {rid} is already {state}", field="id")
        yield from self._event(ns, rid, kind, now, extra or None)
        if kind == "forget":
            return None
        return (yield from self._get_flow(rid, namespace))

    def _curate_flow(
        self, record_id: object, kind: str, namespace: Namespace | str | None, **extra: Any
    ) -> Flow[Experience]:
        """archive / restore / critical, returning the changed record."""
        record = yield from self._change_flow(record_id, kind, namespace, **extra)
        assert record is not None  # only "forget" returns None
        return record

    def _edit_flow(
        self, record_id: object, changes: Mapping[str, Any], namespace: Namespace | str | None
    ) -> Flow[Experience]:
        """Change fields of a record; the embedding is recomputed."""
        allowed = {"scene", "trigger", "action", "outcome", "lesson", "importance", "critical"}
        unknown = set(changes) - allowed
        if unknown:
            raise ValidationError(
                f"{sorted(unknown)[0]}: cannot be edited (editable: {', '.join(sorted(allowed))})",
                field=sorted(unknown)[0],
            )
        current = yield from self._get_flow(record_id, namespace)
        merged = {k: getattr(current, k) for k in allowed} | dict(changes)
        (rec,) = self._parse_records([merged])
        self._warn_language([rec.lesson])
        (vector,) = yield Embed([embedding_text(rec)])
        now = self._now()
        yield Sql(q.EDIT, {
            "ns": self._ns(namespace), "id": current.id, "now": now, "scene": rec.scene,
            "trigger": rec.trigger, "action": rec.action, "outcome": rec.outcome,
            "lesson": rec.lesson, "importance": rec.importance, "critical": rec.critical,
            "embedding": q.vector_literal(vector),
            "search_tsv": q.tsvector_literal(tokens(search_document(rec.lesson, rec.trigger,
                                                                     rec.scene))),
        })
        yield from self._event(self._ns(namespace), current.id, "edited", now)
        return (yield from self._get_flow(current.id, namespace))

    def _merge_flow(
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
        ns = self._ns(namespace)
        ids = [parse_id(r, field=f"ids[{i}]") for i, r in enumerate(record_ids)]
        if len(set(ids)) < 2:
            raise ValidationError("merge needs at least two distinct record ids", field="ids")
        (rec,) = self._parse_records([into])
        yield from self._ready_flow()
        now = self._now()
        sources = yield Sql(q.GET, {"ns": ns, "ids": ids, **self._decay_params(now)})
        live = {r["id"]: r for r in sources if r["archived_at"] is None}
        missing = [str(i) for i in ids if i not in live]
        if missing:
            raise NotFoundError(
                f"cannot merge: no live record {', '.join(missing)} in namespace {self._show(ns)}"
            )
        (vector,) = yield Embed([embedding_text(rec)])
        new_id = self._new_id()
        yield Sql(q.INSERT, {
            "ns": ns, "id": new_id, "scene": rec.scene, "trigger": rec.trigger,
            "action": rec.action, "outcome": rec.outcome, "lesson": rec.lesson,
            "confidence": rec.confidence, "importance": rec.importance,
            "critical": rec.critical or any(r["critical"] for r in live.values()),
            "source": json.dumps(rec.source.model_dump(exclude_none=True)),
            "score": max(r["decayed_score"] for r in live.values()),
            "use_count": sum(r["use_count"] for r in live.values()),
            "occurrences": sum(r["occurrences"] for r in live.values()),
            "last_used_at": now, "created_at": now, "updated_at": now, "archived_at": None,
            "merged_into": None, "merged_from": ids, "embedding": q.vector_literal(vector),
            "search_tsv": q.tsvector_literal(tokens(search_document(rec.lesson, rec.trigger,
                                                                     rec.scene))),
        }, fetch="none")
        yield Sql(q.ARCHIVE_MERGED, {"ns": ns, "ids": ids, "into": new_id, "now": now})
        yield from self._event(ns, new_id, "merge", now, {"from": [str(i) for i in ids]})
        return (yield from self._get_flow(new_id, namespace))

    @staticmethod
    def _show(ns: str) -> str:
        return "(" + ", ".join(repr(p) for p in ns.split("\x1f")) + ")"


# ---------------------------------------------------------------------- argument checks


def _check_query(query: object) -> str:
    if not isinstance(query, str):
        raise ValidationError(f"query must be a string, got {type(query).__name__}", field="query")
    if "\x00" in query:
        raise ValidationError("query contains a NUL byte", field="query")
    query = query.strip()
    if not query:
        raise ValidationError("query is empty", field="query")
    if len(query) > MAX_QUERY_CHARS:
        raise ValidationError(
            f"query is {len(query)} characters; at most {MAX_QUERY_CHARS}", field="query"
        )
    return query


def _check_top_k(top_k: object) -> int:
    try:
        value = int(str(top_k)) if not isinstance(top_k, bool) else None
    except ValueError:
        value = None
    if value is None or not 1 <= value <= MAX_TOP_K:
        raise ValidationError(f"top_k must be an integer from 1 to {MAX_TOP_K}, got {top_k!r}",
                              field="top_k")
    return value


def _check_page(limit: object, offset: object) -> tuple[int, int]:
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 10_000:
        raise ValidationError(f"limit must be an integer from 1 to 10000, got {limit!r}",
                              field="limit")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise ValidationError(f"offset must be a non-negative integer, got {offset!r}",
                              field="offset")
    return limit, offset


def _check_filters(filters: Mapping[str, Any] | None) -> list[tuple[str, Any]]:
    if filters is None:
        return []
    if not isinstance(filters, Mapping):
        raise ValidationError("filters must be a mapping of field to value", field="filters")
    out = []
    for name in sorted(filters):
        if name not in q.FILTERABLE:
            raise ValidationError(
                f"filters.{name}: cannot filter on this field "
                f"(filterable: {', '.join(q.FILTERABLE)})",
                field=f"filters.{name}",
            )
        value = filters[name]
        kind = q.FILTERABLE[name][1]
        if kind == "bool" and not isinstance(value, bool):
            raise ValidationError(f"filters.{name} must be true or false", field=f"filters.{name}")
        if kind == "text" and (not isinstance(value, str) or "\x00" in value):
            raise ValidationError(f"filters.{name} must be a string", field=f"filters.{name}")
        out.append((name, value))
    return out


__all__ = ["RecordFlows", "embedding_text", "raise_validation"]
