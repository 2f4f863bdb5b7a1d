"""What an item batch does, decided without a database: the plan and its parameters.

:func:`plan_batch` validates a batch's operations and groups them as the batch runs
them (gets, searches, namespace listings, then the puts, one per key, the last
winning); it lists the texts to embed and says whether the batch can run without a
transaction. The builders turn the plan into statement parameters:
:func:`put_statements` (deletes before upserts, key locks on the first),
:func:`get_params`, :func:`refresh_params`, :func:`namespace_pattern`. The flow in
``flows.py`` only embeds, runs the reads and yields.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from ..errors import ValidationError
from ..models import NS_SEPARATOR, ns_key
from ..storage import fulltext_sql as fts
from ..storage import items_sql as q
from ..storage.items_filters_sql import FilterSpec
from ..storage.vectors import vectors_param
from ..text import tokens
from .ops import (
    GetItem,
    ItemIndex,
    ItemOp,
    ListNamespaces,
    PutItem,
    SearchItems,
    check_namespace,
    check_page,
    check_ttl,
    dump_value,
    namespace_key,
)
from .paths import indexed_fields

_OPS = frozenset(("$eq", "$ne", "$gt", "$gte", "$lt", "$lte"))
Key = tuple[str, str]
"""An item's ``(namespace key, key)``."""
Field = tuple[str, str, str, str, frozenset[str]]
"""A text to embed for an item: ``(namespace key, key, field path, text, labels)``, the
labels the search tokens its keyword index marks (``paths.labels``)."""


@dataclass
class BatchPlan:
    """A validated batch, grouped as it runs.

    Attributes:
        gets, searches, lists: the reads, each with its position in the batch.
        puts: per item, the last put or delete of the batch and its TTL in minutes.
        queries: texts to embed as search queries (``query_of`` maps a search's
            position in the batch to its text here).
        fields: texts to embed for the puts' indexed fields.
    """

    gets: list[tuple[int, GetItem]] = field(default_factory=list)
    searches: list[tuple[int, SearchItems]] = field(default_factory=list)
    lists: list[tuple[int, ListNamespaces]] = field(default_factory=list)
    puts: dict[Key, tuple[PutItem, float | None]] = field(default_factory=dict)
    queries: list[str] = field(default_factory=list)
    query_of: dict[int, int] = field(default_factory=dict)
    fields: list[Field] = field(default_factory=list)

    @property
    def autocommit(self) -> bool:
        """Whether each statement may commit by itself (no BEGIN/COMMIT round trips).

        Reads, then at most one write statement, then the best-effort TTL refresh are
        each a whole unit of work; deletes plus upserts take two statements, so one
        transaction.
        """
        deletes = any(op.value is None for op, _ in self.puts.values())
        upserts = any(op.value is not None for op, _ in self.puts.values())
        return not (deletes and upserts)


def plan_batch(ops: Sequence[ItemOp], index: ItemIndex | None) -> BatchPlan:
    """Validate ``ops`` and group them; with an ``index``, list the texts to embed.

    Raises:
        ValidationError: an operation is malformed (nothing has run).
    """
    plan = BatchPlan()
    for i, op in enumerate(ops):
        _add(plan, i, op)
    if index is not None:
        _texts_to_embed(plan, index)
    return plan


def _add(plan: BatchPlan, i: int, op: ItemOp) -> None:
    """Check operation ``i`` and put it in its group."""
    if isinstance(op, PutItem):  # first: most of a batch (a put of each call, kept)
        item = (namespace_key(op.namespace), op.key)
        ttl = check_ttl(op.ttl)
        if op.value is not None:
            dump_value(op.value, op.key)
        plan.puts.pop(item, None)  # the last one wins, in the batch's order
        plan.puts[item] = (op, ttl)
    elif isinstance(op, GetItem):
        namespace_key(op.namespace)
        plan.gets.append((i, op))
    elif isinstance(op, SearchItems):
        check_namespace(op.namespace_prefix, field="namespace_prefix", allow_empty=True)
        check_page(op.limit, op.offset)
        parse_filter(op.filter)
        plan.searches.append((i, op))
    elif isinstance(op, ListNamespaces):
        for _, labels in op.conditions:
            check_namespace(labels, field="match condition", allow_empty=True)
        check_page(op.limit, op.offset)
        plan.lists.append((i, op))
    else:
        raise ValidationError(f"unknown operation {type(op).__name__}", field="ops")


def _texts_to_embed(plan: BatchPlan, index: ItemIndex) -> None:
    """The search queries, then the puts' indexed fields."""
    for i, search in plan.searches:
        if search.query:
            plan.query_of[i] = len(plan.queries)
            plan.queries.append(search.query)
    for (ns, key), (put, _) in plan.puts.items():
        if put.value is None or put.index is False:
            continue
        paths = index.fields if put.index is None else tuple(put.index)
        plan.fields.extend((ns, key, *f) for f in indexed_fields(put.value, paths))


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
            raise ValidationError(
                f"filter key must be a non-empty string, got {key!r}", field="filter"
            )
        pairs = (
            cond.items()
            if isinstance(cond, dict)
            and cond
            and all(isinstance(k, str) and k.startswith("$") for k in cond)
            else [("$eq", cond)]
        )
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


def search_key(op: SearchItems) -> Any:
    """What makes two searches of a batch the same read (they run once)."""
    flt = json.dumps(op.filter, sort_keys=True, default=str) if op.filter else None
    return (tuple(op.namespace_prefix), op.query, flt, op.limit, op.offset, op.ranking)


def namespace_pattern(labels: tuple[str, ...], kind: str) -> str:
    """The regular expression a ``prefix`` / ``suffix`` match condition gives (``*`` is
    any one label), over namespace keys."""
    sep = NS_SEPARATOR  # no regular expression metacharacter
    body = sep.join(f"[^{sep}]+" if lab == "*" else re.escape(lab) for lab in labels)
    return f"^{body}({sep}|$)" if kind == "prefix" else f"(^|{sep}){body}$"


def get_params(gets: Sequence[tuple[int, GetItem]]) -> dict[str, Any]:
    """``items_sql.GET_MANY``'s parameters (a row's ``idx`` is its get's place, from 1)."""
    return {"ns": [ns_key(op.namespace) for _, op in gets], "keys": [op.key for _, op in gets]}


def refresh_params(keys: Sequence[Key], now: datetime) -> dict[str, Any]:
    """``items_sql.REFRESH``'s parameters: extend the TTL of ``keys`` from ``now``."""
    return {"now": now, "ns": [k[0] for k in keys], "keys": [k[1] for k in keys]}


def put_statements(
    puts: Mapping[Key, tuple[PutItem, float | None]],
    fields: Sequence[Field],
    vectors: Sequence[Sequence[float]],
    now: datetime,
    indexed: bool = True,
) -> list[tuple[sa.TextClause, dict[str, Any]]]:
    """The statements that apply the puts: the deletes, then the upserts (with the
    ``fields``' ``vectors``). The first one takes every key's lock, in one order, and
    when the keys span namespaces of an ``indexed`` store (whose vectors have keyword
    counters), then their counters' (``items_sql``)."""
    keys = sorted(puts)
    lock = {"lk_ns": [k[0] for k in keys], "lk_keys": [k[1] for k in keys]}
    counters = indexed and bool(keys) and keys[0][0] != keys[-1][0]
    deletes = [k for k, (op, _) in puts.items() if op.value is None]
    upserts = [(k, op, ttl) for k, (op, ttl) in puts.items() if op.value is not None]
    out: list[tuple[sa.TextClause, dict[str, Any]]] = []
    if deletes:
        out.append(
            (
                q.delete_many_sql(True, counters),
                {"ns": [k[0] for k in deletes], "keys": [k[1] for k in deletes], **lock},
            )
        )
    if upserts:
        out.append(
            (
                q.upsert_sql(not deletes, counters and not deletes),
                {
                    **({} if deletes else lock),
                    "now": now,
                    "ns": [k[0] for k, _, _ in upserts],
                    "keys": [k[1] for k, _, _ in upserts],
                    "vals": [dump_value(op.value, op.key) for _, op, _ in upserts],
                    "expires": [
                        None if ttl is None else now + timedelta(minutes=ttl)
                        for _, _, ttl in upserts
                    ],
                    "ttls": [ttl for _, _, ttl in upserts],
                    "v_ns": [f[0] for f in fields],
                    "v_keys": [f[1] for f in fields],
                    "v_fields": [f[2] for f in fields],
                    "v_embs": vectors_param(vectors),
                    "v_dim": len(vectors[0]) if vectors else 0,
                    "v_tsv": [fts.tsvector_literal(tokens(f[3]), f[4]) for f in fields],
                    "r_ns": [k[0] for k, _, _ in upserts],
                    "r_keys": [k[1] for k, _, _ in upserts],
                },
            )
        )
    return out
