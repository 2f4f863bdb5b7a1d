"""The batch flow for generic items, shared by :class:`Items` and :class:`AsyncItems`.

A batch runs in one transaction with LangGraph ``PostgresStore``'s semantics: all
reads (gets, then searches, then namespace listings) see the state before the batch;
then puts are applied, deduplicated per key (the last one wins, so put-then-delete
deletes). Texts to embed (put fields and search queries) are requested in one
``Embed`` before the transaction opens.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..embeddings import Embedder
from ..embeddings.profiles import covers, hub_correction, keyword_weight
from ..errors import ValidationError
from ..memory.scan import ScanChoice
from ..memory.terms import CommonTerms
from ..models import NS_SEPARATOR, Item, ItemHit, ScoreBreakdown, ns_from_key, ns_key
from ..runtime.flow import Embed, Flow, Migrate, Sql, Unit
from ..runtime.host import FlowContext
from ..storage import experiences_sql as eq
from ..storage import fulltext_sql as fts
from ..storage import items_search_sql as qs
from ..storage import items_sql as q
from ..storage import scan_sql
from ..storage.hybrid_params import hybrid_params
from ..storage.items_filters_sql import filter_params
from ..storage.vectors import vector_param
from ..text import tokens, tsquery_terms
from . import index_health
from .batch_plan import (
    get_params,
    namespace_pattern,
    plan_batch,
    put_statements,
    refresh_params,
    search_key,
)
from .batch_plan import parse_filter as parse_filter  # re-exported: items/__init__.py
from .ops import (
    GetItem,
    ItemIndex,
    ItemOp,
    ListNamespaces,
    Ranking,
    SearchItems,
    check_namespace,
)

Result = Item | ItemHit | list[ItemHit] | list[tuple[str, ...]] | None


def _item(row: dict[str, Any]) -> Item:
    return Item.model_construct(
        namespace=ns_from_key(row["ns"]),
        key=row["key"],
        value=row["value"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        expires_at=row["expires_at"],
    )


class ItemFlows(ABC):
    """Flows over items; the front ends supply configuration and run them."""

    index: ItemIndex | None
    ranking: Ranking
    omit_expired: bool
    _ready: bool
    _terms: CommonTerms | None = None  # common search terms of item vectors (cached)
    _scan_choice: ScanChoice  # exact scan or ANN index, per namespace prefix (cached)

    memory: FlowContext  # the host: settings and clock (runtime/host.py)

    @property
    @abstractmethod
    def embedder(self) -> Embedder:
        """The embedder of item fields and queries."""

    # ------------------------------------------------------------------ set-up

    def _ready_flow(self) -> Flow[None]:
        if self._ready:
            return
        yield Migrate()
        if self.index is not None:
            # Its own committed unit: ready only once the index is there for good.
            yield Unit(self._index_flow())
        self._ready = True

    def _index_flow(self) -> Flow[None]:
        assert self.index is not None
        spec = self.index.spec
        yield Sql(eq.LOCK_META)
        yield Sql(
            eq.SET_META,
            {
                "key": "items_index",
                "value": json.dumps(
                    {
                        "dims": spec.dims,
                        "distance": spec.distance,
                        "vector_type": spec.vector_type,
                        "kind": spec.kind,
                        "fields": list(self.index.fields),
                    }
                ),
            },
            fetch="none",
        )
        create = q.ensure_index_sql(spec)
        if create is not None:
            exists = yield from Sql(q.INDEX_EXISTS, {"name": spec.index_name})
            if not exists:
                yield Sql(create, fetch="none")
                yield from index_health.record_build_flow(spec.index_name, self.memory.now())
            elif spec.kind == "ivfflat":
                yield from index_health.warn_if_stale_flow(spec.index_name)

    # ------------------------------------------------------------------ batch

    def _batch_flow(
        self, ops: Sequence[ItemOp], refresh_later: list[Any] | None = None
    ) -> Flow[list[Result]]:
        """Run ``ops``; ``refresh_later`` (reads on a replica): the TTL refresh is not
        run but appended to it, as a flow for the primary."""
        plan = plan_batch(ops, self.index)
        ac = plan.autocommit
        yield from self._ready_flow()
        # Queries and stored fields are embedded apart (e5-style models prefix each side).
        qvectors = (yield from Embed(plan.queries, query=True)) if plan.queries else []
        fvectors = (yield from Embed([f[3] for f in plan.fields])) if plan.fields else []
        now = self.memory.now()
        results: list[Result] = [None] * len(ops)
        refresh: dict[tuple[str, str], None] = {}

        if plan.gets:
            yield from self._gets(plan.gets, now, ac, results, refresh)
        # Identical reads in one batch run once, and share one result list (as in
        # LangGraph's batched stores): 2,000 identical searches of a batch each built
        # their own hits, and the garbage collector traced them all.
        seen: dict[Any, Any] = {}
        for i, op in plan.searches:
            sig = search_key(op)
            if sig not in seen:
                qvec = qvectors[plan.query_of[i]] if i in plan.query_of else None
                hits = yield from self._search(op, qvec, now, ac)
                seen[sig] = (hits, [hit for hit, _ in hits])
            hits, results[i] = seen[sig]
            if op.refresh_ttl:
                refresh.update((_key(hit), None) for hit, ttl in hits if ttl is not None)
        for i, listing in plan.lists:
            if listing not in seen:
                seen[listing] = yield from self._list_namespaces(listing, now, ac)
            results[i] = seen[listing]
        puts = put_statements(plan.puts, plan.fields, fvectors, now, self.index is not None)
        for stmt, params in puts:
            yield Sql(stmt, params, fetch="none", autocommit=ac)
        if refresh:  # last: it never waits, so it cannot take part in a deadlock
            req = Sql(q.REFRESH, refresh_params(list(refresh), now), fetch="none", autocommit=ac)
            if refresh_later is None:
                yield req
            else:
                refresh_later.append(req)
        return results

    def _gets(
        self,
        gets: Sequence[tuple[int, GetItem]],
        now: datetime,
        ac: bool,
        results: list[Result],
        refresh: dict[tuple[str, str], None],
    ) -> Flow[None]:
        """The batch's gets in one statement: each item into ``results`` at its get's
        place, those to extend into ``refresh``."""
        rows = yield from Sql(q.GET_MANY, get_params(gets), autocommit=ac)
        for row in rows:
            i, op = gets[row["idx"] - 1]
            if self.omit_expired and _expired(row, now):
                continue
            results[i] = _item(row)
            if op.refresh_ttl and row["ttl_minutes"] is not None:
                refresh[(row["ns"], row["key"])] = None

    def _search(
        self, op: SearchItems, qvec: list[float] | None, now: datetime, ac: bool
    ) -> Flow[list[tuple[ItemHit, float | None]]]:
        prefix = check_namespace(op.namespace_prefix, allow_empty=True)
        spec_f, values = parse_filter(op.filter)
        params: dict[str, Any] = {
            "limit": op.limit,
            "offset": op.offset,
            "now": now,
            **qs.prefix_params(ns_key(prefix)),
            **filter_params(spec_f, values),
        }
        if op.limit == 0:
            return []
        if qvec is None or self.index is None:
            rows = yield from Sql(
                qs.list_sql(len(prefix), spec_f, self.omit_expired), params, autocommit=ac
            )
            return [
                (
                    ItemHit.model_construct(item=_item(r), score=None, breakdown=None),
                    r["ttl_minutes"],
                )
                for r in rows
            ]
        spec = self.index.spec
        ranking = op.ranking or self.ranking
        params["qvec"] = vector_param(qvec)
        n_fields = max(1, len(self.index.fields))
        settings = self.memory.settings
        exact = yield from self._scan_choice.flow(
            ns_key(prefix),
            scan_sql.items_exact_scan_sql(len(prefix)),
            qs.prefix_params(ns_key(prefix)),
            ac,
            settings.semantic_scan,
        )
        if ranking == "vector":
            params["cand"] = (op.limit + op.offset) * n_fields * 2 + 1
            rows = yield from Sql(
                qs.vector_search_sql(spec, len(prefix), spec_f, self.omit_expired, exact),
                params,
                autocommit=ac,
            )
            return [
                (
                    ItemHit.model_construct(item=_item(r), score=float(r["score"]), breakdown=None),
                    r["ttl_minutes"],
                )
                for r in rows
            ]
        terms = tsquery_terms(op.query or "")
        if self._terms is None:
            self._terms = CommonTerms(q.V)
        common = (yield from self._terms.flow(settings.keyword_scan_limit, ac)) if terms else {}
        rare = fts.rare_terms(terms, common)
        w_hub = hub_correction(settings, self.embedder)
        params.update(
            {
                "cand": max(40, (op.limit + op.offset) * n_fields * 4),
                # An item whose field is the query's text has this many terms.
                "kw_qlen": len(set(tokens(op.query or ""))),
                **hybrid_params(
                    settings,
                    terms=terms,
                    common=common,
                    # exact: candidates from each of the prefix's rows (hybrid_search_sql)
                    candidates=terms if exact else rare,
                    whole_query=covers(self.embedder.languages, op.query or ""),
                    keyword_weight=keyword_weight(settings, self.embedder),
                    now=now,
                    labels=True,
                ),
                "w_hub": w_hub,  # items only: storage/items_search_sql.py, ``hub``
            }
        )
        stmt = qs.hybrid_search_sql(
            spec,
            len(prefix),
            spec_f,
            self.omit_expired,
            bool(terms),
            bool(terms if exact else rare),
            settings.keyword_scan_limit,
            exact,
            w_hub > 0,
        )
        rows = yield from Sql(stmt, params, autocommit=ac)
        # A "flat" index is no index: its search is an exact scan either way.
        scan = "exact" if exact or spec.kind == "flat" else "index"
        return [
            (
                ItemHit.model_construct(
                    item=_item(r),
                    score=float(r["final"]),
                    breakdown=ScoreBreakdown.model_construct(
                        semantic=float(r["semantic"]),
                        keyword=float(r["keyword"]),
                        relevance=float(r["relevance"]),
                        decay=float(r["decay"]),
                        final=float(r["final"]),
                        scan=scan,
                    ),
                ),
                r["ttl_minutes"],
            )
            for r in rows
        ]

    def _list_namespaces(
        self, op: ListNamespaces, now: datetime, ac: bool
    ) -> Flow[list[tuple[str, ...]]]:
        conditions = [(kind, tuple(labels)) for kind, labels in op.conditions if labels]
        for kind, _ in conditions:
            if kind not in ("prefix", "suffix"):
                raise ValidationError(f"unknown match type {kind!r}", field="match_type")
        if op.max_depth is not None and (not isinstance(op.max_depth, int) or op.max_depth < 1):
            raise ValidationError(
                f"max_depth must be a positive integer, got {op.max_depth!r}", field="max_depth"
            )
        params: dict[str, Any] = {
            "limit": op.limit,
            "offset": op.offset,
            "now": now,
            "sep": NS_SEPARATOR,
            **qs.namespace_range(conditions),
        }
        for i, (kind, labels) in enumerate(conditions):
            params[f"re{i}"] = namespace_pattern(labels, kind)
        stmt = qs.list_namespaces_sql(len(conditions), op.max_depth, self.omit_expired)
        rows = yield from Sql(stmt, params, autocommit=ac)
        return [ns_from_key(r["ns"]) for r in rows]

    def _sweep_flow(self) -> Flow[int]:
        yield from self._ready_flow()
        return (yield from sweep_flow(self.memory.now()))

    def _health_flow(self) -> Flow[list[index_health.IndexHealth]]:
        yield from self._ready_flow()
        return (yield from index_health.health_flow())

    def _rebuild_flow(self, force: bool) -> Flow[list[index_health.IndexHealth]]:
        yield from self._ready_flow()
        return (yield from index_health.rebuild_flow(self.memory.now(), force))


def sweep_flow(now: datetime) -> Flow[int]:
    """Delete the items expired at ``now``; how many. In statements of
    ``items_sql.SWEEP_CHUNK`` keys, each committed by itself (autocommit: the key
    locks of one chunk are released before the next), never waiting for a key; the
    keys one left (a writer held them) are left out of the next ones."""
    skip: dict[str, list[str]] = {"skip_ns": [], "skip_keys": []}
    deleted = 0
    while True:
        params = {"now": now, "limit": q.SWEEP_CHUNK, **skip}
        (row,) = yield from Sql(q.SWEEP, params, autocommit=True)
        deleted += int(row["n"])
        if row["seen"] < q.SWEEP_CHUNK:
            return deleted
        skip = {k: skip[k] + list(row[k]) for k in skip}


def _key(hit: ItemHit) -> tuple[str, str]:
    return ns_key(hit.item.namespace), hit.item.key


def _expired(row: dict[str, Any], now: datetime) -> bool:
    return row["expires_at"] is not None and row["expires_at"] <= now
