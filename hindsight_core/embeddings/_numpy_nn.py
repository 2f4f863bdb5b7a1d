"""What the numpy encoders share: GELU with erf, layer norm, attention, one BLAS thread.

The local MiniLM (``_numpy_bert``) and the default model's engine (``_e5_numpy``) run
the same BERT blocks. The element-wise steps work in place on float32 arrays: each
numpy operation is a pass over the array, and at these sizes the passes, not the
arithmetic, are what an encoder spends outside its matrix products.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

_F = np.float32

# erf(z) = 1 - t (a1 + a2 t + ... + a5 t^4) exp(-z^2), t = 1 / (1 + p z), z >= 0
# (Abramowitz & Stegun 7.1.26: |error| < 1.5e-7, as float32's own rounding).
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def gelu_(h: np.ndarray) -> np.ndarray:
    """``h`` <- h Phi(h) = h (1 + erf(h / sqrt 2)) / 2, in place (float32; numpy has no erf).

    With g = (1 - erf(|z|)) / 2 this is h (1/2 + sign(h) (1/2 - g)): erf's symmetry
    needs no branch.
    """
    t = np.abs(h)
    t *= _F(_ERF_P / np.sqrt(2.0))
    t += _F(1.0)
    np.reciprocal(t, out=t)
    e = np.square(h)
    e *= _F(-0.5)
    # exp(-80) is a normal float32 and g negligible there; below, exp's results would be
    # subnormal numbers, which the CPU handles many times slower
    np.maximum(e, _F(-80.0), out=e)
    np.exp(e, out=e)
    g = np.multiply(t, _F(_ERF_A[4] / 2))
    for a in _ERF_A[3::-1]:  # Horner, the 1/2 folded into the coefficients
        g += _F(a / 2)
        g *= t
    g *= e
    np.subtract(_F(0.5), g, out=g)
    np.copysign(g, h, out=g)
    g += _F(0.5)
    h *= g
    return h


def layer_norm_(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """``x`` <- layer norm of its last axis, in place: (x - mean) / sqrt(var + eps) w + b."""
    x -= x.mean(-1, keepdims=True)
    var = np.einsum("...i,...i->...", x, x)
    var *= _F(1.0 / x.shape[-1])
    var += _F(eps)
    np.sqrt(var, out=var)
    np.reciprocal(var, out=var)
    x *= var[..., None]
    x *= weight
    x += bias
    return x


def attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, heads: int, bias: np.ndarray | None = None
) -> np.ndarray:
    """Scaled dot-product attention of ``heads`` heads.

    Args:
        q, k, v: ``(..., L, H)`` arrays or views (a slice of a fused QKV product).
        heads: H splits into this many heads of H / heads values.
        bias: added to the scores (``(..., 1, 1, L)``: -1e9 on padding), if any.

    Returns:
        The heads' outputs side by side, ``(..., L, H)``, contiguous.
    """
    *lead, length, width = q.shape
    size = width // heads

    def split(a: np.ndarray) -> np.ndarray:  # (..., heads, L, size), a view
        return a.reshape(*lead, length, heads, size).swapaxes(-2, -3)

    scores = np.matmul(split(q), split(k).swapaxes(-1, -2))
    scores *= _F(1.0 / np.sqrt(size))
    if bias is not None:
        scores += bias
    scores -= scores.max(-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(-1, keepdims=True)
    out = np.matmul(scores, split(v)).swapaxes(-2, -3)
    return np.ascontiguousarray(out).reshape(*lead, length, width)


# Products run on one BLAS thread. OpenBLAS's fork handler waits for its worker
# threads: a process that forks (subprocess, an embedded PostgreSQL restart) while
# another thread's product runs on them hung for good (seen once in the test suite: the
# main thread in fork_exec, a writer thread in a forward's matmul). On the caller's
# thread alone a product of these sizes needs no worker; parallel work is done by
# Python threads, each on its own products (numpy releases the GIL).
#
# The limit is OpenBLAS's, for the whole process, and it stays once set: setting it
# around each call and restoring it afterwards (as this module did) left OpenBLAS's idle
# worker spinning on the other core whenever two threads embedded at once after a
# restore, for up to 80 % more CPU per text (bench/HISTORY.md, "The default model's
# engine (numpy)").
_limit_lock = threading.Lock()
_limit: Any = None


def one_blas_thread() -> None:
    """Keep BLAS on its calling threads from now on, process-wide (idempotent, cheap)."""
    global _limit
    if _limit is not None:
        return
    with _limit_lock:
        if _limit is None:
            from threadpoolctl import ThreadpoolController

            _limit = ThreadpoolController().limit(limits=1, user_api="blas")
