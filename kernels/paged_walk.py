"""The steps of a walk over paged K/V that decode and prefill attention share, as jit helpers.

Both kernels walk a sequence's keys ``BLOCK_N`` positions at a time through its page table row
and keep a FlashAttention-2 running max and sum (Dao 2023): per block they look up the page(s),
load K (and the INT8 scales), score, update the online softmax and accumulate ``P . V``. What is
the same in both lives here: the page lookup, the INT8 scale application and the online-softmax
update. The loads, the dots and what is particular to each kernel (decode's conditional
rescaling, prefill's TMA loads and int8 query halves) stay in ``kernels/decode_block.py`` and
``kernels/prefill_blocks.py``.

Triton inlines ``@triton.jit`` helpers, so sharing them costs nothing at run time; each helper
keeps the exact operations, their order and dtypes that both kernels had, so their generated code
is what it was (checked by comparing the PTX of the default tiles for sm_80 and sm_90).

Layout (``infer/kv_pool.py``): position ``p`` of a sequence lives in page ``table[p //
PAGE_SIZE]`` at slot ``p % PAGE_SIZE``; scores are in log2 units (``exp2``, the logit scale
pre-multiplied by log2(e)).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def block_page(pt_row_ptr, start, pos, bound, PAGE_SIZE: tl.constexpr, BLOCK_N: tl.constexpr,
               MASK: tl.constexpr):
    """Page id(s) of the key block ``pos = start + tl.arange(0, BLOCK_N)`` (``start`` a multiple
    of BLOCK_N). The slot of key ``p`` in its page is ``p % PAGE_SIZE``; the callers compute it
    (each in the form its kernel was tuned with).

    Args:
        pt_row_ptr: the sequence's row of the int32 page table.
        bound: one past the last key that may be read.
        MASK: for blocks spanning pages, load page ids only for keys ``< bound`` (id 0, a valid
            page, elsewhere). A block inside one page reads one entry, in use because
            ``start < bound``.

    Returns:
        int64: a scalar when ``BLOCK_N <= PAGE_SIZE`` (the block lies in one page, which needs
        BLOCK_N to divide PAGE_SIZE), else one id per key [BLOCK_N].
    """
    if BLOCK_N <= PAGE_SIZE:
        page = tl.load(pt_row_ptr + start // PAGE_SIZE).to(tl.int64)
    else:
        if MASK:
            page = tl.load(pt_row_ptr + pos // PAGE_SIZE, mask=pos < bound, other=0)
        else:
            page = tl.load(pt_row_ptr + pos // PAGE_SIZE)
        page = page.to(tl.int64)
    return page


@triton.jit
def load_scales(scale_ptrs, valid, MASKED: tl.constexpr):
    """The float32 INT8 scales of a block's keys (or values); 0 where not ``valid`` (masked
    blocks only), so that a masked key's score column and value row vanish."""
    if MASKED:
        return tl.load(scale_ptrs, mask=valid, other=0.0)
    else:
        return tl.load(scale_ptrs)


@triton.jit
def scale_scores(s, k_scale, factor):
    """INT8 keys: multiply each key's scale (times ``factor``, the logit scale) into its column
    of the [M, BLOCK_N] scores from the raw codes."""
    return s * (k_scale * factor)[None, :]


@triton.jit
def scale_probs(p, v_scale):
    """INT8 values: multiply each value's scale into its column of probabilities before P.V (no
    dequantized copy of V)."""
    return p * v_scale[None, :]


@triton.jit
def online_softmax(s, row_scale, m_i, l_i, acc, GUARD_EMPTY: tl.constexpr,
                   ROW_SCALED: tl.constexpr, ALPHA_FIRST: tl.constexpr):
    """One online-softmax step over a block of scores (FlashAttention-2).

    Args:
        s: float32 [M, BLOCK_N] scores in log2 units, ``-inf`` where masked; with ROW_SCALED
            still to be multiplied by ``row_scale`` [M] (> 0; it commutes with the max and folds
            into exp2's argument). Without ROW_SCALED ``row_scale`` is unused.
        m_i, l_i: float32 [M] running max and sum; acc: float32 [M, D] running ``P . V``.
        GUARD_EMPTY: a row may have seen no key yet (all ``-inf``): its max is taken as 0 for
            the exponentials so that they give 0, not NaN (``-inf - -inf``).
        ALPHA_FIRST: compute the rescale factor before the probabilities (decode) or after
            (prefill). The two are independent and the results the same; the flag keeps the
            order each kernel was tuned with, so that its generated code is unchanged.

    Returns:
        ``(p, m_new, l_i, acc)``: the block's probabilities [M, BLOCK_N] against the new max,
        the new max, and the sum and accumulator rescaled to it (P.V still to be added).
    """
    if ROW_SCALED:
        m_new = tl.maximum(m_i, tl.max(s, 1) * row_scale)
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1))
    if GUARD_EMPTY:
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_use = m_new
    if ALPHA_FIRST:
        alpha = tl.math.exp2(m_i - m_use)
    if ROW_SCALED:
        p = tl.math.exp2(s * row_scale[:, None] - m_use[:, None])
    else:
        p = tl.math.exp2(s - m_use[:, None])
    if not ALPHA_FIRST:
        alpha = tl.math.exp2(m_i - m_use)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    return p, m_new, l_i, acc
