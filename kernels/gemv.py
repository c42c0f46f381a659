"""The linear layers of a decode step, ``y = x @ W^T`` for 1 to 16 rows ``x``: a skinny GEMM that
streams the weight at the memory bandwidth, with the same result for a row whatever the others.

At batch 1 every projection of a decode step reads its whole weight for a handful of rows, so the
step is bound by weight bytes (15 GB per token for Qwen3-8B). cuBLAS (``F.linear``) leaves part of
the read bandwidth unused on the smaller projections at these row counts; this kernel streams them
faster (BENCHMARKS.md, "Decode projections", with the tile sweep; the tiles:
``kernels.tiles.gemv_tiles``).

Each program owns ``BLOCK_N`` consecutive weight rows (output features) and walks the whole of K in
``BLOCK_K`` columns: the weight tile ``[BLOCK_N, BLOCK_K]`` comes in through Triton's software
pipeline (``num_stages`` tiles in flight), the rows of ``x`` are padded to 16 (masked loads, zero
rows) and one ``tl.dot`` per tile accumulates ``[16, BLOCK_N]`` in float32 on the tensor cores.
Rows past N are clamped to the last row (read again, never stored). The result is rounded once to
the model dtype, as ``F.linear`` does; only the summation order differs from cuBLAS. float32
operands multiply in full precision (``input_precision="ieee"``, not TF32), as ``F.linear`` does
with torch's default ``allow_tf32=False``.

**Row invariance.** The tiles depend on the weight's shape and dtype only, never on the number of
rows, and a tensor-core dot computes each output row from that row alone. So a row's projections
are bit-identical whether it is alone (a decode token) or one of up to 16 (a short step). The
engine relies on it: its graph steps run one token ahead (``infer/graphs.py``), so a token that
eager mode computes inside a short step is computed alone in graph mode, and both must cache the
same K/V. (Steps of more than 16 tokens go through cuBLAS and the prefill attention kernel, so
results there do depend on how a prompt is chunked.)

**Split-K** (``GemvTiles.split_k`` > 1, plain ``gemv`` only): program ``(j, s)`` walks the
``s``-th of ``split_k`` equal runs of K-tiles for rows block ``j`` and stores its float32 sum in
a ``[split_k, 16, N]`` workspace; ``_splitk_reduce_kernel`` (``kernels/splitk.py``) adds the
partials in the order ``s = 0, 1, ...`` and rounds once. The summation order then depends on the
weight's shape and the tiles only, so rows stay invariant and results deterministic (no atomics).
With ``reduce=False`` the caller gets the partials and a consumer adds them as it loads them
(the add + RMSNorm that follows ``o_proj`` and ``down_proj``), bit for bit as the reduce would.

``gemv_swiglu`` is the MLP's gate/up projection with SwiGLU in its epilogue: each program computes
the same ``BLOCK_N`` rows of the gate half and of the up half and writes ``silu(gate) * up``
directly, with the numerics of ``F.linear`` then ``kernels/silu_mul.py`` (the projection rounded
to the model dtype, then a rounding after silu and after the product). The ``[T, 2I]`` projection
output never exists.

**PDL chain** (``GemvTiles.pdl``, ``kernels/pdl_chain.py``): launched with programmatic dependent
launch, a program waits for its predecessor (the norm or the combine that writes ``x``) before
its first load, streams the weight, and lets its successor be scheduled when its weight stream
is done; the split-K reduce waits and signals at its start. Results are the same bit for bit;
only when each kernel starts moves.

Tiling after the split-K-free "skinny GEMM" of decode kernels in llama.cpp (``mul_mat_vec``) and
vLLM; the gate/up epilogue follows vLLM's ``silu_and_mul`` numerics. SwiGLU: Shazeer 2020.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.device import supports_pdl
from kernels.silu_mul import silu_mul_rounded
from kernels.splitk import SplitKPartials, _splitk_reduce_kernel, split_runs  # noqa: F401
from kernels.tiles import GemvTiles, gemv_tiles

MAX_ROWS = 16  # rows of x per call: the dot's M, padded


@triton.jit
def _gemv_kernel(
    x_ptr,  # [M, K] model dtype, last dim contiguous
    w_ptr,  # [N, K] (SWIGLU: [2N, K] = [gate rows; up rows]) model dtype, last dim contiguous
    y_ptr,  # [M, N] model dtype, last dim contiguous
    M, N, K, stride_xm, stride_wn, stride_ym,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    EVEN_K: tl.constexpr,  # K % BLOCK_K == 0: no column mask
    SWIGLU: tl.constexpr,
    STAGES: tl.constexpr,
    DOT_PREC: tl.constexpr,  # "ieee" for float32 operands (no TF32), "tf32" (unused) otherwise
    SPLIT_K: tl.constexpr = 1,  # > 1: y_ptr is the float32 [SPLIT_K, BLOCK_M, N] workspace
    K_PER_SPLIT: tl.constexpr = 0,  # columns per split, a multiple of BLOCK_K (SPLIT_K > 1)
    USE_PDL: tl.constexpr = False,  # PDL chain (module notes): wait, stream, signal
    # The RMSNorm around the GEMV (``kernels/gemv_norm.py``); None / False: unused.
    res_ptr=None,  # RESIDUAL_OUT: [M, N] residual stream in, model dtype
    g_ptr=None,  # RESIDUAL_OUT: [N] the next RMSNorm's weight, model dtype
    s_ptr=None,  # RESIDUAL_OUT: [M, N] the new stream out (residual + x @ W^T), model dtype
    sq_ptr=None,  # [NUM_SQ, BLOCK_M] float32 sums of squares: out (RESIDUAL_OUT), in (RSTD_IN)
    stride_rm=None,  # row stride of res_ptr and s_ptr (elements)
    eps=None,  # RSTD_IN: the RMSNorm's epsilon
    NUM_SQ=None,  # RSTD_IN: rows of sq_ptr (the producer's programs)
    RESIDUAL_OUT: tl.constexpr = False,  # y = round(s * g), with s and its sums of squares
    RSTD_IN: tl.constexpr = False,  # acc *= rsqrt(sum(sq) / K + eps) before the rounding
    SQ_BLOCKS: tl.constexpr = 1,  # RSTD_IN: next power of two >= NUM_SQ
):
    pid = tl.program_id(0)
    dtype = y_ptr.dtype.element_ty
    rows_m = tl.arange(0, BLOCK_M)
    in_m = rows_m < M
    rows_n = tl.minimum(pid * BLOCK_N + tl.arange(0, BLOCK_N), N - 1).to(tl.int64)
    cols = tl.arange(0, BLOCK_K)
    x_tile = x_ptr + rows_m[:, None] * stride_xm + cols[None, :]
    w_tile = w_ptr + rows_n[:, None] * stride_wn + cols[None, :]
    up_tile = w_ptr + (rows_n + N)[:, None] * stride_wn + cols[None, :]  # SWIGLU: up rows
    acc = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    acc_up = tl.zeros([BLOCK_M, BLOCK_N], tl.float32)
    k_lo, k_hi = 0, K
    if SPLIT_K > 1:
        k_lo = tl.program_id(1) * K_PER_SPLIT
        k_hi = tl.minimum(k_lo + K_PER_SPLIT, K)
    if RESIDUAL_OUT:
        res_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
        g = tl.load(g_ptr + res_n, mask=res_n < N, other=0.0).to(tl.float32)  # a weight
    if USE_PDL:
        tl.extra.cuda.gdc_wait()  # x (the predecessor's output) and y's storage from here on
    # Loads the epilogue needs, issued before the weight stream so that they arrive during it.
    if RESIDUAL_OUT:
        res = tl.load(res_ptr + rows_m[:, None] * stride_rm + res_n[None, :],
                      mask=in_m[:, None] & (res_n < N)[None, :], other=0.0)
    if RSTD_IN:
        sq_rows = tl.arange(0, SQ_BLOCKS)
        sq_in = tl.load(sq_ptr + sq_rows[:, None] * BLOCK_M + rows_m[None, :],
                        mask=(sq_rows < NUM_SQ)[:, None] & in_m[None, :], other=0.0)
    for k0 in tl.range(k_lo, k_hi, BLOCK_K, num_stages=STAGES):
        if EVEN_K:
            x = tl.load(x_tile + k0, mask=in_m[:, None], other=0.0)
            w = tl.load(w_tile + k0)
        else:
            in_k = k0 + cols < K
            x = tl.load(x_tile + k0, mask=in_m[:, None] & in_k[None, :], other=0.0)
            w = tl.load(w_tile + k0, mask=in_k[None, :], other=0.0)
        acc = tl.dot(x, tl.trans(w), acc, input_precision=DOT_PREC)
        if SWIGLU:
            if EVEN_K:
                u = tl.load(up_tile + k0)
            else:
                u = tl.load(up_tile + k0, mask=in_k[None, :], other=0.0)
            acc_up = tl.dot(x, tl.trans(u), acc_up, input_precision=DOT_PREC)
    if USE_PDL:
        # the weight stream is done: the successor's programs may take the SMs this one leaves
        tl.extra.cuda.gdc_launch_dependents()
    if RSTD_IN:  # the RMSNorm's rstd, applied after the dot (kernels/gemv_norm.py)
        rstd = tl.math.rsqrt(tl.sum(sq_in, axis=0) / K + eps)
        acc = acc * rstd[:, None]
        acc_up = acc_up * rstd[:, None]
    if SWIGLU:  # F.linear's rounding, then kernels/silu_mul.py's two roundings
        acc = silu_mul_rounded(acc.to(dtype).to(tl.float32), acc_up.to(dtype).to(tl.float32),
                               dtype)
    out_n = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    if RESIDUAL_OUT:  # the torch path's rounded projection and add, then the next norm's inputs
        s = (acc.to(dtype).to(tl.float32) + res.to(tl.float32)).to(dtype)
        out_mask = in_m[:, None] & (out_n < N)[None, :]
        tl.store(s_ptr + rows_m[:, None] * stride_rm + out_n[None, :], s, mask=out_mask)
        sf = tl.where(out_mask, s.to(tl.float32), 0.0)
        tl.store(sq_ptr + pid * BLOCK_M + rows_m, tl.sum(sf * sf, axis=1))
        acc = sf * g[None, :]
    if SPLIT_K > 1:  # the partial sum, in float32, for _splitk_reduce_kernel
        part = y_ptr + tl.program_id(1) * BLOCK_M * N
        tl.store(part + rows_m[:, None] * N + out_n[None, :], acc,
                 mask=in_m[:, None] & (out_n < N)[None, :])
    else:
        tl.store(y_ptr + rows_m[:, None] * stride_ym + out_n[None, :], acc.to(dtype),
                 mask=in_m[:, None] & (out_n < N)[None, :])


def _check(x: torch.Tensor, weight: torch.Tensor, rows_per_out: int) -> tuple[int, int]:
    if x.dim() != 2 or not 0 <= x.shape[0] <= MAX_ROWS or (x.stride(1) != 1 and x.shape[1] > 1):
        raise ValueError(f"gemv: x must be [M, K] with M <= {MAX_ROWS} and a contiguous last "
                         f"dim, got {tuple(x.shape)}")
    if x.device != weight.device:
        raise ValueError(f"gemv: x is on {x.device}, the weight on {weight.device}")
    if weight.dim() != 2 or (weight.stride(1) != 1 and weight.shape[1] > 1):
        raise ValueError("gemv: weight must be [N, K] with a contiguous last dim")
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32) or weight.dtype != x.dtype:
        raise ValueError(f"gemv: x and weight must share a float dtype, got {x.dtype} and "
                         f"{weight.dtype}")
    if x.shape[1] != weight.shape[1]:
        raise ValueError(f"gemv: x has {x.shape[1]} columns, the weight {weight.shape[1]}")
    if weight.shape[0] % rows_per_out:
        raise ValueError(f"gemv_swiglu: the weight needs an even row count (gate and up halves), "
                         f"got {weight.shape[0]}")
    return weight.shape[0] // rows_per_out, weight.shape[1]


def _launch(x: torch.Tensor, weight: torch.Tensor, n: int, k: int, swiglu: bool,
            tiles: GemvTiles | None, reduce: bool = True) -> torch.Tensor | SplitKPartials:
    y = torch.empty((x.shape[0], n), dtype=x.dtype, device=x.device)
    if n == 0 or x.shape[0] == 0:
        return y
    if k == 0:  # an empty sum: 0, and silu(0) * 0 = 0
        return y.zero_()
    if tiles is None:
        tiles = gemv_tiles(x.device, x.dtype, n, k, swiglu)
    if tiles.split_k > 1 and not swiglu:
        partials = _launch_split(x, weight, n, k, tiles)
        return partials.reduce() if reduce else partials
    launch_unsplit(x, weight, y, n, k, swiglu, tiles)
    return y


def launch_unsplit(x: torch.Tensor, weight: torch.Tensor, y: torch.Tensor, n: int, k: int,
                   swiglu: bool, tiles: GemvTiles, **epilogue) -> None:
    """``_gemv_kernel`` without split-K over ``y``'s ``n`` columns (``n``, ``k`` >= 1), with
    ``epilogue``'s extra arguments (``kernels/gemv_norm.py``'s residual and norm ones)."""
    _gemv_kernel[(triton.cdiv(n, tiles.block_n),)](
        x, weight, y, x.shape[0], n, k, x.stride(0), weight.stride(0), y.stride(0),
        BLOCK_M=MAX_ROWS, BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k,
        EVEN_K=k % tiles.block_k == 0, SWIGLU=swiglu, STAGES=tiles.num_stages,
        DOT_PREC="ieee" if x.dtype == torch.float32 else "tf32", num_warps=tiles.num_warps,
        **epilogue, **_chain_options(x.device, tiles))


def _chain_options(device: torch.device, tiles: GemvTiles) -> dict:
    """The PDL-chain constexpr and launch option (``kernels/pdl_chain.py``): none unless
    ``tiles.pdl`` and the device has PDL."""
    if tiles.pdl and supports_pdl(device):
        return {"USE_PDL": True, "launch_pdl": True}
    return {}


def _launch_split(x: torch.Tensor, weight: torch.Tensor, n: int, k: int,
                  tiles: GemvTiles) -> SplitKPartials:
    """Split-K (module notes): the partial sums, not yet reduced (``kernels/splitk.py``)."""
    splits, per = split_runs(k, tiles.block_k, tiles.split_k)
    ws = torch.empty((splits, MAX_ROWS, n), dtype=torch.float32, device=x.device)
    chain = _chain_options(x.device, tiles)
    _gemv_kernel[(triton.cdiv(n, tiles.block_n), splits)](
        x, weight, ws, x.shape[0], n, k, x.stride(0), weight.stride(0), n,
        BLOCK_M=MAX_ROWS, BLOCK_N=tiles.block_n, BLOCK_K=tiles.block_k,
        EVEN_K=k % per == 0,  # every split a whole number of full column blocks
        SWIGLU=False, STAGES=tiles.num_stages,
        DOT_PREC="ieee" if x.dtype == torch.float32 else "tf32", SPLIT_K=splits,
        K_PER_SPLIT=per, num_warps=tiles.num_warps, **chain)
    return SplitKPartials(ws, x.shape[0], x.dtype, pdl=bool(chain))


def gemv(x: torch.Tensor, weight: torch.Tensor, *, tiles: GemvTiles | None = None,
         reduce: bool = True) -> torch.Tensor | SplitKPartials:
    """``x @ weight.T`` for a decode step's 1 to 16 rows (``F.linear`` without bias).

    Args:
        x: [M, K] float16/bfloat16/float32, M <= 16 (0 gives an empty result), last dim
            contiguous, on the weight's device.
        weight: [N, K] in x's dtype, last dim contiguous (an ``nn.Linear`` weight).
        tiles: a ``kernels.tiles.GemvTiles``; None takes ``gemv_tiles`` for the weight (never a
            function of M: row invariance); its ``split_k`` > 1 adds a float32 workspace of
            ``split_k x 16 x N`` and a second kernel (the reduce).
        reduce: False leaves a split-K result unreduced: a ``kernels.splitk.SplitKPartials``
            for a consumer that adds the partials itself (``kernels/rmsnorm.py``), one launch
            fewer; without split-K the tensor as usual.

    Returns:
        A new [M, N] tensor in x's dtype: float32 accumulation, one rounding at the end; each row
        bit-identical to the same row computed alone (module notes). Allocation only, no sync:
        safe under CUDA graph capture. Oracle: ``kernels.reference.linear``. With
        ``reduce=False`` and split-K: the ``SplitKPartials`` whose ``reduce()`` is that tensor.

    Raises:
        ValueError: M over 16, K mismatch, mismatched devices or non-float dtypes, or a last
            dim that is not contiguous.
    """
    n, k = _check(x, weight, 1)
    return _launch(x, weight, n, k, swiglu=False, tiles=tiles, reduce=reduce)


def gemv_swiglu(x: torch.Tensor, weight: torch.Tensor, *,
                tiles: GemvTiles | None = None) -> torch.Tensor:
    """SwiGLU of the fused gate/up projection, ``silu(x @ W_gate^T) * (x @ W_up^T)``, one kernel.

    Args:
        x: [M, K] as in ``gemv``.
        weight: [2I, K], the gate rows then the up rows (the model's ``gate_up_proj.weight``).
        tiles: as in ``gemv`` (``gemv_tiles`` of one half, ``swiglu=True``).

    Returns:
        A new [M, I] tensor in x's dtype, rounded as ``kernels.reference.silu_mul`` of
        ``kernels.reference.linear(x, weight)`` rounds (up to the summation order and Triton's
        approximate float32 ``exp`` and division); rows as in ``gemv``.

    Raises:
        ValueError: as ``gemv``, or an odd row count.
    """
    n, k = _check(x, weight, 2)
    return _launch(x, weight, n, k, swiglu=True, tiles=tiles)
