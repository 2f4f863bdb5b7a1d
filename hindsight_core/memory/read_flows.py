"""Flows that read experience records: hybrid search, get by id, list a page."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter

from ..arguments import parse_id
from ..embeddings.profiles import covers
from ..errors import NotFoundError, ValidationError
from ..models import Experience, Namespace, SearchHit, ns_from_key, show_namespace
from ..runtime.flow import Flow, Sql
from ..storage import experiences_sql as q
from ..storage import fulltext_sql as fts
from ..storage import recall_sql, scan_sql, sharing_sql
from ..storage.vectors import vector_param
from ..text import tsquery_terms
from .base import MemoryBase
from .inputs import check_page, check_scene, check_search
from .scope import check_scope, read_set

# Semantic (and keyword) candidates per recall: at least this many, else 4 x top_k.
# 20 instead of 40 gave the same top 5 for all 299 benchmark queries at 100k records
# and 0.19 ms less per recall (0.94 -> 0.75 ms for the statement).
MIN_CANDIDATES = 20

_HITS = TypeAdapter(list[SearchHit])


class RecallFlows(MemoryBase):
    """Search, get and list experience records (flows; see ``runtime/flow.py``)."""

    # ------------------------------------------------------------------ search

    def _search_flow(
        self,
        query: str,
        namespace: Namespace | str | None,
        scene: str | None,
        top_k: int,
        filters: Mapping[str, Any] | None,
        timeout_ms: int | None = None,
        include_superseded: bool = False,
        namespaces: object = None,
    ) -> Flow[list[SearchHit]]:
        """Hybrid recall in ``namespace``, or across ``namespaces`` (``memory.scope``:
        one collection, ranked with the union's keyword statistics)."""
        scope = check_scope(namespace, namespaces)
        ns = None if scope is not None else self.namespace_key(namespace)
        query, scene, top_k, filter_items = check_search(query, scene, top_k, filters)
        yield from self.ready_flow()
        vector = yield from self._embed_one_query(query)
        terms = tsquery_terms(query)
        # Reads only: no transaction (saves BEGIN + COMMIT, and a transaction's pool
        # checkout and ping); a timeout bounds the search statement by itself.
        common = (yield from self._common_terms_flow(True)) if terms else {}
        rare = fts.rare_terms(terms, common)
        where: dict[str, Any] = {"ns": ns} if scope is None else scope.params()
        exact = yield from self._scan_choice.flow(
            (ns, scene) if scope is None else (scope, scene),
            scan_sql.recall_exact_scan_sql(scene is not None)
            if scope is None
            else sharing_sql.many_exact_scan_sql(scene is not None),
            {**where, "scene": scene},
            True,
            self.settings.semantic_scan,
        )
        stmt = recall_sql.search_sql(
            self.embedder.dim,
            scene=scene is not None,
            keyword=bool(terms),
            filters=tuple(name for name, _ in filter_items),
            candidates=max(MIN_CANDIDATES, top_k * 4),
            scan_limit=self.settings.keyword_scan_limit,
            keyword_candidates=bool(rare),
            min_relevance=self.settings.min_relevance > 0,
            exact=exact,
            many=scope is not None,
        )
        params: dict[str, Any] = {
            **where,
            "scene": scene,
            "qvec": vector_param(vector),
            "tsq_cand": fts.tsquery_literal(rare),
            **fts.bm25_params(terms, common, whole_query=covers(self.embedder.languages, query)),
            "top_k": top_k,
            "w_sem": self.settings.semantic_weight,
            "w_kw": self.keyword_weight,
            "score_weight": self.settings.score_weight,
            **self.decay_params(self.now()),
            "min_relevance": self.settings.min_relevance,
            "include_superseded": bool(include_superseded),  # docs/versions.md
        }
        for i, (_, value) in enumerate(filter_items):
            params[f"f{i}"] = value
        rows = yield from Sql(stmt, params, autocommit=True, timeout_ms=timeout_ms)
        scan = "exact" if exact else "index"
        # One validation for all hits (nested dicts): a third cheaper than building the
        # record and the breakdown as models first, and ~3 µs a hit cheaper than one
        # validation per hit.
        records = [self._record_fields(row) for row in rows]
        return _HITS.validate_python(
            [
                {
                    "record": record,
                    "namespace": record["namespace"],
                    "score": row["final"],
                    "breakdown": {
                        "semantic": row["semantic"],
                        "keyword": row["keyword"],
                        "relevance": row["relevance"],
                        "decay": row["decayed_score"],
                        "final": row["final"],
                        "scan": scan,
                    },
                }
                for row, record in zip(rows, records, strict=True)
            ]
        )

    def _read_key(self, namespace: Namespace | str | None, namespaces: object = None) -> str | None:
        """The session key a search's replica reads wait on: its namespace, or ``None``
        (every write) for a search across ``namespaces``."""
        return None if namespaces is not None else self.namespace_key(namespace)

    def _common_terms_flow(self, autocommit: bool = False) -> Flow[Mapping[str, float]]:
        """Terms too frequent to generate keyword candidates (cached for a minute)."""
        return (yield from self._common_terms.flow(self.settings.keyword_scan_limit, autocommit))

    # ------------------------------------------------------------------ read

    def _get_flow(self, record_id: object, namespace: Namespace | str | None) -> Flow[Experience]:
        ns = self.namespace_key(namespace)
        rid = parse_id(record_id)
        yield from self.ready_flow()
        rows = yield from Sql(q.GET, {"ns": ns, "ids": [rid], **self.decay_params(self.now())})
        if not rows:
            raise NotFoundError(f"no record {rid} in namespace {self._show(ns)}")
        return self._record(rows[0])

    def _locate_flow(self, record_id: object, namespaces: object) -> Flow[Namespace | None]:
        """Which namespace of ``namespaces`` (``memory.scope``: prefixes too) holds the
        record ``record_id`` (archived ones too); None when none does."""
        scope = read_set(namespaces)
        rid = parse_id(record_id)
        yield from self.ready_flow()
        rows = yield from Sql(sharing_sql.LOCATE, {**scope.params(), "id": rid}, autocommit=True)
        return ns_from_key(rows[0]["ns"]) if rows else None

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
        ns = None if all_namespaces else self.namespace_key(namespace)
        if order_by not in q.SORTABLE:
            raise ValidationError(
                f"order_by must be one of {', '.join(q.SORTABLE)}; got {order_by!r}",
                field="order_by",
            )
        limit, offset = check_page(limit, offset)
        scene = check_scene(scene)
        yield from self.ready_flow()
        stmt = q.list_sql(
            order_by=order_by,
            descending=descending,
            scene=scene is not None,
            archived=archived,
            all_ns=all_namespaces,
        )
        rows = yield from Sql(
            stmt,
            {
                "ns": ns,
                "scene": scene,
                "limit": limit,
                "offset": offset,
                **self.decay_params(self.now()),
            },
        )
        return [self._record(r) for r in rows]

    @staticmethod
    def _show(ns: str) -> str:
        return show_namespace(ns)


__all__ = ["RecallFlows"]
