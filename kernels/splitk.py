"""Split-K partial sums of the decode GEMV (``kernels/gemv.py``): their layout, the fixed-order
reduce kernel, and ``SplitKPartials``, a projection not yet reduced.

A split-K GEMV writes program ``(j, s)``'s float32 sum over the ``s``-th run of K into a workspace
``ws[s, m, n]`` (``[splits, 16, N]``, the row dimension padded to the GEMV's 16). The result is
``round(ws[0] + ws[1] + ... )``: added in float32 in the order ``s = 0, 1, ...``, rounded once to
the model dtype. ``_splitk_reduce_kernel`` does that as a kernel of its own. A consumer that loads
the projection's rows anyway (the add + RMSNorm after ``o_proj`` and ``down_proj``,
``kernels/rmsnorm.py``) can do the same adds as it loads them and save the reduce's launch: it
takes a ``SplitKPartials`` and, added in the same order and rounded the same way, gets the same
bits (``reduce_rows`` is the one helper both use).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.device import supports_pdl

SPLITK_REDUCE_COLUMNS = 128  # columns per program of the split-K reduce


@triton.jit
def reduce_rows(ws_ptr, offs, mask, split_stride, SPLITS: tl.constexpr):
    """float32 ``ws[0][offs] + ws[1][offs] + ...`` added in the order s = 0, 1, ... (the split-K
    result before its rounding; ``split_stride`` elements between splits)."""
    acc = tl.load(ws_ptr + offs, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLITS):
        acc += tl.load(ws_ptr + s * split_stride + offs, mask=mask, other=0.0)
    return acc


@triton.jit  # M specialized on purpose: latency-bound, and at M == 1 half its loads go
def _splitk_reduce_kernel(ws_ptr, y_ptr, M, N, stride_ym, SPLIT_K: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          USE_PDL: tl.constexpr = False):
    """y[m, n] = round(sum over s = 0, 1, ... of ws[s, m, n]): one program per BLOCK_N columns."""
    if USE_PDL:  # the PDL chain: let the successor get scheduled, then wait for the partials
        tl.extra.cuda.gdc_launch_dependents()
        tl.extra.cuda.gdc_wait()
    rows_m = tl.arange(0, BLOCK_M)
    out_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows_m < M)[:, None] & (out_n < N)[None, :]
    offs = rows_m[:, None] * N + out_n[None, :]
    acc = reduce_rows(ws_ptr, offs, mask, BLOCK_M * N, SPLIT_K)
    tl.store(y_ptr + rows_m[:, None] * stride_ym + out_n[None, :],
             acc.to(y_ptr.dtype.element_ty), mask=mask)


def split_runs(k: int, block_k: int, split_k: int) -> tuple[int, int]:
    """``(splits, columns per split)`` for split-K over ``k`` columns in ``block_k`` tiles: at
    most ``split_k`` runs of whole tiles, the last one shorter, none empty."""
    k_tiles = triton.cdiv(k, block_k)
    per = triton.cdiv(k_tiles, min(split_k, k_tiles)) * block_k
    return triton.cdiv(k, per), per


@dataclass(frozen=True)
class SplitKPartials:
    """A split-K projection before its reduce (module notes).

    Attributes:
        ws: float32 [splits, 16, N], contiguous: ``ws[s, m]`` is split ``s``'s sum for row ``m``
            (rows ``>= rows`` unused).
        rows: the projection's row count M (1 to 16).

    Raises:
        ValueError: ``ws`` not a contiguous float32 [splits, >= rows, N].
        dtype: the model dtype the sum is rounded to.
        pdl: the reduce launches on the PDL chain (``kernels/pdl_chain.py``).
    """

    ws: torch.Tensor
    rows: int
    dtype: torch.dtype
    pdl: bool = False

    def __post_init__(self):
        if (self.ws.dim() != 3 or self.ws.dtype != torch.float32 or not self.ws.is_contiguous()
                or not 0 <= self.rows <= self.ws.shape[1]):
            raise ValueError(f"SplitKPartials: ws must be a contiguous float32 [splits, rows, N] "
                             f"with at least {self.rows} rows, got {self.ws.dtype} "
                             f"{tuple(self.ws.shape)}")

    @property
    def shape(self) -> tuple[int, int]:
        """``(M, N)``: the shape of the reduced projection."""
        return self.rows, self.ws.shape[2]

    @property
    def splits(self) -> int:
        return self.ws.shape[0]

    def reduce(self) -> torch.Tensor:
        """The projection, [M, N] in ``dtype``: the reduce kernel (one launch). Allocation
        only, no sync: safe under CUDA graph capture."""
        m, n = self.shape
        y = torch.empty((m, n), dtype=self.dtype, device=self.ws.device)
        chain = self.pdl and supports_pdl(self.ws.device)
        _splitk_reduce_kernel[(triton.cdiv(n, SPLITK_REDUCE_COLUMNS),)](
            self.ws, y, m, n, y.stride(0), SPLIT_K=self.splits, BLOCK_M=self.ws.shape[1],
            BLOCK_N=SPLITK_REDUCE_COLUMNS,
            **({"USE_PDL": True, "launch_pdl": True} if chain else {}))
        return y
