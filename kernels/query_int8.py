"""A query tile as two int8 halves and a row scale, so that prefill can score INT8 keys with
int8 tensor-core dots (``QK_INT8`` in ``kernels/prefill_attention.py``).

``q ~ q_scale * (q_hi + q_lo / 127)`` per row: ``q_scale`` is the row max / 127, ``q_hi`` the
rounded codes and ``q_lo`` the rounded remainder in 1/127ths. The score of a key with codes ``k``
is then ``q_scale * (127 * (q_hi . k) + q_lo . k) / 127``, two int8 dots summed exactly in int32
(|sum| <= D * 127 * (127 * 127 + 64) < 2^31 for D <= 1024). Two int8 dots cost the tensor cores
what one 16-bit dot does, and the key tile reaches them with no conversion and no shared-memory
round trip. The entry error is at most row max / 32258: within bfloat16's rounding bound (2^-8
relative) for entries above 0.8 % of the row max, float16's (2^-11) above 6.4 %.

Our variant of SageAttention's int8 Q.K^T (Zhang et al. 2024), which quantizes q once (one term)
and so adds error; with the second term the output error stays at the converting path's
(BENCHMARKS.md, "Kernel design notes moved from the code").
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def split_query_int8(q):
    """A query tile [M, D] as ``q_scale * (q_hi + q_lo / 127)``: int8 ``q_hi`` in [-127, 127],
    int8 ``q_lo`` in [-64, 64], float32 ``q_scale`` [M] (row max / 127; 1 for an all-zero row;
    NaN for a row holding NaN or +-inf, whose codes would otherwise drop it, so that the row's
    output is NaN as on the converting path). Rounding is to nearest (ties up), so
    |q - q_scale * (q_hi + q_lo / 127)| <= q_scale / 254."""
    qf = q.to(tl.float32)
    bad = ~(tl.abs(qf) < float("inf"))  # NaN or +-inf
    qf = tl.where(bad, 0.0, qf)  # codes from finite values only
    amax = tl.max(tl.abs(qf), axis=1)
    scale = tl.where(amax > 0, amax / 127.0, 1.0)
    qn = qf / scale[:, None]
    hi = tl.floor(qn + 0.5)
    lo = tl.floor((qn - hi) * 127.0 + 0.5)
    q_scale = tl.where(tl.max(bad.to(tl.int32), axis=1) > 0, float("nan"), scale)
    return hi.to(tl.int8), lo.to(tl.int8), q_scale
