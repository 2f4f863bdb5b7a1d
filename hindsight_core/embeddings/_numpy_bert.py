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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ._numpy_nn import attention, gelu_, layer_norm_, one_blas_thread

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
            one_blas_thread()
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
        layer_norm_(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        x = x.reshape(batch * length, self.dim)  # 2-D, so every product is one BLAS call
        for n in range(self.layers):
            p = f"encoder.layer.{n}."

            def linear(h: np.ndarray, name: str, p: str = p) -> Any:
                y = h @ w[p + name + ".weight"].T
                y += w[p + name + ".bias"]
                return y

            def heads(h: np.ndarray) -> np.ndarray:
                return h.reshape(batch, length, self.dim)

            ctx = attention(
                heads(linear(x, "attention.self.query")),
                heads(linear(x, "attention.self.key")),
                heads(linear(x, "attention.self.value")),
                self.heads,
                bias,
            ).reshape(batch * length, self.dim)
            y = linear(ctx, "attention.output.dense")
            y += x
            x = layer_norm_(
                y,
                w[p + "attention.output.LayerNorm.weight"],
                w[p + "attention.output.LayerNorm.bias"],
                self.eps,
            )
            y = linear(gelu_(linear(x, "intermediate.dense")), "output.dense")
            y += x
            x = layer_norm_(
                y, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], self.eps
            )
        x = x.reshape(batch, length, self.dim)
        summed = (x * mask[:, :, None]).sum(1)
        pooled: np.ndarray = (summed / np.maximum(mask.sum(1, keepdims=True), 1e-9)).astype(
            np.float32
        )
        return pooled
