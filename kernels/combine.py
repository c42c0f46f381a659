"""Split-KV combine: merge the per-split partial outputs of decode stage 1 into the final output.

Contract with ``kernels/decode_split.py`` (stage 1), per (sequence b, KV head h, split s,
tile row r) where row ``r = t * group + g`` is query token ``t`` of the step and query head
``h * group + g``:

- ``o_part[b, h, s, r, :]``: float32 output of split ``s`` normalized within the split
  (``sum_j p_j v_j / sum_j p_j`` over the split's keys);
- ``lse[b, h, s, r]``: float32 natural log-sum-exp of the split's scaled scores, ``-inf`` when the
  split saw no key (an empty split: its ``o_part`` is ignored, whatever it holds).

One program per (sequence, KV head, tile row, ``BLOCK_D`` slice of head_dim) loads all splits at
once up to 256 (one L2 round trip; more splits go ``BLOCK_S`` at a time), with ``BLOCK_S *
BLOCK_D`` about 4096 float32 so the tile fits in registers and hundreds of splits still spread over
many programs (one load each rather than a few programs walking the splits: BENCHMARKS.md). The
merge subtracts the maximum lse first ("compute the scale first"), so no exp overflows; a row
whose splits are all empty (a padding sequence with ``seq_len = 0``) gives exact zeros, never NaN.
Oracle: ``kernels.reference.merge_partials``. The lse strides are ``do_not_specialize``: they
differ between the one-sequence workspace slice of a decode step and the packed view of a verify
step, which compiled to the same code (``kernels/decode_attention.py``), and now share a compile.

Design after vLLM's ``triton_merge_attn_states.py`` and the flash-decoding reduction (Dao et al.
2023, "Flash-Decoding for long-context inference").
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.checks import check_last_dim_contiguous
from kernels.device import supports_pdl


@triton.jit(do_not_specialize=["stride_lb", "stride_lh", "stride_ls"])  # module notes
def _combine_kernel(
    o_part_ptr,  # float32 [B, Hkv, NUM_SPLITS, ROWS, D]
    lse_ptr,  # float32 [B, Hkv, NUM_SPLITS, ROWS]
    out_ptr,  # [B * NUM_QUERIES, Hq, D] (q dtype)
    stride_ob, stride_oh, stride_os, stride_or,
    stride_lb, stride_lh, stride_ls,
    stride_tt, stride_th,  # out token and head strides
    NUM_KV_HEADS: tl.constexpr,
    GROUP: tl.constexpr,
    NUM_QUERIES: tl.constexpr,
    NUM_SPLITS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_D: tl.constexpr,  # head_dim slice of this program (grid axis 1)
    USE_PDL: tl.constexpr,
):
    rows: tl.constexpr = NUM_QUERIES * GROUP
    pid = tl.program_id(0)
    r = pid % rows
    bh = pid // rows
    h = bh % NUM_KV_HEADS
    b = (bh // NUM_KV_HEADS).to(tl.int64)
    offs_d = tl.program_id(1) * BLOCK_D + tl.arange(0, BLOCK_D)
    lse_base = lse_ptr + b * stride_lb + h * stride_lh + r
    o_base = o_part_ptr + b * stride_ob + h * stride_oh + r * stride_or
    if USE_PDL:
        tl.extra.cuda.gdc_wait()  # launched early (programmatic dependent launch): stage 1 done
        tl.extra.cuda.gdc_launch_dependents()  # e.g. the next layer's stage 1, which waits too

    # The o_part loads never depend on the lse loads (empty splits are dropped after the load by
    # a select, so NaN or stale data there cannot leak): both round trips overlap.
    offs_s = tl.arange(0, BLOCK_S)
    if NUM_SPLITS <= BLOCK_S:  # one pass: every split in registers
        valid = offs_s < NUM_SPLITS
        lse = tl.load(lse_base + offs_s * stride_ls, mask=valid, other=float("-inf"))
        o = tl.load(o_base + offs_s[:, None] * stride_os + offs_d[None, :], mask=valid[:, None],
                    other=0.0)
        m_all = tl.max(lse, axis=0)
        m_all = tl.where(m_all == float("-inf"), 0.0, m_all)  # all empty: keep exp() finite
        w = tl.exp(lse - m_all)  # (BLOCK_S,), 0 for empty splits
        acc = tl.sum(tl.where((lse > float("-inf"))[:, None], w[:, None] * o, 0.0), axis=0)
        denom = tl.sum(w, axis=0)
    else:
        # pass 1 over the lse (a few hundred bytes): the maximum
        m = tl.full([BLOCK_S], float("-inf"), dtype=tl.float32)
        for s0 in range(0, NUM_SPLITS, BLOCK_S):
            idx = s0 + offs_s
            m = tl.maximum(m, tl.load(lse_base + idx * stride_ls, mask=idx < NUM_SPLITS,
                                      other=float("-inf")))
        m_all = tl.max(m, axis=0)
        m_all = tl.where(m_all == float("-inf"), 0.0, m_all)
        # pass 2, BLOCK_S splits at a time (bounded registers for hundreds of splits)
        acc = tl.zeros([BLOCK_D], dtype=tl.float32)
        wsum = tl.zeros([BLOCK_S], dtype=tl.float32)
        for s0 in range(0, NUM_SPLITS, BLOCK_S):
            idx = s0 + offs_s
            valid = idx < NUM_SPLITS
            lse = tl.load(lse_base + idx * stride_ls, mask=valid, other=float("-inf"))
            o = tl.load(o_base + idx[:, None] * stride_os + offs_d[None, :],
                        mask=valid[:, None], other=0.0)
            w = tl.exp(lse - m_all)
            wsum += w
            acc += tl.sum(tl.where((lse > float("-inf"))[:, None], w[:, None] * o, 0.0), axis=0)
        denom = tl.sum(wsum, axis=0)
    res = tl.where(denom > 0, acc / tl.where(denom > 0, denom, 1.0), 0.0)

    t = r // GROUP
    g = r % GROUP
    out_off = (b * NUM_QUERIES + t) * stride_tt + (h * GROUP + g) * stride_th + offs_d
    tl.store(out_ptr + out_off, res.to(out_ptr.dtype.element_ty))


def combine(o_part: torch.Tensor, lse: torch.Tensor, out: torch.Tensor, *,
            pdl: bool = False) -> torch.Tensor:
    """Merge split-KV partials into ``out`` (stage 2 of split-KV decode).

    Args:
        o_part: float32 [B, kv_heads, num_splits, rows, head_dim] with rows = n * group (n query
            tokens per sequence, group = query heads per KV head); the last dim contiguous, other
            strides free (a slice of a larger preallocated workspace works).
        lse: float32 [B, kv_heads, num_splits, rows], natural log; -inf marks an empty split.
        out: [B * n, num_q_heads, head_dim] in the query dtype, last dim contiguous; written in
            place. Row ``b * n + t``, head ``h * group + g`` takes tile row ``t * group + g``.
        pdl: launch with programmatic dependent launch (CUDA, sm_90+): the kernel may start
            while the previous kernel in the stream (stage 1, which signals
            ``griddepcontrol.launch_dependents`` early) still runs, and waits for it to finish
            (``griddepcontrol.wait``) before its first load, which hides the launch latency
            between the two kernels; it signals its own dependents right after the wait.
            Ignored before sm_90 and on a CPU.

    Returns:
        ``out``. Allocates nothing (safe under CUDA graph capture).

    Raises:
        ValueError: naming the argument, on shapes or dtypes that do not fit together or a last
            dim that is not contiguous.
    """
    if o_part.dim() != 5 or lse.shape != o_part.shape[:4]:
        raise ValueError(f"o_part must be [B, kv_heads, splits, rows, D] and lse its first four "
                         f"dims, got {tuple(o_part.shape)} and {tuple(lse.shape)}")
    if o_part.dtype != torch.float32 or lse.dtype != torch.float32:
        raise ValueError("o_part and lse must be float32")
    batch, kv_heads, num_splits, rows, head_dim = o_part.shape
    if out.dim() != 3 or out.shape[2] != head_dim or out.shape[1] % kv_heads:
        raise ValueError(f"out must be [B * n, q_heads, {head_dim}] with q_heads a multiple of "
                         f"{kv_heads}, got {tuple(out.shape)}")
    group = out.shape[1] // kv_heads
    num_queries = rows // group
    if num_queries * group != rows or out.shape[0] != batch * num_queries:
        raise ValueError(f"{rows} tile rows with group {group} do not match out rows "
                         f"{out.shape[0]} for batch {batch}")
    if head_dim & (head_dim - 1) or head_dim < 16:
        raise ValueError(f"head_dim must be a power of two >= 16, got {head_dim}")
    check_last_dim_contiguous("combine", o_part=o_part, lse=lse, out=out)
    # all splits in one tile up to 256 (one round trip to L2); the head_dim split over programs
    # so that a tile stays ~4096 float32 and hundreds of splits still spread over the SMs
    block_s = min(256, triton.next_power_of_2(num_splits))
    block_d = max(16, min(head_dim, 4096 // block_s))
    grid = (batch * kv_heads * rows, head_dim // block_d)
    if grid[0] == 0:
        return out
    use_pdl = bool(pdl) and supports_pdl(out.device)
    _combine_kernel[grid](
        o_part_ptr=o_part, lse_ptr=lse, out_ptr=out,
        stride_ob=o_part.stride(0), stride_oh=o_part.stride(1), stride_os=o_part.stride(2),
        stride_or=o_part.stride(3),
        stride_lb=lse.stride(0), stride_lh=lse.stride(1), stride_ls=lse.stride(2),
        stride_tt=out.stride(0), stride_th=out.stride(1),
        NUM_KV_HEADS=kv_heads, GROUP=group, NUM_QUERIES=num_queries, NUM_SPLITS=num_splits,
        HEAD_DIM=head_dim, BLOCK_S=block_s, BLOCK_D=block_d,
        USE_PDL=use_pdl, num_warps=4, **({"launch_pdl": True} if use_pdl else {}),
    )
    return out
