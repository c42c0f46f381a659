"""L2 prefetch of a byte range of a tensor (``cp.async.bulk.prefetch.L2``, sm_90+).

A decode step streams ~15 GB of weights (Qwen3-8B) through a chain of kernels, and between the
projections the DRAM idles: while the small kernels of attention run (q/k-norm + RoPE, the KV
store, split-KV stage 1 and the combine: ~13 us a layer at 4k positions), and while each GEMV
ramps up. A kernel of this file, launched on a side stream beside that chain
(``models/weight_prefetch.py``), asks the memory system to bring the next projections' weights
into L2 then, so that they are read from L2 when their GEMV runs.

One program issues ``LANES`` bulk prefetches of ``CHUNK`` bytes each from one thread apiece: a
prefetch is a hint with no result, nothing waits for it, and the kernel ends as soon as it has
issued them; the memory system fetches the lines afterwards. It writes nothing, so no result of
any other kernel can change with it (the GPU test checks the decode step bit for bit).

The idea, keeping the DRAM streaming the next operation's weights while the current one's
dependencies resolve, is the persistent "megakernel" decoders' (Hazy Research 2025); here it is
done beside the chain instead of inside one kernel.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.device import supports_pdl

CHUNK = 16384  # bytes per bulk prefetch (a multiple of 16; the instruction's size is a u32)
LANES = 16  # prefetches per program (one warp's first 16 threads)
ALIGN = 16  # cp.async.bulk.prefetch: 16-byte aligned address, size a multiple of 16


@triton.jit
def _l2_prefetch_kernel(
    base_ptr,  # uint8 [nbytes] (a view of the range's first byte), 16-byte aligned
    nbytes,  # int64: bytes of the range, a multiple of 16
    CHUNK: tl.constexpr,
    LANES: tl.constexpr,
):
    lane = tl.program_id(0).to(tl.int64) * LANES + tl.arange(0, LANES)
    off = lane * CHUNK
    size = tl.maximum(tl.minimum(nbytes - off, CHUNK), 0).to(tl.int32)
    # a lane past the range (size 0) issues nothing: predicated off
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.gt.s32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; "
        "mov.u32 $0, 0; }",
        "=r,l,r", [base_ptr + off, size], dtype=tl.int32, is_pure=False, pack=1)


def aligned_range(t: torch.Tensor, start: int, nbytes: int) -> tuple[int, int]:
    """The part of bytes ``[start, start + nbytes)`` of ``t``'s data that the prefetch can take:
    the first address rounded up and the size rounded down to whole 16-byte units. Returns
    ``(start, nbytes)`` in bytes from ``t.data_ptr()``; ``nbytes`` may be 0."""
    lo = start + (-(t.data_ptr() + start)) % ALIGN
    hi = start + nbytes
    return lo, max(0, (hi - lo) // ALIGN * ALIGN)


def l2_prefetch(t: torch.Tensor, start: int = 0, nbytes: int | None = None) -> None:
    """Ask for bytes ``[start, start + nbytes)`` of ``t``'s data (default: all of it) to be
    brought into L2, on the current stream. A hint: nothing is written and nothing waits for it.
    Does nothing where the instruction does not exist (before sm_90, the CPU interpreter) or
    when the range holds no whole aligned 16-byte unit.

    Args:
        t: a contiguous tensor (any dtype) on its device, e.g. a projection's weight.
        start: first byte, from ``t.data_ptr()``.
        nbytes: bytes from ``start``; at most ``t.nbytes - start``.

    Raises:
        ValueError: ``t`` is not contiguous, or the range is not inside ``t``.
    """
    nbytes = t.nbytes - start if nbytes is None else nbytes
    if not t.is_contiguous():
        raise ValueError("l2_prefetch needs a contiguous tensor")
    if start < 0 or nbytes < 0 or start + nbytes > t.nbytes:
        raise ValueError(f"bytes [{start}, {start + nbytes}) are not inside the tensor's "
                         f"{t.nbytes} bytes")
    if not supports_pdl(t.device):  # the same rule: sm_90+, never the interpreter
        return
    lo, size = aligned_range(t, start, nbytes)
    if size == 0:
        return
    flat = t.view(-1).view(torch.uint8)[lo:lo + size]
    grid = (triton.cdiv(size, CHUNK * LANES),)
    _l2_prefetch_kernel[grid](flat, size, CHUNK=CHUNK, LANES=LANES, num_warps=1)
