"""Compile a prefill key loop for sm_90 on a CPU, plain and software-pipelined by hand, and report
where Triton waits on the warpgroup MMAs; run as a script (BENCHMARKS.md, "the prefill loop
software-pipelined by hand"):

    python3 tests/compile_prefill_pipelined.py      # one JSON line per variant

The loop is the unmasked phase of ``kernels/prefill_blocks.py`` for a BF16 pool through TMA,
reduced to its schedule (one sequence, one head, no causal phase): 128 x 64 tiles on 8 warps, 6
stages, as ``kernels.tiles.prefill_tiles`` picks on Hopper. The pipelined variant issues the next
block's scores (``tl.dot(q, k_next^T)``) before the softmax of the current ones, which it carries
from the previous iteration, as FlashAttention-3's intra-warpgroup pipelining does (Shah et al.
2024, "FlashAttention-3", section 3.2). Whether the tensor cores then overlap the softmax depends
on the waits: ``wgmma.wait_group 0`` right after the scores' commit means they do not. This is
a compiler experiment, not a kernel the engine runs; its numerics are those of
``kernels/prefill_attention.py``'s oracle by construction and are not tested here.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.pop("TRITON_INTERPRET", None)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from compile_targets import compile_for  # noqa: E402

from kernels.paged_walk import online_softmax  # noqa: E402


@triton.jit
def _tile(desc, pt_ptr, n0, stride_p, head_row, PAGE_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr):
    """The [BLOCK_N, D] K or V tile of keys ``n0 ..`` through the page table (TMA)."""
    page = tl.load(pt_ptr + n0 // PAGE_SIZE).to(tl.int64)
    return desc.load([(page * (stride_p // HEAD_DIM) + head_row + n0 % PAGE_SIZE).to(tl.int32), 0])


@triton.jit
def _loop_kernel(q_ptr, desc_k, desc_v, o_ptr, pt_ptr, stride_kp, stride_vp, k_head_row,
                 v_head_row, lo, hi, qk_scale, PAGE_SIZE: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, PIPELINED: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(q_ptr + offs_m[:, None] * HEAD_DIM + offs_d[None, :])
    dt: tl.constexpr = q_ptr.dtype.element_ty
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    if PIPELINED:
        s = tl.dot(q, tl.trans(_tile(desc_k, pt_ptr, lo, stride_kp, k_head_row, PAGE_SIZE,
                                     HEAD_DIM)))
        for n0 in tl.range(lo, hi - BLOCK_N, BLOCK_N):
            v = _tile(desc_v, pt_ptr, n0, stride_vp, v_head_row, PAGE_SIZE, HEAD_DIM)
            k_next = _tile(desc_k, pt_ptr, n0 + BLOCK_N, stride_kp, k_head_row, PAGE_SIZE,
                           HEAD_DIM)
            s_next = tl.dot(q, tl.trans(k_next))         # the next block's scores, issued first
            p, m_i, l_i, acc = online_softmax(s * qk_scale, m_i, m_i, l_i, acc, False, False,
                                              False)
            acc = tl.dot(p.to(dt), v, acc)
            s = s_next
        v = _tile(desc_v, pt_ptr, hi - BLOCK_N, stride_vp, v_head_row, PAGE_SIZE, HEAD_DIM)
        p, m_i, l_i, acc = online_softmax(s * qk_scale, m_i, m_i, l_i, acc, False, False, False)
        acc = tl.dot(p.to(dt), v, acc)
    else:
        for n0 in tl.range(lo, hi, BLOCK_N):
            k = _tile(desc_k, pt_ptr, n0, stride_kp, k_head_row, PAGE_SIZE, HEAD_DIM)
            v = _tile(desc_v, pt_ptr, n0, stride_vp, v_head_row, PAGE_SIZE, HEAD_DIM)
            p, m_i, l_i, acc = online_softmax(tl.dot(q, tl.trans(k)) * qk_scale, m_i, m_i, l_i,
                                              acc, False, False, False)
            acc = tl.dot(p.to(dt), v, acc)
    out = acc / l_i[:, None]
    tl.store(o_ptr + offs_m[:, None] * HEAD_DIM + offs_d[None, :], out.to(dt))


def compile_variant(pipelined: bool, block_m: int = 128, block_n: int = 64, head_dim: int = 128,
                    num_warps: int = 8, num_stages: int = 6) -> dict:
    """Compile one variant for sm_90; the loop's MMA/wait sequence and its shared memory."""
    tile = f"tensordesc<bf16[{block_n},{head_dim}]>"
    types = {"q_ptr": "*bf16", "o_ptr": "*bf16", "pt_ptr": "*i32", "desc_k": tile,
             "desc_v": tile}
    k = compile_for(_loop_kernel, dict(PAGE_SIZE=64, BLOCK_M=block_m, BLOCK_N=block_n,
                                       HEAD_DIM=head_dim, PIPELINED=pipelined), 90, types=types,
                    num_warps=num_warps, num_stages=num_stages)
    # The loop body: from the first mbarrier wait after the loop label to the back edge.
    ptx = k.asm["ptx"]
    events = []
    for line in ptx.splitlines():
        if "wgmma.mma_async" in line:
            if not events or not events[-1].startswith("mma x"):
                events.append("mma x0")
            events[-1] = f"mma x{int(events[-1][5:]) + 1}"
        elif m := re.search(r"wgmma.wait_group.sync.aligned\s+(\d+)", line):
            events.append(f"wait {m.group(1)}")
        elif "ex2.approx" in line and (not events or events[-1] != "exp2"):
            events.append("exp2")
    ttgir = k.asm["ttgir"]
    return {"pipelined": pipelined, "shared": k.metadata.shared,
            "wait_pendings": [int(x) for x in re.findall(r"warp_group_dot_wait .*?pendings = "
                                                         r"(\d+)", ttgir)],
            "ptx_sequence": events}


def main() -> None:
    for pipelined in (False, True):
        print(json.dumps(compile_variant(pipelined)), flush=True)


if __name__ == "__main__":
    main()
