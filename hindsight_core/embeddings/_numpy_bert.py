"""A BERT sentence encoder in numpy: the local model without importing torch.

Importing sentence-transformers (torch, transformers, scikit-learn, scipy) takes
seconds, many times what the query itself costs; a CLI search
paid it every time. For the models it can run exactly -- a sentence-transformers
directory whose modules are ``Transformer`` (a ``BertModel``), mean ``Pooling``
and, optionally, ``Normalize``, such as all-MiniLM-L6-v2 -- this module computes
the same forward pass with numpy, the weights read from ``model.safetensors`` and
the text tokenized by ``tokenizers`` (both come with sentence-transformers), with a
small fraction of those imports. Vectors agree with sentence-transformers' to float32 rounding
(cosine > 0.99999, checked in the tests). Any other model loads sentence-transformers.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

ST_MODULES = {
    "sentence_transformers.models.Transformer",
    "sentence_transformers.models.Pooling",
    "sentence_transformers.models.Normalize",
}


def supports(location: Path) -> bool:
    """Whether ``location`` holds a model this encoder runs exactly."""
    try:
        modules = json.loads((location / "modules.json").read_text())
        config = json.loads((location / "config.json").read_text())
        pooling = json.loads((location / modules[1]["path"] / "config.json").read_text())
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return False
    types = [m.get("type") for m in modules]
    return (
        types[:2]
        == ["sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling"]
        and set(types) <= ST_MODULES
        and config.get("model_type") == "bert"
        and config.get("hidden_act") == "gelu"
        and config.get("position_embedding_type", "absolute") == "absolute"
        and pooling.get("pooling_mode_mean_tokens") is True
        and not any(
            pooling.get(k)
            for k in (
                "pooling_mode_cls_token",
                "pooling_mode_max_tokens",
                "pooling_mode_mean_sqrt_len_tokens",
            )
        )
        and (location / "model.safetensors").is_file()
        and (location / "tokenizer.json").is_file()
    )


# One forward at a time, on one BLAS thread. OpenBLAS's fork handler waits for its
# worker threads: a process that forks (subprocess, an embedded PostgreSQL restart)
# while another thread's product runs on them hung for good (seen once in the test
# suite: the main thread in fork_exec, a writer thread in this forward's matmul). On
# the caller's thread alone a product of these sizes needs no worker.
_FORWARD = threading.Lock()


@cache
def _blas_controller() -> Any:
    try:
        from threadpoolctl import ThreadpoolController  # with scikit-learn, a dependency
    except ImportError:  # pragma: no cover - sentence-transformers brings it
        return None
    return ThreadpoolController()


@contextmanager
def _one_blas_thread() -> Iterator[None]:
    controller = _blas_controller()
    with _FORWARD:
        if controller is None:
            yield
            return
        with controller.limit(limits=1, user_api="blas"):
            yield


def _erf(x: np.ndarray) -> np.ndarray:
    """erf to ~1.2e-7 (Numerical Recipes' erfc Chebyshev fit): numpy has none.

    |x| is capped at 6 (erf is 1 there in float32): beyond it exp() underflows into
    subnormal numbers, which the CPU handles a hundred times slower.
    """
    z = np.minimum(np.abs(x), np.float32(6.0))
    t = np.float32(1.0) / (np.float32(1.0) + np.float32(0.5) * z)
    poly = (
        -z * z
        - 1.26551223
        + t
        * (
            1.00002368
            + t
            * (
                0.37409196
                + t
                * (
                    0.09678418
                    + t
                    * (
                        -0.18628806
                        + t
                        * (
                            0.27886807
                            + t
                            * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))
                        )
                    )
                )
            )
        )
    )
    erfc = t * np.exp(poly)
    out: np.ndarray = np.where(x >= 0, 1.0 - erfc, erfc - 1.0).astype(x.dtype, copy=False)
    return out


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    out: np.ndarray = (x - mean) / np.sqrt(var + eps) * weight + bias
    return out


class NumpyBert:
    """Mean-pooled BERT sentence embeddings (not normalised: the caller does that)."""

    def __init__(self, location: Path) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        config = json.loads((location / "config.json").read_text())
        st_config = (
            json.loads((location / "sentence_bert_config.json").read_text())
            if (location / "sentence_bert_config.json").is_file()
            else {}
        )
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.max_len = int(
            st_config.get("max_seq_length") or config.get("max_position_embeddings", 512)
        )
        self.lower = bool(st_config.get("do_lower_case", False))
        raw = load_file(str(location / "model.safetensors"))
        self.w = {
            k.removeprefix("bert.").removeprefix("model."): v.astype(np.float32)
            for k, v in raw.items()
        }
        self.dim = int(self.w["embeddings.word_embeddings.weight"].shape[1])
        self.tokenizer = Tokenizer.from_file(str(location / "tokenizer.json"))
        self.tokenizer.enable_truncation(self.max_len)
        pad_id = int(config.get("pad_token_id", 0))
        self.tokenizer.enable_padding(pad_id=pad_id)

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Embed ``texts``; batches are formed by length so that padding stays small."""
        texts = [t.lower() for t in texts] if self.lower else list(texts)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            encodings = self.tokenizer.encode_batch([texts[i] for i in chunk])
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
            types = np.array([e.type_ids for e in encodings], dtype=np.int64)
            with _one_blas_thread():
                out[chunk] = self._forward(ids, types, mask)
        return out

    def _forward(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = self.w
        batch, length = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][np.arange(length)][None]
            + w["embeddings.token_type_embeddings.weight"][types]
        )
        x = _layer_norm(
            x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps
        )
        head = self.dim // self.heads
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        scale = np.float32(1.0 / np.sqrt(head))
        x = x.reshape(batch * length, self.dim)  # 2-D, so every product is one BLAS call
        for n in range(self.layers):
            p = f"encoder.layer.{n}."

            def linear(h: np.ndarray, name: str, p: str = p) -> Any:
                return h @ w[p + name + ".weight"].T + w[p + name + ".bias"]

            def heads(h: np.ndarray) -> np.ndarray:
                return np.ascontiguousarray(
                    h.reshape(batch, length, self.heads, head).transpose(0, 2, 1, 3)
                )

            q = heads(linear(x, "attention.self.query") * scale)
            k = heads(linear(x, "attention.self.key"))
            v = heads(linear(x, "attention.self.value"))
            scores = np.matmul(q, k.transpose(0, 1, 3, 2).copy()) + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            ctx = np.matmul(scores, v).transpose(0, 2, 1, 3).reshape(batch * length, self.dim)
            x = _layer_norm(
                x + linear(ctx, "attention.output.dense"),
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
                self.eps,
            )
            h = linear(x, "intermediate.dense")
            h = 0.5 * h * (1.0 + _erf(h * np.float32(1 / np.sqrt(2.0))))
            x = _layer_norm(
                x + linear(h, "output.dense"),
                w[p + "output.LayerNorm.weight"],
                w[p + "output.LayerNorm.bias"],
                self.eps,
            )
        x = x.reshape(batch, length, self.dim)
        summed = (x * mask[:, :, None]).sum(1)
        pooled: np.ndarray = (summed / np.maximum(mask.sum(1, keepdims=True), 1e-9)).astype(
            np.float32
        )
        return pooled
