"""The batch flow for generic items, shared by :class:`Items` and :class:`AsyncItems`.

A batch runs in one transaction with LangGraph ``PostgresStore``'s semantics: all
reads (gets, then searches, then namespace listings) see the state before the batch;
then puts are applied, deduplicated per key (the last one wins, so put-then-delete
deletes). Texts to embed (put fields and search queries) are requested in one
``Embed`` before the transaction opens.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ..errors import ValidationError
from ..models import Item, ItemHit, ScoreBreakdown, ns_from_key, ns_key
from ..runtime.flow import Embed, Migrate, Sql, Unit
from ..runtime.scan import ScanChoice
from ..runtime.terms import CommonTerms
from ..storage import experiences_sql as eq
from ..storage import fulltext_sql as fts
from ..storage import items_sql as q
from ..storage import scan_sql
from ..storage.items_filters_sql import FilterSpec, filter_params
from ..storage.vectors import vector_param, vectors_param
from ..text import tokens, tsquery_terms
from .ops import (
    GetItem,
    ItemIndex,
    ItemOp,
    ListNamespaces,
    PutItem,
    Ranking,
    SearchItems,
    check_namespace,
    check_page,
    check_ttl,
    dump_value,
)
from .paths import field_texts

_OPS = frozenset(("$eq", "$ne", "$gt", "$gte", "$lt", "$lte"))
Result = Item | ItemHit | list[ItemHit] | list[tuple[str, ...]] | None


def _item(row: dict[str, Any]) -> Item:
    return Item.model_construct(
        namespace=ns_from_key(row["ns"]), key=row["key"], value=row["value"],
        created_at=row["created_at"], updated_at=row["updated_at"], expires_at=row["expires_at"],
    )


def parse_filter(flt: Any) -> tuple[FilterSpec, list[Any]]:
    """Validate a filter: ``{key: value}`` or ``{key: {"$op": value, ...}}``, AND-ed."""
    if flt is None:
        return (), []
    if not isinstance(flt, dict):
        raise ValidationError("filter must be a mapping", field="filter")
    spec: list[tuple[str, Any, str]] = []
    values: list[Any] = []
    for key, cond in flt.items():
        if not isinstance(key, str) or not key:
            raise ValidationError(f"filter key must be a non-empty string, got {key!r}",
                                  field="filter")
        pairs = (cond.items() if isinstance(cond, dict) and cond
                 and all(isinstance(k, str) and k.startswith("$") for k in cond)
                 else [("$eq", cond)])
        for op, value in pairs:
            if op not in _OPS:
                raise ValidationError(f"Unsupported operator: {op}", field=f"filter.{key}")
            kind = "json"
            if op not in ("$eq", "$ne"):
                if isinstance(value, int | float) and not isinstance(value, bool):
                    kind = "number"
                elif isinstance(value, str):
                    kind = "text"
            spec.append((key, op, kind))
            values.append(value)
    return tuple(spec), values


def _pattern(labels: tuple[str, ...], kind: str) -> str:
    body = q.SEP.join("[^\x1f]+" if lab == "*" else re.escape(lab) for lab in labels)
    return f"^{body}(\x1f|$)" if kind == "prefix" else f"(^|\x1f){body}$"


class ItemFlows:
    """Flows over items; the front ends supply configuration and run them."""

    index: ItemIndex | None
    ranking: Ranking
    omit_expired: bool
    _ready: bool
    _terms: CommonTerms | None = None  # common search terms of item vectors (cached)
    _scan_choice: ScanChoice  # exact scan or ANN index, per namespace prefix (cached)

    def _now(self) -> datetime:  # pragma: no cover - provided by the front end
        raise NotImplementedError

    def _settings(self) -> Any:  # pragma: no cover - provided by the front end
        raise NotImplementedError

    # ------------------------------------------------------------------ set-up

    def _ready_flow(self) -> Any:
        if self._ready:
            return
        yield Migrate()
        if self.index is not None:
            # Its own committed unit: ready only once the index is there for good.
            yield Unit(self._index_flow())
        self._ready = True

    def _index_flow(self) -> Any:
        assert self.index is not None
        spec = self.index.spec
        yield Sql(eq.LOCK_META)
        yield Sql(eq.SET_META, {"key": "items_index", "value": json.dumps({
            "dims": spec.dims, "distance": spec.distance, "vector_type": spec.vector_type,
            "kind": spec.kind, "fields": list(self.index.fields),
        })}, fetch="none")
        create = q.ensure_index_sql(spec)
        if create is not None:
            exists = yield Sql(q.INDEX_EXISTS, {"name": spec.index_name})
            if not exists:
                yield Sql(create, fetch="none")

    # ------------------------------------------------------------------ batch

    def _batch_flow(self, ops: Sequence[ItemOp], refresh_later: list[Any] | None = None
                    ) -> Any:
        """Run ``ops``; ``refresh_later`` (reads on a replica): the TTL refresh is not
        run but appended to it, as a flow for the primary."""
        gets: list[tuple[int, GetItem]] = []
        searches: list[tuple[int, SearchItems]] = []
        lists: list[tuple[int, ListNamespaces]] = []
        puts: dict[tuple[str, str], tuple[PutItem, float | None]] = {}
        for i, op in enumerate(ops):
            if isinstance(op, GetItem):
                check_namespace(op.namespace)
                gets.append((i, op))
            elif isinstance(op, SearchItems):
                check_namespace(op.namespace_prefix, field="namespace_prefix", allow_empty=True)
                check_page(op.limit, op.offset)
                parse_filter(op.filter)
                searches.append((i, op))
            elif isinstance(op, ListNamespaces):
                for _, labels in op.conditions:
                    check_namespace(labels, field="match condition", allow_empty=True)
                check_page(op.limit, op.offset)
                lists.append((i, op))
            elif isinstance(op, PutItem):
                ns = ns_key(check_namespace(op.namespace))
                ttl = check_ttl(op.ttl)
                if op.value is not None:
                    dump_value(op.value, op.key)
                puts.pop((ns, op.key), None)
                puts[(ns, op.key)] = (op, ttl)
            else:
                raise ValidationError(f"unknown operation {type(op).__name__}", field="ops")

        # Texts to embed: search queries first, then put fields.
        texts: list[str] = []
        queries = {}
        if self.index is not None:
            for i, op in searches:
                if op.query:
                    queries[i] = len(texts)
                    texts.append(op.query)
        fields: list[tuple[str, str, str, str]] = []  # ns, key, field, text
        if self.index is not None:
            for (ns, key), (op, _) in puts.items():
                if op.value is None or op.index is False:
                    continue
                paths = self.index.fields if op.index is None else tuple(op.index)
                fields.extend((ns, key, f, t) for f, t in field_texts(op.value, paths))
        # Statements that each form a whole unit of work run without a transaction (no
        # BEGIN/COMMIT round trips): reads, then at most one write statement, then the
        # best-effort TTL refresh. Deletes plus upserts take two statements: one transaction.
        ac = not (any(op.value is None for op, _ in puts.values())
                  and any(op.value is not None for op, _ in puts.values()))
        yield from self._ready_flow()
        # Queries and stored fields are embedded apart (e5-style models prefix each side).
        qvectors = (yield Embed(texts, query=True)) if texts else []
        fvectors = (yield Embed([f[3] for f in fields])) if fields else []
        now = self._now()
        results: list[Result] = [None] * len(ops)
        refresh: dict[tuple[str, str], None] = {}

        if gets:
            rows = yield Sql(q.GET_MANY, {"ns": [ns_key(op.namespace) for _, op in gets],
                                          "keys": [op.key for _, op in gets]}, autocommit=ac)
            for row in rows:
                i, op = gets[row["idx"] - 1]
                if self.omit_expired and _expired(row, now):
                    continue
                results[i] = _item(row)
                if op.refresh_ttl and row["ttl_minutes"] is not None:
                    refresh[(row["ns"], row["key"])] = None
        # Identical reads in one batch run once, and share one result list (as in
        # LangGraph's batched stores): 2,000 identical searches of a batch each built
        # their own hits, and the garbage collector traced them all.
        seen: dict[Any, Any] = {}
        for i, op in searches:
            sig = _search_key(op)
            if sig not in seen:
                qvec = qvectors[queries[i]] if i in queries else None
                hits = yield from self._search(op, qvec, now, ac)
                seen[sig] = (hits, [hit for hit, _ in hits])
            hits, results[i] = seen[sig]
            if op.refresh_ttl:
                for hit, ttl in hits:
                    if ttl is not None:
                        refresh[(ns_key(hit.item.namespace), hit.item.key)] = None
        for i, op in lists:
            if op not in seen:
                seen[op] = yield from self._list_namespaces(op, now, ac)
            results[i] = seen[op]
        if puts:
            yield from self._apply_puts(puts, fields, fvectors, now, ac)
        if refresh:  # last: it never waits, so it cannot take part in a deadlock
            stmt = Sql(q.REFRESH, {"now": now, "ns": [k[0] for k in refresh],
                                   "keys": [k[1] for k in refresh]}, fetch="none", autocommit=ac)
            if refresh_later is None:
                yield stmt
            else:
                refresh_later.append(stmt)
        return results

    def _search(self, op: SearchItems, qvec: list[float] | None, now: datetime, ac: bool
                ) -> Any:
        prefix = check_namespace(op.namespace_prefix, allow_empty=True)
        spec_f, values = parse_filter(op.filter)
        params: dict[str, Any] = {
            "limit": op.limit, "offset": op.offset, "now": now,
            **q.prefix_params(ns_key(prefix)), **filter_params(spec_f, values),
        }
        if op.limit == 0:
            return []
        if qvec is None or self.index is None:
            rows = yield Sql(q.list_sql(len(prefix), spec_f, self.omit_expired), params,
                             autocommit=ac)
            return [(ItemHit.model_construct(item=_item(r), score=None, breakdown=None),
                     r["ttl_minutes"]) for r in rows]
        spec = self.index.spec
        ranking = op.ranking or self.ranking
        params["qvec"] = vector_param(qvec)
        n_fields = max(1, len(self.index.fields))
        if ranking == "vector":
            params["cand"] = (op.limit + op.offset) * n_fields * 2 + 1
            rows = yield Sql(q.vector_search_sql(spec, len(prefix), spec_f, self.omit_expired),
                             params, autocommit=ac)
            return [(ItemHit.model_construct(item=_item(r), score=float(r["score"]),
                                             breakdown=None), r["ttl_minutes"]) for r in rows]
        terms = tsquery_terms(op.query or "")
        settings = self._settings()
        if self._terms is None:
            self._terms = CommonTerms(q.V)
        common = (yield from self._terms.flow(settings.keyword_scan_limit, ac)) if terms else {}
        rare = [t for t in terms if t not in common]
        params.update({
            "cand": max(40, (op.limit + op.offset) * n_fields * 4),
            "tsq_cand": fts.tsquery_literal(rare), **fts.bm25_params(terms, common),
            "w_sem": settings.semantic_weight, "w_kw": settings.keyword_weight,
            "score_weight": settings.score_weight, "min_relevance": settings.min_relevance,
            **eq.params_for_decay(settings, now),
        })
        exact = yield from self._scan_choice.flow(
            ns_key(prefix), scan_sql.items_exact_scan_sql(len(prefix)),
            q.prefix_params(ns_key(prefix)), ac)
        stmt = q.hybrid_search_sql(spec, len(prefix), spec_f, self.omit_expired, bool(terms),
                                   bool(rare), settings.keyword_scan_limit, exact)
        rows = yield Sql(stmt, params, autocommit=ac)
        return [(ItemHit.model_construct(
            item=_item(r), score=float(r["final"]),
            breakdown=ScoreBreakdown.model_construct(
                semantic=float(r["semantic"]), keyword=float(r["keyword"]),
                relevance=float(r["relevance"]), decay=float(r["decay"]),
                final=float(r["final"]))), r["ttl_minutes"]) for r in rows]

    def _list_namespaces(self, op: ListNamespaces, now: datetime, ac: bool) -> Any:
        conditions = [(kind, tuple(labels)) for kind, labels in op.conditions if labels]
        for kind, _ in conditions:
            if kind not in ("prefix", "suffix"):
                raise ValidationError(f"unknown match type {kind!r}", field="match_type")
        if op.max_depth is not None and (not isinstance(op.max_depth, int) or op.max_depth < 1):
            raise ValidationError(f"max_depth must be a positive integer, got {op.max_depth!r}",
                                  field="max_depth")
        params: dict[str, Any] = {"limit": op.limit, "offset": op.offset, "now": now,
                                  "sep": q.SEP, **q.namespace_range(conditions)}
        for i, (kind, labels) in enumerate(conditions):
            params[f"re{i}"] = _pattern(labels, kind)
        rows = yield Sql(q.list_namespaces_sql(len(conditions), op.max_depth, self.omit_expired),
                         params, autocommit=ac)
        return [ns_from_key(r["ns"]) for r in rows]

    def _apply_puts(self, puts: dict[tuple[str, str], tuple[PutItem, float | None]],
                    fields: list[tuple[str, str, str, str]], vectors: list[list[float]],
                    now: datetime, ac: bool) -> Any:
        keys = sorted(puts)
        lock = {"lk_ns": [k[0] for k in keys], "lk_keys": [k[1] for k in keys]}
        deletes = [k for k, (op, _) in puts.items() if op.value is None]
        upserts = [(k, op, ttl) for k, (op, ttl) in puts.items() if op.value is not None]
        if deletes:
            yield Sql(q.delete_many_sql(True), {"ns": [k[0] for k in deletes],
                                                "keys": [k[1] for k in deletes], **lock},
                      fetch="none", autocommit=ac)
        if upserts:
            yield Sql(q.upsert_sql(not deletes), {
                **({} if deletes else lock),
                "now": now,
                "ns": [k[0] for k, _, _ in upserts], "keys": [k[1] for k, _, _ in upserts],
                "vals": [dump_value(op.value, op.key) for _, op, _ in upserts],
                "expires": [None if ttl is None else now + timedelta(minutes=ttl)
                            for _, _, ttl in upserts],
                "ttls": [ttl for _, _, ttl in upserts],
                "v_ns": [f[0] for f in fields], "v_keys": [f[1] for f in fields],
                "v_fields": [f[2] for f in fields],
                "v_embs": vectors_param(vectors), "v_dim": len(vectors[0]) if vectors else 0,
                "v_tsv": [fts.tsvector_literal(tokens(f[3])) for f in fields],
                "r_ns": [k[0] for k, _, _ in upserts], "r_keys": [k[1] for k, _, _ in upserts],
            }, fetch="none", autocommit=ac)

    def _sweep_flow(self) -> Any:
        yield from self._ready_flow()
        rows = yield Sql(q.SWEEP, {"now": self._now()}, autocommit=True)
        return int(rows[0]["n"])


def _search_key(op: SearchItems) -> Any:
    flt = json.dumps(op.filter, sort_keys=True, default=str) if op.filter else None
    return (tuple(op.namespace_prefix), op.query, flt, op.limit, op.offset, op.ranking)


def _expired(row: dict[str, Any], now: datetime) -> bool:
    return row["expires_at"] is not None and row["expires_at"] <= now
