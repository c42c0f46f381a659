"""Tile parameters of the kernel families and their defaults per device and dtype.

One frozen dataclass per family (``DecodeTiles``, ``PrefillTiles``, ``GemvTiles``,
``StoreTiles``) and one function each that picks the default for a device, dtype and the shapes
that matter (``decode_tiles``, ``prefill_tiles``, ``gemv_tiles``, ``store_tiles``). The public
launchers take ``tiles=None`` (the default) or a value from ``dataclasses.replace`` on a default,
which is how ``benchmarks/`` sweep them. Every choice is a fixed function of its inputs (no
autotuning: the decode path is captured in CUDA graphs). The measurements behind each default
are in BENCHMARKS.md ("Kernel design notes moved from the code" and the sections it names).

The dataclasses check their own values (``ValueError``); what depends on the call (``block_n``
against the page size, TMA against the pool's strides) the launchers check.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch
import triton

from kernels import pdl_chain
from kernels.device import capability, sm_count

# Whether ``gemv_tiles`` picks split-K for narrow weights (``gemv_split_k``): on (the decode A/B
# in BENCHMARKS.md, "Split-K for narrow projections"); ``benchmarks/decode_e2e.py`` turns it off.
GEMV_SPLIT_K = True


def _pow2(name: str, value: int) -> None:
    if value < 1 or value & (value - 1):
        raise ValueError(f"{name} must be a power of two >= 1, got {value}")


@dataclass(frozen=True)
class DecodeTiles:
    """Tiles of split-KV decode stage 1 (``kernels/decode_attention.py``) and its combine.

    Attributes:
        block_n: keys per iteration, a power of two that divides or is a multiple of the page
            size.
        num_warps, num_stages: Triton launch options of stage 1.
        int8_magic: INT8 code conversion: 0 ``cvt``, 1 the magic-number trick with integer ops,
            2 the same in packed inline PTX (GPU only; runs as 1 under the interpreter).
        pdl: launch stage 1 and the combine with programmatic dependent launch (used on sm_90+
            only, ignored elsewhere; results unchanged).
        lazy_rescale: conditional rescaling in unmasked blocks (FlashAttention-4).
        programs_per_sm: sets the default split count (``kernels.decode_plan.default_num_splits``);
            not a launch option of the kernel itself.
    """

    block_n: int
    num_warps: int
    num_stages: int
    int8_magic: int = 0
    pdl: bool = True
    lazy_rescale: bool = True
    programs_per_sm: int = 2

    def __post_init__(self):
        _pow2("block_n", self.block_n)
        _pow2("num_warps", self.num_warps)
        if self.num_stages < 1 or self.programs_per_sm < 1:
            raise ValueError("num_stages and programs_per_sm must be >= 1")
        if self.int8_magic not in (0, 1, 2):
            raise ValueError(f"int8_magic must be 0 (cvt), 1 or 2 (magic number), got "
                             f"{self.int8_magic}")


# On a GPU, per cache kind (BENCHMARKS.md, "Decode"): 16-bit caches 128-key blocks on 4 warps,
# two programs per SM; INT8 64-key blocks on 4 warps, four programs per SM (66 splits for 8 KV
# heads on 132 SMs), the codes converted by the packed magic number. (INT8 ran one-warp programs,
# eight per SM, before: BENCHMARKS.md has the A/B.)
_DECODE_16BIT = DecodeTiles(block_n=128, num_warps=4, num_stages=2, int8_magic=0,
                            programs_per_sm=2)
_DECODE_INT8 = DecodeTiles(block_n=64, num_warps=4, num_stages=2, int8_magic=2,
                           programs_per_sm=4)


def decode_tiles(device: torch.device | str, kv_dtype: torch.dtype | None, *,
                 page_size: int = 64, rows: int = 1) -> DecodeTiles:
    """The default ``DecodeTiles`` for a cache of ``kv_dtype`` (int8 or the model dtype; None:
    16-bit) on ``device``, for steps of ``rows = n * group`` tile rows.

    A tile of fewer than 4 warps with more than 16 rows would hold a ``64 x head_dim`` float32
    accumulator in one or two warps: such steps take 4 warps and 64-key blocks. Under the
    interpreter (a CPU device) a block is one page (``block_n = page_size``).
    """
    base = _DECODE_INT8 if kv_dtype == torch.int8 else _DECODE_16BIT
    big_tile = max(16, triton.next_power_of_2(rows)) > 16 and base.num_warps < 4
    block_n = 64 if big_tile else base.block_n
    if capability(device) is None:
        block_n = page_size
    return dataclasses.replace(base, block_n=block_n, num_warps=4 if big_tile else base.num_warps)


@dataclass(frozen=True)
class PrefillTiles:
    """Tiles of paged prefill attention (``kernels/prefill_attention.py``).

    Attributes:
        block_m: queries per program, a power of two (>= 16 on a GPU).
        block_n: keys per iteration, a power of two that divides or is a multiple of the page
            size (>= 16 on a GPU; with ``use_tma`` at most the page size).
        num_warps, num_stages: Triton launch options.
        use_tma: load K/V tiles through TMA tensor descriptors (Hopper+; the pool's page and
            head strides must be multiples of its last dim).
        qk_int8: for an INT8 pool and 16-bit queries, score with two int8 dots on the raw key
            codes (``qk_int8_supported`` says where it may be on).
        stage_q: with ``qk_int8``, pass the int8 query halves through ``out`` so that the MMA
            reads them from shared memory (ignored without ``qk_int8``).
    """

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    use_tma: bool = False
    qk_int8: bool = False
    stage_q: bool = False

    def __post_init__(self):
        _pow2("block_m", self.block_m)
        _pow2("block_n", self.block_n)
        _pow2("num_warps", self.num_warps)
        if self.num_stages < 1:
            raise ValueError(f"num_stages must be >= 1, got {self.num_stages}")


def qk_int8_supported(device: torch.device | str, q_dtype: torch.dtype, kv_dtype: torch.dtype,
                      head_dim: int) -> bool:
    """Whether prefill may score with int8 dots: an INT8 pool, 16-bit queries, head_dim up to
    1024 (exact int32 sums) and, on CUDA, sm_80+ and head_dim >= 32 (the int8 MMA's K)."""
    cap = capability(device)
    return (kv_dtype == torch.int8 and q_dtype != torch.float32 and head_dim <= 1024
            and (cap is None or (head_dim >= 32 and cap >= (8, 0))))


def prefill_tiles(device: torch.device | str, q_dtype: torch.dtype, kv_dtype: torch.dtype, *,
                  max_query_len: int, page_size: int, head_dim: int,
                  tma: bool = True) -> PrefillTiles:
    """The default ``PrefillTiles`` for a step; ``tma``: whether the pool allows TMA loads.

    - Interpreter (CPU): 16 x min(16, page_size) tiles keep the tests quick.
    - Hopper (sm_90+) with TMA, 16-bit operands and head_dim <= 128: BLOCK_M 128 on 8 warps for
      16-bit pools, 64 on 4 warps for INT8, and deep pipelines (6 stages, INT8 7). The stage
      count matters because of the page table: Triton's pipeliner (``AssignLatencies``) gives a
      pipelined load a latency of ``(num_stages - 1) // (indirection levels + 1)`` iterations, and
      the K/V loads sit one indirection below the page-id load, so 6-7 stages issue them two to
      three iterations ahead. These tiles need up to ~132 KB of shared memory at head_dim 128;
      float32 operands or head_dim 256 would need ~260 KB (over the 227 KB a Hopper CTA may use)
      and keep 4 warps and 3 stages, as do pointer loads. ``tests/compile_prefill_tiles.py``
      compiles the defaults for sm_90 and reports their shared memory.
    - Older GPUs: pointer loads, BLOCK_M up to 128 (8 warps at 128), 2 stages.
    - BLOCK_M shrinks to the chunk (at least 16) for short chunks; BLOCK_N is 64 (at most a page).
    - ``qk_int8`` where ``qk_int8_supported``; ``stage_q`` with it on sm_90 (where it was
      measured) and in the interpreter (so that CPU tests cover it).
    """
    cap = capability(device)
    is_int8 = kv_dtype == torch.int8
    elem_bytes = max(torch.empty((), dtype=q_dtype).element_size(),
                     torch.empty((), dtype=kv_dtype).element_size())
    qk_int8 = qk_int8_supported(device, q_dtype, kv_dtype, head_dim)
    stage_q = qk_int8 and (cap is None or cap[0] == 9)
    if cap is None:
        return PrefillTiles(16, min(16, page_size), 4, 1, False, qk_int8, stage_q)
    hopper = cap[0] >= 9
    fit = max(16, triton.next_power_of_2(max_query_len))
    block_n = min(64, page_size)
    if hopper and block_n >= 16:
        block_m = min(64 if is_int8 else 128, fit)
        if tma and elem_bytes <= 2 and head_dim <= 128:
            return PrefillTiles(block_m, block_n, 8 if block_m >= 128 else 4, 7 if is_int8 else 6,
                                True, qk_int8, stage_q)
        return PrefillTiles(block_m, block_n, 4, 3, tma, qk_int8, stage_q)
    block_m = min(128, fit)
    return PrefillTiles(block_m, 64, 8 if block_m >= 128 else 4, 3 if hopper else 2, False,
                        qk_int8, stage_q)


@dataclass(frozen=True)
class GemvTiles:
    """Tiles of the decode GEMM (``kernels/gemv.py``).

    Attributes:
        block_n: weight rows (output features) per program, a power of two >= 16.
        block_k: columns per iteration, a power of two >= 16.
        num_stages: weight tiles in flight (Triton's software pipeline).
        num_warps: Triton launch option.
        split_k: programs along K per block of rows (1: none). More than 1 (plain ``gemv``
            only) writes float32 partial sums that a second kernel adds in a fixed order: a
            narrow weight then fills more SMs (an ``[1024, K]`` weight in blocks of 32 rows is
            32 programs on an H200's 132 SMs). ``gemv_tiles`` picks it (``gemv_split_k``)
            when ``GEMV_SPLIT_K`` is set.
        pdl: run on the PDL chain (``kernels/pdl_chain.py``; sm_90+ only, ignored elsewhere;
            results unchanged); ``gemv_tiles`` sets it from ``kernels.pdl_chain.ENABLED``.

    NOTE: a row's result is bit-identical whatever the other rows only because the tiles never
    depend on the number of rows; keep any picker a function of the weight alone.
    """

    block_n: int
    block_k: int
    num_stages: int
    num_warps: int = 4
    split_k: int = 1
    pdl: bool = False

    def __post_init__(self):
        _pow2("block_n", self.block_n)
        _pow2("block_k", self.block_k)
        _pow2("num_warps", self.num_warps)
        if self.block_n < 16 or self.block_k < 16 or self.num_stages < 1:
            raise ValueError("block_n and block_k must be >= 16 (tensor-core dots), num_stages "
                             ">= 1")
        if not isinstance(self.split_k, int) or self.split_k < 1:
            raise ValueError(f"split_k must be an integer >= 1, got {self.split_k!r}")


# On a GPU, per weight class (``gemv_tiles``; BENCHMARKS.md, "Decode projection tiles"): wide
# weights (n >= 6144), narrow ones, and the SwiGLU gate/up pair (per half). ``split_k`` and
# ``pdl`` are set per call; ``benchmarks/decode_e2e.py --decode-tiles`` replaces these for a
# process (an in-step A/B of a tile).
_GEMV_WIDE = GemvTiles(block_n=64, block_k=128, num_stages=5)
_GEMV_NARROW = GemvTiles(block_n=32, block_k=256, num_stages=5)
_GEMV_SWIGLU = GemvTiles(block_n=32, block_k=128, num_stages=3)


def gemv_tiles(device: torch.device | str, dtype: torch.dtype, n: int, k: int,
               swiglu: bool) -> GemvTiles:
    """The default ``GemvTiles`` for a ``[n, k]`` weight of ``dtype`` (``n``: output features;
    for SwiGLU, of one half) on ``device``; from the weight alone (row invariance).

    On a GPU (Qwen3-8B shapes on an H200, BENCHMARKS.md "Decode projections"): wide weights
    (n >= 6144: qkv_proj, lm_head) 64 x 128 with 5 stages; n < 6144 (o_proj, down_proj) 32 x 256
    with 5 stages; the SwiGLU gate/up pair 32 x 128 with 3 stages (each program streams two
    tiles). float32 takes half the columns (the same bytes per tile, within the shared memory a
    CTA may use). The interpreter: small tiles. ``pdl`` follows ``kernels.pdl_chain.ENABLED``.
    """
    if capability(device) is None:
        return GemvTiles(16, min(64, max(16, triton.next_power_of_2(k))), 1)
    base = _GEMV_SWIGLU if swiglu else _GEMV_WIDE if n >= 6144 else _GEMV_NARROW
    elem_bytes = torch.empty((), dtype=dtype).element_size()
    block_k = max(16, base.block_k // max(1, elem_bytes // 2))
    split = 1
    if GEMV_SPLIT_K and not swiglu:
        split = gemv_split_k(triton.cdiv(n, base.block_n), triton.cdiv(k, block_k),
                             sm_count(device))
    return dataclasses.replace(base, block_k=block_k, split_k=split, pdl=pdl_chain.ENABLED)


def gemv_split_k(row_blocks: int, k_tiles: int, sms: int, max_split: int = 8,
                 min_tiles: int = 2) -> int:
    """The split-K factor for a weight of ``row_blocks`` program rows and ``k_tiles`` column
    tiles on a GPU of ``sms`` SMs: doubled while the doubled program count still fits in one wave
    (``<= sms``), up to ``max_split``, each split keeping ``min_tiles`` tiles or more (a shorter
    run cannot fill the software pipeline). 1 when the weight fills half the GPU or more (an
    8B's 128 programs of ``o_proj``); 4 for a 0.6B's ``o_proj`` (32 programs on 132 SMs).

    A function of the weight and the device alone, never of the rows (row invariance).
    """
    split = 1
    while (row_blocks * split * 2 <= sms and split * 2 <= max_split
           and k_tiles >= 2 * split * min_tiles):
        split *= 2
    return split


@dataclass(frozen=True)
class StoreTiles:
    """Launch options of the KV store (``kernels/store_kv.py``; its tile is the token's
    ``[kv_heads, head_dim]`` padded to powers of two, fixed by the shapes).

    Attributes:
        num_warps: Triton launch option.
        pdl: signal ``griddepcontrol.launch_dependents`` at the start so that a PDL-launched
            successor (decode stage 1) may be scheduled early (sm_90+ only, ignored elsewhere).
    """

    num_warps: int = 4
    pdl: bool = True

    def __post_init__(self):
        _pow2("num_warps", self.num_warps)


def store_tiles(device: torch.device | str, dtype: torch.dtype) -> StoreTiles:
    """The default ``StoreTiles`` (the same for every device and cache dtype)."""
    return StoreTiles()
