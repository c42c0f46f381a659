"""Compile the decode GEMM (``kernels/gemv.py``) with its default tiles for sm_80 and sm_90 on a
CPU; run as a script (the test suite runs under TRITON_INTERPRET=1, where kernels cannot be
compiled):

    python3 tests/compile_gemv_tiles.py      # one JSON line per case

For each (dtype, weight shape, SwiGLU) case at the Qwen3-0.6B/8B/14B projection shapes, the tiles
``kernels.tiles.gemv_tiles`` picks on a GPU of 132 SMs (with its split-K factor: the split
kernel, float32 partials, is what compiles then) and the shared memory the compiled kernel needs
(``metadata.shared``, bytes). A CTA may use 232448 bytes on an H100/H200 and 166912 on an A100.
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

from kernels import device, gemv  # noqa: E402
from kernels.tiles import gemv_tiles  # noqa: E402

# (rows N of the weight, K, swiglu) per projection: 0.6B, 8B, 14B (gate/up as its I = N / 2)
SHAPES = [(4096, 1024, False), (1024, 2048, False), (3072, 1024, True), (1024, 3072, False),
          (6144, 4096, False), (4096, 4096, False), (12288, 4096, True), (4096, 12288, False),
          (151936, 4096, False), (7168, 5120, False), (5120, 5120, False), (17408, 5120, True),
          (5120, 17408, False), (151936, 5120, False)]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def main() -> None:
    types = {name: "i32" for name in ("M", "N", "K", "stride_xm", "stride_wn", "stride_ym")}
    device._capability = lambda index: (9, 0)  # any GPU: the tiles do not depend on it
    device._sm_count = lambda index: 132  # an H200 (the split-K pick; the tile is the same)
    done: dict[tuple, int] = {}  # shapes with the same constexprs compile to the same kernel
    for arch in (80, 90):
        for dt, dtype in DTYPES.items():
            for n, k, swiglu in SHAPES:
                t = gemv_tiles(torch.device("cuda", 0), dtype, n, k, swiglu)
                bn, bk, stages = t.block_n, t.block_k, t.num_stages
                splits, per = gemv.split_runs(k, bk, t.split_k) if t.split_k > 1 else (1, 0)
                even = k % (per or bk) == 0
                key = (arch, dt, bn, bk, stages, even, swiglu, splits, per)
                if key not in done:
                    ptr = {p: f"*{dt}" for p in ("x_ptr", "w_ptr")}
                    ptr["y_ptr"] = "*fp32" if splits > 1 else f"*{dt}"  # split-K: the workspace
                    kernel = compile_for(gemv._gemv_kernel, dict(
                        BLOCK_M=gemv.MAX_ROWS, BLOCK_N=bn, BLOCK_K=bk, EVEN_K=even,
                        SWIGLU=swiglu, STAGES=stages, DOT_PREC="ieee" if dt == "fp32" else "tf32",
                        SPLIT_K=splits, K_PER_SPLIT=per),
                        arch, types={**types, **ptr}, num_warps=t.num_warps, num_stages=stages)
                    done[key] = kernel.metadata.shared
                print(json.dumps({"arch": arch, "dtype": dt, "n": n, "k": k, "swiglu": swiglu,
                                  "tiles": [bn, bk, stages], "split_k": splits,
                                  "shared": done[key]}), flush=True)

if __name__ == "__main__":
    main()
