"""Greedy decoding's argmax over the vocabulary: two kernels instead of ~8 torch ops per step.

``infer.sampling.sample`` at temperature 0 masks the padded ids, converts the logits to float32,
takes the max (to spot a non-finite row), the argmax and a ``torch.where``: about 22 us a step for
[16, 151936] on an H100. Here the logits are read once, in their own dtype:

- Stage 1, grid ``(N, P)`` with ``P = cdiv(vocab_limit, BLOCK)``: program ``(r, p)`` loads columns
  ``[p * BLOCK, (p + 1) * BLOCK)`` of row ``r`` (ids ``>= vocab_limit`` masked out), and writes
  their float32 max and the first column holding it (the smallest column equal to the max) into
  workspaces ``[N, P]``. A NaN counts as -inf for the max and flags the block by making its
  max +inf, so that a NaN's only effect is the row's ``NON_FINITE`` below.
- Stage 2, one program per row: the max over the row's P partials, and the smallest column among
  the partials equal to it. The partials come in column order, each with its block's first
  column, so that is the row's first column of the max: ``torch.argmax``'s tie rule. A row whose
  max is not finite (a NaN or a +inf among the allowed ids, or all of them -inf) gets
  ``NON_FINITE``: the contract of ``sample`` (``isfinite(amax)``, NaN propagating).

BLOCK is 1024 on a GPU (149 programs of 4 warps a row for Qwen3's 151669 ids: one wave on 132
SMs, several programs sharing an SM) and small under the interpreter, so the CPU tests cross many
blocks quickly. No host sync and allocation only: safe under CUDA graph capture.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import device
from kernels.checks import check_last_dim_contiguous

NON_FINITE = -1  # the token of a row whose max logit is NaN or +-inf (no usable distribution)
GPU_BLOCK = 1024  # columns per stage-1 program on a GPU
INTERPRETER_BLOCK = 128  # ... under the Triton interpreter (CPU tests)


@triton.jit
def _greedy_partial_kernel(
    logits_ptr,  # [N, V] float16/bfloat16/float32, last dim contiguous
    max_ptr,  # [N, P] float32: each block's max (+inf if it holds a NaN)
    idx_ptr,  # [N, P] int32: the first column of that max
    stride_row,  # logits' row stride (elements)
    num_cols,  # V
    vocab_limit,  # columns >= this count as -inf
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    blk = tl.program_id(1)
    cols = blk * BLOCK + tl.arange(0, BLOCK)
    # NOTE: loads masked by V (151936 = 16 * 9496: vector loads), not by vocab_limit (151669)
    raw = tl.load(logits_ptr + row * tl.cast(stride_row, tl.int64) + cols, mask=cols < num_cols,
                  other=float("-inf")).to(tl.float32)
    mask = cols < vocab_limit
    is_nan = mask & (raw != raw)
    # NaN as -inf: tl.max's NaN handling is not torch's, and NaN only makes the row NON_FINITE
    x = tl.where(mask & (raw == raw), raw, float("-inf"))
    best = tl.max(x, axis=0)
    # the smallest allowed column equal to the max (every block has one, even if all are -inf)
    first = tl.min(tl.where(mask & (x == best), cols, 2147483647), axis=0)
    has_nan = tl.max(is_nan.to(tl.int32), axis=0) > 0
    best = tl.where(has_nan, float("inf"), best)
    out = row * tl.num_programs(1) + blk
    tl.store(max_ptr + out, best)
    tl.store(idx_ptr + out, first)


@triton.jit
def _greedy_combine_kernel(
    max_ptr,  # [N, P] float32, from stage 1
    idx_ptr,  # [N, P] int32, from stage 1
    tok_ptr,  # [N] int64 out: the first column of the row's max, or NON_FINITE
    num_parts,  # P, partials per row
    BLOCK_P: tl.constexpr,  # power of two >= P
    NON_FINITE_ID: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_P)
    mask = offs < num_parts
    m = tl.load(max_ptr + row * num_parts + offs, mask=mask, other=float("-inf"))
    i = tl.load(idx_ptr + row * num_parts + offs, mask=mask, other=2147483647)
    best = tl.max(m, axis=0)
    first = tl.min(tl.where(mask & (m == best), i, 2147483647), axis=0)
    finite = (best > float("-inf")) & (best < float("inf"))  # no NaN left in m
    tl.store(tok_ptr + row, tl.where(finite, first, NON_FINITE_ID).to(tl.int64))


def greedy_tokens(logits: torch.Tensor, vocab_limit: int | None = None) -> torch.Tensor:
    """Per row, the first id of the max logit among the ids below ``vocab_limit``.

    Args:
        logits: [N, V] float16/bfloat16/float32 (N >= 0, V >= 1), last dim contiguous (any row
            stride). Not modified.
        vocab_limit: ids >= this are never picked (the model pads its vocabulary; 151669 for
            Qwen3); 1..V. None: all ids allowed.

    Returns:
        int64 [N] on the logits' device: what ``torch.argmax`` returns for the float32 logits
        with ids >= ``vocab_limit`` at -inf (the first index of the max), or ``NON_FINITE`` (-1)
        for a row whose max over the allowed ids is not finite (a NaN or a +inf among them, or
        all of them -inf). Allocation only, no host sync: safe under CUDA graph capture.

    Raises:
        ValueError: ``logits`` not 2-D, not a float dtype above, without a contiguous last dim,
            or with no columns; ``vocab_limit`` outside 1..V.
    """
    if logits.dim() != 2:
        raise ValueError(f"greedy_tokens: logits must be [N, V], got {tuple(logits.shape)}")
    if logits.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"greedy_tokens: logits must be float16, bfloat16 or float32, got "
                         f"{logits.dtype}")
    check_last_dim_contiguous("greedy_tokens", logits=logits)
    rows, vocab = logits.shape
    if vocab == 0:
        raise ValueError("greedy_tokens: logits have no columns (an empty vocabulary)")
    if vocab_limit is not None and (isinstance(vocab_limit, bool)
                                    or not isinstance(vocab_limit, int)):
        raise ValueError(f"greedy_tokens: vocab_limit must be an int or None, got "
                         f"{vocab_limit!r}")
    limit = vocab if vocab_limit is None else vocab_limit
    if not 1 <= limit <= vocab:
        raise ValueError(f"greedy_tokens: vocab_limit must be 1..{vocab} (the logits' columns), "
                         f"got {vocab_limit}")
    tok = torch.empty(rows, dtype=torch.int64, device=logits.device)
    if rows == 0:
        return tok
    block = INTERPRETER_BLOCK if device.capability(logits.device) is None else GPU_BLOCK
    parts = triton.cdiv(limit, block)
    part_max = torch.empty((rows, parts), dtype=torch.float32, device=logits.device)
    part_idx = torch.empty((rows, parts), dtype=torch.int32, device=logits.device)
    _greedy_partial_kernel[(rows, parts)](
        logits_ptr=logits, max_ptr=part_max, idx_ptr=part_idx, stride_row=logits.stride(0),
        num_cols=vocab, vocab_limit=limit, BLOCK=block, num_warps=4)
    block_p = triton.next_power_of_2(parts)
    _greedy_combine_kernel[(rows,)](
        max_ptr=part_max, idx_ptr=part_idx, tok_ptr=tok, num_parts=parts, BLOCK_P=block_p,
        NON_FINITE_ID=NON_FINITE, num_warps=max(1, min(4, block_p // 128)))
    return tok
