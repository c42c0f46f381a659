"""Compile the prefill kernel with its default Hopper tiles for sm_90 on a CPU; run as a script
(the test suite runs under TRITON_INTERPRET=1, where kernels cannot be compiled):

    python3 tests/compile_prefill_tiles.py      # one JSON line per case

For each (query dtype, pool dtype, head_dim, page_size) case, the tiles ``prefill_tiles``
picks on an sm_90 GPU (TMA loads), the constexprs the launcher would pass, and the shared memory
the compiled kernel needs (``metadata.shared``, bytes). A CTA on an H100/H200 may use 232448.
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

from kernels import device  # noqa: E402
from kernels import prefill_attention as pa  # noqa: E402
from kernels.tiles import prefill_tiles  # noqa: E402

# (q dtype, pool dtype, head_dim, page_size)
CASES = [("bf16", "bf16", 128, 64), ("fp16", "fp16", 128, 16), ("fp32", "fp32", 128, 64),
         ("bf16", "i8", 128, 64), ("fp32", "i8", 128, 64), ("bf16", "bf16", 256, 64),
         ("bf16", "i8", 256, 64)]
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "i8": torch.int8}


def compile_case(qt: str, kt: str, d: int, page: int, max_query_len: int = 32768) -> dict:
    is_int8 = kt == "i8"
    tiles = prefill_tiles(torch.device("cuda", 0), DTYPES[qt], DTYPES[kt],
                          max_query_len=max_query_len, page_size=page, head_dim=d)
    bm, bn, warps, stages, tma = (tiles.block_m, tiles.block_n, tiles.num_warps,
                                  tiles.num_stages, tiles.use_tma)
    types = {"q_ptr": f"*{qt}", "k_ptr": f"*{kt}", "v_ptr": f"*{kt}", "o_ptr": f"*{qt}",
             "seq_lens_ptr": "*i32", "qsl_ptr": "*i32", "pt_ptr": "*i32",
             "desc_k": f"tensordesc<{kt}[{bn},{d}]>",
             "desc_v": f"tensordesc<{kt}[{d},{bn}]>" if is_int8 else f"tensordesc<{kt}[{bn},{d}]>"}
    const = dict(GROUP=4, HEAD_DIM=d, PAGE_SIZE=page, BLOCK_M=bm, BLOCK_N=bn, IS_INT8=is_int8,
                 DOT_PREC="ieee" if qt == "fp32" else "tf32", USE_TMA=tma,
                 QK_INT8=tiles.qk_int8, STAGE_Q=tiles.stage_q and tiles.qk_int8)
    k = compile_for(pa._prefill_kernel, const, 90, types=types, num_warps=warps,
                    num_stages=stages)
    return {"q": qt, "pool": kt, "head_dim": d, "page_size": page,
            "tiles": [bm, bn, warps, stages, tma], "shared": k.metadata.shared}


def main() -> None:
    device._capability = lambda index: (9, 0)  # an H100/H200
    for case in CASES:
        print(json.dumps(compile_case(*case)), flush=True)


if __name__ == "__main__":
    main()
