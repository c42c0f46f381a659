"""Compile the PDL chain's kernels (``kernels/pdl_chain.py``) for sm_90 on a CPU and read where
their ``griddepcontrol`` instructions sit in the PTX; run as a script (the test suite runs under
TRITON_INTERPRET=1, where kernels cannot be compiled):

    python3 tests/compile_pdl_chain.py      # one JSON line per kernel

For each kernel, with the constexprs its launcher picks with the chain on (Qwen3-8B shapes, the
0.6B's split-K ``o_proj`` for the reduce) and, for the GEMVs, with it off: counts of global
loads, global stores and async copies before the first ``griddepcontrol.wait``,
whether ``launch_dependents`` is there and, for a GEMV, whether it comes after the last tensor-
core instruction (after the weight stream). PTX is laid out in program order for these
straight-line prologues, so "before" in the text is before in the kernel.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402
from compile_targets import compile_for  # noqa: E402

from kernels import device, gemv, pdl_chain  # noqa: E402
from kernels.qk_norm_rope import _launch_options, _qk_norm_rope_kernel  # noqa: E402
from kernels.rmsnorm import _rmsnorm_kernel  # noqa: E402
from kernels.tiles import gemv_tiles  # noqa: E402

GPU = torch.device("cuda", 0)
# (N, K, swiglu): the 8B's qkv, o_proj, gate/up (one half) and down; the 0.6B's o_proj (split-K)
GEMVS = {"qkv": (6144, 4096, False), "o_proj": (4096, 4096, False),
         "gate_up": (12288, 4096, True), "down": (4096, 12288, False),
         "o_proj_0.6b": (1024, 2048, False)}
SCALARS = {name: "i32" for name in ("M", "N", "K", "stride_xm", "stride_wn", "stride_ym")}


def layout(ptx: str) -> dict:
    """Where the PDL instructions sit in ``ptx``: counts before the first wait, and order."""
    lines = [ln.strip() for ln in ptx.splitlines()]
    wait = next((i for i, ln in enumerate(lines) if ln.startswith("griddepcontrol.wait")), None)
    head = lines[:wait] if wait is not None else []

    def count(prefix: str, part: list[str]) -> int:
        return sum(1 for ln in part if prefix in ln)

    signal = [i for i, ln in enumerate(lines) if ln.startswith("griddepcontrol.launch_dependents")]
    mma = [i for i, ln in enumerate(lines) if ln.startswith(("mma.", "wgmma."))]
    return {"wait": wait is not None, "signal": bool(signal),
            "loads_before_wait": count("ld.global", head),
            "stores_before_wait": count("st.global", head),
            "async_copies_before_wait": count("cp.async.cg", head) + count("cp.async.ca", head),
            "signal_after_mma": bool(signal and mma) and signal[0] > mma[-1]}


def compile_gemv(name: str, chain: bool) -> dict:
    n, k, swiglu = GEMVS[name]
    pdl_chain.ENABLED = chain
    t = gemv_tiles(GPU, torch.bfloat16, n, k, swiglu)
    splits, per = gemv.split_runs(k, t.block_k, t.split_k) if t.split_k > 1 else (1, 0)
    consts = dict(BLOCK_M=gemv.MAX_ROWS, BLOCK_N=t.block_n, BLOCK_K=t.block_k,
                  EVEN_K=k % (per or t.block_k) == 0, SWIGLU=swiglu, STAGES=t.num_stages,
                  DOT_PREC="tf32", SPLIT_K=splits, K_PER_SPLIT=per)
    consts.update(USE_PDL=t.pdl)
    ptr = {"x_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*fp32" if splits > 1 else "*bf16"}
    kernel = compile_for(gemv._gemv_kernel, consts, 90, types={**SCALARS, **ptr},
                         num_warps=t.num_warps, num_stages=t.num_stages, launch_pdl=t.pdl)
    out = {"kernel": name, "chain": chain, "split_k": splits, **layout(kernel.asm["ptx"])}
    if splits > 1:
        reduce = compile_for(gemv._splitk_reduce_kernel, dict(
            SPLIT_K=splits, BLOCK_M=gemv.MAX_ROWS, BLOCK_N=128, USE_PDL=t.pdl), 90,
            types={"ws_ptr": "*fp32", "y_ptr": "*bf16", "M": "i32", "N": "i32",
                   "stride_ym": "i32"}, launch_pdl=t.pdl)
        out["reduce"] = layout(reduce.asm["ptx"])
    return out


def main() -> None:
    device._capability = lambda index: (9, 0)
    device._sm_count = lambda index: 132  # an H200
    for name in GEMVS:
        for chain in (True, False):
            print(json.dumps(compile_gemv(name, chain)))
    pdl_chain.ENABLED = True
    bf16 = {p: "*bf16" for p in ("x_ptr", "res_ptr", "w_ptr", "out_ptr", "res_out_ptr")}
    norm = compile_for(_rmsnorm_kernel, dict(HIDDEN=4096, BLOCK=4096, HAS_RESIDUAL=True,
                                             USE_PDL=True), 90,
                       types={"eps": "fp32", **bf16}, num_warps=8, launch_pdl=True)
    print(json.dumps({"kernel": "rmsnorm", "chain": True, **layout(norm.asm["ptx"])}))
    rope = {p: "*bf16" for p in ("q_ptr", "k_ptr", "qw_ptr", "kw_ptr", "q_out_ptr",
                                 "k_out_ptr")}
    opts = _launch_options(128)
    warps = opts.pop("num_warps")
    qk = compile_for(_qk_norm_rope_kernel, dict(NUM_Q_HEADS=32, HEAD_DIM=128, USE_PDL=True,
                                                **opts), 90,
                     types={"eps": "fp32", "attention_factor": "fp32", "pos_ptr": "*i64",
                            **rope}, num_warps=warps, launch_pdl=True)
    print(json.dumps({"kernel": "qk_norm_rope", "chain": True, **layout(qk.asm["ptx"])}))


if __name__ == "__main__":
    main()
