"""The item batch's planning step and parameter builders, without a database.

``items/batch_plan.py`` validates and groups a batch (reads, then one put per key),
lists the texts to embed and builds the statements' parameters; these tests check
its decisions directly.

Internals: ``storage.items_sql``'s statements, which the plan must pick.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from hindsight_core.errors import ValidationError
from hindsight_core.items import GetItem, ItemIndex, ListNamespaces, PutItem, SearchItems
from hindsight_core.items.batch_plan import (
    get_params,
    namespace_pattern,
    plan_batch,
    put_statements,
    refresh_params,
    search_key,
)
from hindsight_core.models import NS_SEPARATOR, ns_key
from hindsight_core.storage import items_sql as q

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
INDEX = ItemIndex(dims=3, fields=("text",))
A, B = ("acme", "a"), ("acme", "b")


def test_reads_are_grouped_by_kind_keeping_their_places() -> None:
    ops = [
        PutItem(A, "k", {"text": "x"}),
        GetItem(A, "k"),
        SearchItems(("acme",), "q1"),
        ListNamespaces(),
        GetItem(B, "j"),
        SearchItems(("acme",)),
    ]
    plan = plan_batch(ops, INDEX)
    assert [i for i, _ in plan.gets] == [1, 4]
    assert [i for i, _ in plan.searches] == [2, 5]
    assert [i for i, _ in plan.lists] == [3]
    assert plan.queries == ["q1"] and plan.query_of == {2: 0}, "no query, nothing to embed"
    assert get_params(plan.gets) == {"ns": [ns_key(A), ns_key(B)], "keys": ["k", "j"]}


def test_the_last_put_of_a_key_wins_and_moves_to_the_end() -> None:
    ops = [PutItem(A, "k", {"text": "1"}), PutItem(B, "j", {"text": "2"}), PutItem(A, "k", None)]
    plan = plan_batch(ops, INDEX)
    assert list(plan.puts) == [(ns_key(B), "j"), (ns_key(A), "k")]
    assert plan.puts[(ns_key(A), "k")][0].value is None, "put then delete deletes"
    assert plan.fields == [(ns_key(B), "j", "text", "2", frozenset())], (
        "a deleted item embeds nothing"
    )
    assert not plan.autocommit, "a delete and an upsert take two statements: one transaction"


def test_deletes_run_before_upserts_and_the_first_statement_takes_the_locks() -> None:
    ops = [PutItem(B, "z", {"text": "new"}), PutItem(A, "y", None), PutItem(A, "x", {})]
    plan = plan_batch(ops, None)
    (delete, dparams), (upsert, uparams) = put_statements(plan.puts, [], [], NOW)
    # two namespaces: the first statement also locks their keyword counters, in order
    assert delete is q.delete_many_sql(True, True) and upsert is q.upsert_sql(False, False)
    # a store without vectors has no keyword counters to lock
    assert put_statements(plan.puts, [], [], NOW, False)[0][0] is q.delete_many_sql(True, False)
    assert (dparams["ns"], dparams["keys"]) == ([ns_key(A)], ["y"])
    keys = sorted(plan.puts)
    assert list(zip(dparams["lk_ns"], dparams["lk_keys"], strict=True)) == keys, "one global order"
    assert "lk_ns" not in uparams
    assert uparams["keys"] == ["z", "x"] and json.loads(uparams["vals"][0]) == {"text": "new"}


def test_upserts_alone_are_one_locked_statement_in_autocommit() -> None:
    plan = plan_batch([PutItem(A, "k", {"text": "hello world"})], INDEX)
    assert plan.autocommit
    ((stmt, params),) = put_statements(plan.puts, plan.fields, [[1.0, 0.0, 0.5]], NOW)
    assert stmt is q.upsert_sql(True, False)  # one namespace: no counter lock up front
    assert (params["lk_ns"], params["lk_keys"]) == ([ns_key(A)], ["k"])
    assert (params["v_fields"], params["v_dim"]) == (["text"], 3)
    assert "hello" in params["v_tsv"][0] and "world" in params["v_tsv"][0]
    assert put_statements({}, [], [], NOW) == []


def test_ttl_sets_expiry_in_minutes_from_now() -> None:
    ops = [
        PutItem(A, "k", {"v": 1}, ttl=90),
        PutItem(A, "j", {"v": 2}, ttl=0.5),
        PutItem(A, "n", {"v": 3}),
    ]
    ((_, params),) = put_statements(plan_batch(ops, None).puts, [], [], NOW)
    assert params["ttls"] == [90.0, 0.5, None]
    assert params["expires"] == [NOW + timedelta(minutes=90), NOW + timedelta(seconds=30), None]


@pytest.mark.parametrize("ttl", [0, -1, "5", True])
def test_a_bad_ttl_is_refused_before_anything_runs(ttl: object) -> None:
    with pytest.raises(ValidationError) as exc:
        plan_batch([GetItem(A, "k"), PutItem(A, "k", {"v": 1}, ttl=ttl)], None)  # type: ignore[arg-type]
    assert exc.value.field == "ttl"


@pytest.mark.parametrize(
    ("op", "field"),
    [
        (SearchItems(("acme",), limit=-1), "limit"),
        (SearchItems(("acme",), offset=2**60), "offset"),  # past a bigint's reach in the SQL
        (ListNamespaces(limit=True), "limit"),  # type: ignore[arg-type]
        (SearchItems(("acme",), filter={"a": {"$regex": "x"}}), "filter.a"),
        (GetItem(("acme", ""), "k"), "namespace"),
        (PutItem(A, "k", ["not", "a", "mapping"]), "value"),  # type: ignore[arg-type]
        ("get", "ops"),
    ],
)
def test_bad_operations_name_the_field(op: object, field: str) -> None:
    with pytest.raises(ValidationError) as exc:
        plan_batch([op], None)  # type: ignore[list-item]
    assert exc.value.field == field


def test_a_limit_of_zero_is_a_valid_page() -> None:
    plan = plan_batch([SearchItems(("acme",), limit=0), ListNamespaces(limit=0)], None)
    assert len(plan.searches) == len(plan.lists) == 1


def test_an_index_false_put_and_no_index_embed_nothing() -> None:
    ops = [PutItem(A, "k", {"text": "x"}, index=False), SearchItems(("acme",), "q")]
    plan = plan_batch(ops, INDEX)
    assert plan.fields == [] and plan.queries == ["q"]
    plan = plan_batch(ops, None)
    assert plan.fields == [] and plan.queries == [], "without an index nothing is embedded"


def test_identical_searches_share_a_key_and_different_ones_do_not() -> None:
    a = SearchItems(("acme",), "q", {"b": 1, "a": 2}, limit=5)
    assert search_key(a) == search_key(SearchItems(["acme"], "q", {"a": 2, "b": 1}, limit=5))  # type: ignore[arg-type]
    assert search_key(a) != search_key(SearchItems(("acme",), "q", {"a": 2, "b": 1}, limit=6))


def test_refresh_params() -> None:
    assert refresh_params([("n1", "k1"), ("n2", "k2")], NOW) == {
        "now": NOW,
        "ns": ["n1", "n2"],
        "keys": ["k1", "k2"],
    }


@pytest.mark.parametrize(
    ("labels", "kind", "matches", "misses"),
    [
        (("acme",), "prefix", [("acme",), ("acme", "x")], [("acmex",), ("x", "acme")]),
        (("*", "b"), "prefix", [("a", "b"), ("z", "b", "c")], [("a", "bc"), ("b",)]),
        (("b",), "suffix", [("a", "b"), ("b",)], [("a", "xb"), ("b", "a")]),
        (("a.b",), "prefix", [("a.b",)], [("axb",)]),
    ],
)
def test_namespace_patterns(
    labels: tuple[str, ...], kind: str, matches: list, misses: list
) -> None:
    pattern = re.compile(namespace_pattern(labels, kind))
    assert all(pattern.search(NS_SEPARATOR.join(ns)) for ns in matches)
    assert not any(pattern.search(NS_SEPARATOR.join(ns)) for ns in misses)
