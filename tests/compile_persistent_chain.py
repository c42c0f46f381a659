"""Compile ``benchmarks/persistent_chain.py``'s Gluon kernel for sm_90 on a CPU and report what
its PTX holds; run as a script (the test suite runs under TRITON_INTERPRET=1, and Gluon has no
interpreter):

    python3 tests/compile_persistent_chain.py      # one JSON line

The facts checked by ``tests/test_persistent_chain.py``: the weight tiles come through TMA into
an mbarrier ring (the loading warp), the compute warps' grid barrier is one release add and an
acquire spin between barriers of their own 128 threads (not the loading warp's), the control
(``CROSS`` off) spins in the loading warp too, and the kernel fits one CTA's shared memory.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.pop("TRITON_INTERPRET", None)

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import compile  # noqa: E402
from triton.experimental.gluon._runtime import GluonASTSource  # noqa: E402

from benchmarks.persistent_chain import _chain_kernel, weight_layout  # noqa: E402


def main() -> None:
    block_n, block_k, stages = 32, 64, 16
    layout = weight_layout(block_n, block_k)
    signature = {"w_desc": f"tensordesc<bf16[{block_n}, {block_k}],{layout!r}>",
                 "x_ptr": "*fp32", "counter_ptr": "*i32", "phases": "i32", "n": "i32",
                 "STAGES": "constexpr", "CROSS": "constexpr"}
    names = list(signature)

    def build(cross: bool):
        consts = {(names.index("STAGES"),): stages, (names.index("CROSS"),): cross}
        return compile(GluonASTSource(_chain_kernel, signature, constexprs=consts),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})

    kernel, control = build(True), build(False)
    ptx = kernel.asm["ptx"]
    barriers = set(re.findall(r"bar\.sync\s+(\d+),\s*(\d+);", ptx))
    print(json.dumps({
        "shared": kernel.metadata.shared, "num_warps": kernel.metadata.num_warps,
        "tma_loads": ptx.count("cp.async.bulk.tensor"),
        "expect_tx_bytes": sorted(set(map(int, re.findall(r"expect_tx\.shared\.b64 _, \[%r\d+\], "
                                                          r"(\d+);", ptx)))),
        "mbarrier_waits": ptx.count("mbarrier.try_wait.parity"),
        "release_adds": ptx.count("atom.global.gpu.release.add"),
        "acquire_loads": ptx.count("ld.global.gpu.acquire"),
        "control_acquire_loads": control.asm["ptx"].count("ld.global.gpu.acquire"),
        "barrier_threads": sorted({int(n) for _, n in barriers}),
    }))


if __name__ == "__main__":
    main()
