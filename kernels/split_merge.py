"""The split-KV combine folded into decode stage 1: the last split of a (sequence, KV head) to
finish merges all of them (``kernels.decode_attention.MERGE_IN_STAGE1``; issue 16's "combine
folded into stage 1").

``merge_if_last`` runs at the end of each stage-1 program (``kernels/decode_split.py``), after its
partial (``o_part``, ``lse``) is stored:

- Arrival: a CTA barrier (every thread's partial stores come before it), then one atomic add of 1
  to the program row's int32 counter (``counters[b * kv_heads + h]``), acquire-release at GPU
  scope: the release publishes this program's partial, the acquire makes the partials of every
  program that arrived before visible to this one (the pattern of ``kernels/grid_barrier.py``).
- The program that reads ``NUM_SPLITS - 1`` (the last to arrive, whichever split it is) merges:
  a CTA barrier (its threads' loads come after the acquire), then for each tile row of the
  program row (``n * group`` rows, or a slab's ``count * group``: the rows its stage 1 wrote) and
  each ``BLOCK_D`` slice of head_dim, ``kernels.combine.merge_splits``, the combine's own
  arithmetic in its fixed split order, so the output is the combine's bit for bit. Then it puts
  the counter back to 0: the counters are zeroed once (``DecodeWorkspace.allocate``) and a CUDA
  graph replays with no memset. Nobody spins: there is no residency requirement (unlike
  ``grid_barrier``), and the interpreter (programs run one after another) runs it too.
- A later launch's arrivals come after this launch has completed (stream order; with PDL, stage
  1 reaches its workspace stores only after ``gdc_wait``), so the reset is seen by then.

Rows and addresses are those of the combine's programs for the same call: row ``r = t * group +
g`` of program row ``(b, h)`` reads ``o_part[b, h, :, r]`` and writes ``out[b * n + t, h * group
+ g]``; with slabs (``SLAB > 1``: one query per row, ``n`` 1) slab row ``t`` is step row ``b +
t``, so it reads ``o_part[b + t, h, :, g]`` and writes ``out[b + t, h * group + g]``.

The "last block to finish reduces" pattern: CUDA's ``threadFenceReduction`` sample (fence, atomic
ticket, the last block sums the partials) and CUTLASS's stream-K "fixup"; over flash-decoding's
split-KV partials (Dao et al. 2023).
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels.combine import merge_block_s, merge_splits


@triton.jit
def merge_if_last(counter_ptr, o_part_ptr, lse_ptr, out_ptr, pid_bh, b, h, n_rows,
                  stride_ob, stride_oh, stride_os, stride_or, stride_lb, stride_lh, stride_ls,
                  stride_tt, stride_th, NUM_SPLITS: tl.constexpr, GROUP: tl.constexpr,
                  NUM_QUERIES: tl.constexpr, SLAB: tl.constexpr, HEAD_DIM: tl.constexpr,
                  BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr):
    """Arrive at program row ``pid_bh``'s counter; the last of its ``NUM_SPLITS`` programs merges
    the ``n_rows`` tile rows of sequence ``b``, KV head ``h`` into ``out`` and resets the
    counter (module notes). Strides as stage 1's (``o_part``, ``lse``) and the combine's
    (``out``); ``BLOCK_S`` is ``merge_block_s(NUM_SPLITS)``."""
    tl.debug_barrier()  # every thread's partial stores, then the arrival (release)
    arrived = tl.atomic_add(counter_ptr + pid_bh, 1, sem="acq_rel", scope="gpu")
    if arrived == NUM_SPLITS - 1:
        tl.debug_barrier()  # the acquire, then every thread's loads of the other partials
        offs = tl.arange(0, BLOCK_D)
        for r in range(n_rows):
            t = r // GROUP
            g = r % GROUP
            if SLAB > 1:  # slab row t is step row b + t, its tile row g
                o_base = o_part_ptr + (b + t) * stride_ob + h * stride_oh + g * stride_or
                lse_base = lse_ptr + (b + t) * stride_lb + h * stride_lh + g
            else:
                o_base = o_part_ptr + b * stride_ob + h * stride_oh + r * stride_or
                lse_base = lse_ptr + b * stride_lb + h * stride_lh + r
            out_base = out_ptr + (b * NUM_QUERIES + t) * stride_tt + (h * GROUP + g) * stride_th
            for d0 in range(0, HEAD_DIM, BLOCK_D):
                offs_d = d0 + offs
                res = merge_splits(o_base, lse_base, offs_d, stride_os, stride_ls, NUM_SPLITS,
                                   BLOCK_S, True)
                tl.store(out_base + offs_d, res.to(out_ptr.dtype.element_ty))
        tl.atomic_xchg(counter_ptr + pid_bh, 0, sem="relaxed", scope="gpu")


def merge_tiles(num_splits: int, head_dim: int, num_warps: int) -> tuple[int, int]:
    """``(BLOCK_S, BLOCK_D)`` of stage 1's merge: the combine's split chunk (the summation order
    depends on it) and a head_dim slice that keeps the ``BLOCK_S x BLOCK_D`` float32 tile at
    about 2048 elements per warp (64 a thread), whatever stage 1's ``num_warps``."""
    block_s = merge_block_s(num_splits)
    return block_s, max(1, min(head_dim, 2048 * num_warps // block_s))
