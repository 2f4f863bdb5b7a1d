"""Review's clusters of look-alikes, grouped without a database
(``reflection/review_merge.connected_groups``: the near pairs' connected groups)."""

from __future__ import annotations

import uuid

from hindsight_core.reflection.review_merge import connected_groups

A, B, C, D, E, F, G = (uuid.UUID(int=i) for i in range(1, 8))


def test_pairs_join_into_connected_groups_largest_first() -> None:
    # A-B, B-C: one group though A and C were never paired; D-E another; F-G a third
    pairs = [(D, E), (A, B), (F, G), (B, C)]
    groups = connected_groups(pairs)
    assert [set(g) for g in groups] == [{A, B, C}, {D, E}, {F, G}]
    assert sum(map(len, groups)) == 7  # each id in one group only


def test_a_pair_between_two_groups_merges_them() -> None:
    groups = connected_groups([(A, B), (C, D), (E, E), (B, C)])
    assert [set(g) for g in groups] == [{A, B, C, D}, {E}]


def test_ties_keep_the_order_the_groups_were_met_and_repeat_for_the_same_pairs() -> None:
    pairs = [(C, D), (A, B), (E, F)]
    groups = connected_groups(pairs)
    assert [set(g) for g in groups] == [{C, D}, {A, B}, {E, F}]
    assert connected_groups(list(pairs)) == groups


def test_no_pairs_no_groups() -> None:
    assert connected_groups([]) == []
