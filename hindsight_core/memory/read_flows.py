"""Flows that read experience records: hybrid search, get by id, list a page."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import TypeAdapter

from ..arguments import parse_id
from ..embeddings.profiles import covers
from ..errors import HindsightError, NotFoundError, ValidationError
from ..models import Experience, Namespace, SearchHit, ns_from_key, show_namespace
from ..runtime.flow import Flow, MakeFlow, Sql
from ..runtime.runner import Call, Read, Vectors
from ..storage import experiences_sql as q
from ..storage import fulltext_sql as fts
from ..storage import recall_sql, scan_sql, sharing_sql
from ..storage.hybrid_params import recall_params
from ..text import tsquery_terms
from .base import MemoryBase
from .inputs import check_page, check_scene, check_search
from .results import RecallResult, degraded
from .scope import check_scope, read_set

# Semantic (and keyword) candidates per recall: at least this many, else 4 x top_k.
# 20 instead of 40 gave the same top 5 for all 299 benchmark queries at 100k records,
# with a cheaper statement (fewer candidates scored).
MIN_CANDIDATES = 20

_HITS = TypeAdapter(list[SearchHit])


class RecallFlows(MemoryBase):
    """Search, get and list experience records (flows; see ``runtime/flow.py``)."""

    # ------------------------------------------------------------------ search

    def _recall_call(
        self,
        query: str,
        namespace: Namespace | str | None,
        scene: str | None,
        top_k: int,
        namespaces: object = None,
    ) -> Call[RecallResult]:
        """``recall``: a search bounded by ``settings.recall_timeout`` that never fails
        the agent: a database or embedding error, or the timeout, is no hits and a
        warning (``results.degraded``); a bad argument is its own error."""
        # a bad argument is not degraded to "no hits"
        check_search(query, scene, top_k, namespace=namespace, namespaces=namespaces)
        timeout = self.settings.recall_timeout
        key = self._read_key(namespace, namespaces)
        try:
            if not self._model_loaded and isinstance(query, str) and query.strip():
                # Loading a local model takes seconds: the first recall of a process
                # embeds its query outside the bound (the flow then finds it cached),
                # or it would always come back empty.
                self._cache_query(query, (yield from Vectors([query], query=True)))
                self._model_loaded = True
            hits = yield from Read(
                lambda: self._search_flow(
                    query, namespace, scene, top_k, None, int(timeout * 1000), namespaces=namespaces
                ),
                key,
                within=timeout,
            )
            return RecallResult(hits=hits)
        except ValidationError:
            raise
        except (HindsightError, TimeoutError) as exc:
            return degraded(exc)

    def _search_read(
        self,
        query: str,
        namespace: Namespace | str | None,
        namespaces: object,
        scene: str | None,
        top_k: int,
        filters: Mapping[str, Any] | None,
        include_superseded: bool,
    ) -> tuple[MakeFlow[list[SearchHit]], str | None]:
        """``search``'s read for either front end's ``runner.run_read``: the maker of
        its flow and the session key it reads after. The arguments are checked here,
        before connecting (``inputs.check_search``)."""
        check_search(query, scene, top_k, filters, namespace=namespace, namespaces=namespaces)

        def make() -> Flow[list[SearchHit]]:
            return self._search_flow(
                query,
                namespace,
                scene,
                top_k,
                filters,
                include_superseded=include_superseded,
                namespaces=namespaces,
            )

        return make, self._read_key(namespace, namespaces)

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
        params = recall_params(
            self.settings,
            ns=ns,
            scene=scene,
            vector=vector,
            terms=terms,
            common=common,
            rare=rare,
            whole_query=covers(self.embedder.languages, query),
            keyword_weight=self.keyword_weight,
            top_k=top_k,
            now=self.now(),
            filters=[value for _, value in filter_items],
            include_superseded=include_superseded,
            read_set=None if scope is None else where,
        )
        rows = yield from Sql(stmt, params, autocommit=True, timeout_ms=timeout_ms)
        scan = "exact" if exact else "index"
        # One validation for all hits (nested dicts): a third cheaper than building the
        # record and the breakdown as models first, and cheaper again than one
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

    def _list_read(
        self, namespace: Namespace | str | None, options: Mapping[str, Any]
    ) -> tuple[MakeFlow[list[Experience]], str | None]:
        """``list_records``' read for either front end's ``runner.run_read``: the maker
        of its flow and the session key it reads after (every write's, ``None``, for
        ``all_namespaces``)."""
        key = None if options.get("all_namespaces") else self.namespace_key(namespace)
        return (lambda: self._list_flow(namespace, **options)), key

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
