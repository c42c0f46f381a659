"""Compile ``benchmarks/prefill_fa3.py``'s Gluon kernel for sm_90 on a CPU and report what its PTX
holds and what ptxas makes of it; run as a script (the test suite runs under TRITON_INTERPRET=1,
and Gluon has no interpreter):

    python3 tests/compile_prefill_fa3.py             # one JSON line
    python3 tests/compile_prefill_fa3.py --dump DIR  # also writes DIR/fa3.{ttgir,ptx}

The facts checked by ``tests/test_prefill_fa3.py``: the scores and P.V run on ``wgmma.mma_async``
with a ``wgmma.wait_group 1`` (the P.V stays in flight during the softmax: FlashAttention-3's
intra-warpgroup overlap), ptxas keeps them asynchronous (no C7514 "wgmma ... serialized"
note), the query, K and V tiles come through TMA into an mbarrier ring (the loading warp), and
the kernel fits one CTA's shared memory.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.pop("TRITON_INTERPRET", None)

from triton import knobs  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import compile  # noqa: E402
from triton.experimental.gluon._runtime import GluonASTSource  # noqa: E402

from benchmarks.prefill_fa3 import BLOCK_N, HALF_M, HEAD_DIM, _fa3_kernel, tile_layout  # noqa: E402


def compile_fa3(group: int = 4, stages: int = 4):
    """The kernel compiled for sm_90 (4 warps a partition), as ``triton.compile`` returns it."""
    q_desc = f"tensordesc<bf16[{HALF_M}, {HEAD_DIM}],{tile_layout(HALF_M)!r}>"
    kv_desc = f"tensordesc<bf16[{BLOCK_N}, {HEAD_DIM}],{tile_layout(BLOCK_N)!r}>"
    signature = {"q_desc": q_desc, "k_desc": kv_desc, "v_desc": kv_desc, "o_desc": q_desc,
                 "pt_ptr": "*i32", "seq_len": "i32", "n_new": "i32", "k_page_rows": "i32",
                 "k_head_rows": "i32", "v_page_rows": "i32", "v_head_rows": "i32",
                 "qk_scale": "fp32", "GROUP": "constexpr", "STAGES": "constexpr"}
    names = list(signature)
    constexprs = {(names.index("GROUP"),): group, (names.index("STAGES"),): stages}
    return compile(GluonASTSource(_fa3_kernel, signature, constexprs=constexprs),
                   target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})


def ptxas_log(ptx: str) -> str:
    """``ptxas -v`` on the PTX for sm_90a (the ptxas Triton bundles): its info lines."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(ptx)
        run = subprocess.run([knobs.nvidia.ptxas.path, "-v", "--gpu-name=sm_90a", str(src),
                              "-o", str(Path(tmp) / "k.cubin")], capture_output=True, text=True)
    return run.stderr + run.stdout


def facts(kernel) -> dict:
    """What the PTX and ptxas's log hold (module notes)."""
    ptx = kernel.asm["ptx"]
    log = ptxas_log(ptx)
    waits = re.findall(r"wgmma\.wait_group\.sync\.aligned\s+(\d+)", ptx)
    regs = re.search(r"Used (\d+) registers", log)
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    return {
        "wgmma": ptx.count("wgmma.mma_async"),
        "wait_group": sorted({int(n) for n in waits}), "wait_group_count": len(waits),
        "tma_loads": len(re.findall(r"cp\.async\.bulk\.tensor\.\dd\.shared::cluster\.global", ptx)),
        "tma_stores": len(re.findall(r"cp\.async\.bulk\.tensor\.\dd\.global\.shared", ptx)),
        "mbarrier_waits": ptx.count("mbarrier.try_wait.parity"),
        "mbarrier_arrives": ptx.count("mbarrier.arrive.shared"),
        "bar_sync_threads": sorted({int(n) for n in re.findall(r"bar\.sync\s+\d+,\s*(\d+);", ptx)}),
        "setmaxnreg": sorted({int(n) for n in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+"
                                                         r"(\d+)", ptx)}),
        "ptxas_wgmma_serialized": "C7514" in log,
        "ptxas_registers": int(regs.group(1)) if regs else None,
        "ptxas_spill_bytes": sum(map(int, spills.groups())) if spills else None,
        "shared": kernel.metadata.shared, "num_warps": kernel.metadata.num_warps,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--dump", default="")
    args = ap.parse_args()
    kernel = compile_fa3(stages=args.stages)
    if args.dump:
        out = Path(args.dump)
        out.mkdir(parents=True, exist_ok=True)
        for ext in ("ttgir", "ptx"):
            (out / f"fa3.{ext}").write_text(kernel.asm[ext])
    print(json.dumps(facts(kernel)))


if __name__ == "__main__":
    main()
