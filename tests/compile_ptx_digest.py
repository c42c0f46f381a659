"""Digests of the PTX (and SASS) of the decode-path and prefill kernels at their default tiles,
for sm_80 and sm_90, compiled on a CPU; run as a script (the test suite runs under
TRITON_INTERPRET=1, where kernels cannot be compiled):

    python3 tests/compile_ptx_digest.py [ROOT [OUTDIR]]   # ROOT: a checkout (default: this one)

Prints one JSON line ``{case: digest}``; with OUTDIR it also writes each case's PTX and SASS
there. Run it on two checkouts to check that a refactor leaves the generated code unchanged: the
PTX is compared without its debug line info (``.loc``/``.file`` lines, debug sections and the
labels of inlined helpers' scopes). The SASS digests (``.sass``) may differ even where the PTX
does not: ptxas takes the line info into account and may then number registers or order
independent instructions differently (assembling the stripped PTX gives identical SASS).

The cases are the default tiles of ``kernels/tiles.py`` (Qwen3-8B attention shape: 32 query and
8 KV heads, head_dim 128, page 64), written out so that the script also compiles checkouts from
before ``kernels/tiles.py`` (whose prefill kernel still had a ``WARP_SPEC`` constexpr).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
OUTDIR = Path(sys.argv[2]) if len(sys.argv) > 2 else None
os.environ.pop("TRITON_INTERPRET", None)
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import triton  # noqa: E402
from compile_targets import compile_for  # noqa: E402

from kernels import combine as cb  # noqa: E402
from kernels import decode_attention as da  # noqa: E402
from kernels import prefill_attention as pa  # noqa: E402
from kernels import qk_norm_rope as qk  # noqa: E402
from kernels import store_kv as sk  # noqa: E402

try:  # the fused q/k-norm + RoPE + KV store (absent in older checkouts)
    from kernels import qk_norm_rope_store as qks  # noqa: E402
except ImportError:
    qks = None

NVDISASM = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "nvdisasm"


def clean_ptx(ptx: str) -> str:
    """The PTX without debug line info, comments and the labels of inlined scopes."""
    out, skip = [], False
    for line in ptx.splitlines():
        s = line.strip()
        if s.startswith(".section") and "debug" in s:
            skip = True
        if skip:
            skip = s != "}"
            continue
        if s.startswith((".loc", ".file", "//")) or re.fullmatch(r"\$L__tmp\d+:", s):
            continue
        out.append(re.sub(r"\$L__tmp\d+", "TMP", line))
    return "\n".join(out)


def sass(cubin: bytes) -> str:
    """The SASS of a cubin without addresses and encodings."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        txt = subprocess.run([str(NVDISASM), "-c", f.name], capture_output=True, text=True,
                             check=True).stdout
    lines = (re.sub(r"/\* 0x[0-9a-f]+ \*/|/\*[0-9a-f]{4,}\*/", "", line).strip()
             for line in txt.splitlines())
    return "\n".join(line for line in lines if line)


res: dict[str, str] = {}


def emit(name: str, kernel) -> None:
    for suffix, text in (("", clean_ptx(kernel.asm["ptx"])), (".sass", sass(kernel.asm["cubin"]))):
        res[name + suffix] = hashlib.sha1(text.encode()).hexdigest()[:12]
        if OUTDIR:
            OUTDIR.mkdir(parents=True, exist_ok=True)
            (OUTDIR / f"{name}{suffix or '.ptx'}").write_text(text)


# decode stage 1: (pool, BLOCK_N, warps, INT8_MAGIC, ROWS, NUM_SPLITS); 16 rows: n = 1..4 of the
# 8B's group of 4; 32 rows: INT8's 4-warp tile; 64 rows: n = 16
DECODE = [("bf16", 128, 4, 0, 16, 33), ("i8", 64, 1, 2, 16, 132), ("i8", 64, 4, 2, 32, 132),
          ("bf16", 128, 4, 0, 64, 33)]
# prefill: (q, pool, head_dim, page, BLOCK_M, BLOCK_N, warps, stages, TMA, QK_INT8, STAGE_Q, arch)
PREFILL = [("bf16", "bf16", 128, 64, 128, 64, 8, 6, True, False, False, 90),
           ("bf16", "i8", 128, 64, 64, 64, 4, 7, True, True, True, 90),
           ("fp32", "i8", 128, 64, 64, 64, 4, 3, True, False, False, 90),
           ("bf16", "bf16", 128, 64, 128, 64, 4, 3, False, False, False, 90),
           ("bf16", "bf16", 128, 64, 128, 64, 8, 2, False, False, False, 80),
           ("bf16", "i8", 128, 64, 128, 64, 8, 2, False, True, False, 80),
           ("bf16", "bf16", 128, 16, 128, 64, 8, 2, False, False, False, 80)]


def main() -> None:
    for arch in (80, 90):
        pdl = arch >= 90
        for kv, block_n, warps, magic, rows, splits in DECODE:
            types = {"q_ptr": "*bf16", "k_ptr": f"*{kv}", "v_ptr": f"*{kv}",
                     "seq_lens_ptr": "*i32", "page_table_ptr": "*i32", "slab_ptr": "*i32"}
            const = dict(
                NUM_KV_HEADS=8, GROUP=4, NUM_QUERIES=rows // 4, SLAB=1, HEAD_DIM=128,
                PAGE_SIZE=64,
                BLOCK_N=block_n, ROWS=rows, NUM_SPLITS=splits, IS_INT8=kv == "i8",
                INT8_MAGIC=magic, DOT_PREC="tf32", USE_PDL=pdl, LAZY_RESCALE=True)
            if "Q_AFTER_WAIT" in da._decode_split_kernel.arg_names:  # since the fused KV store
                const["Q_AFTER_WAIT"] = False
            emit(f"decode_{kv}_r{rows}_sm{arch}", compile_for(
                da._decode_split_kernel, const, arch, types=types, num_warps=warps,
                num_stages=2, launch_pdl=pdl))
        emit(f"combine_sm{arch}", compile_for(cb._combine_kernel, dict(
            NUM_KV_HEADS=8, GROUP=4, NUM_QUERIES=1, NUM_SPLITS=132, HEAD_DIM=128, BLOCK_S=256,
            BLOCK_D=16, USE_PDL=pdl), arch, types={"out_ptr": "*bf16"}, num_warps=4,
            launch_pdl=pdl))
        for kv in ("i8", "bf16"):
            types = {"k_ptr": "*bf16", "v_ptr": "*bf16", "k_cache_ptr": f"*{kv}",
                     "v_cache_ptr": f"*{kv}", "slot_ptr": "*i64"}
            emit(f"store_{kv}_sm{arch}", compile_for(sk._store_kv_kernel, dict(
                NUM_KV_HEADS=8, HEAD_DIM=128, PAGE_SIZE=64, BLOCK_H=8, BLOCK_D=128,
                IS_INT8=kv == "i8", SIGNAL_DEPENDENTS=pdl), arch, types=types, num_warps=4))
        rows = dict(NUM_Q_HEADS=32, HEAD_DIM=128, BLOCK_HALF=64, PRECISE_TRIG=True)
        bf16 = {f"{n}_ptr": "*bf16" for n in ("q", "k", "v", "qw", "kw", "q_out", "k_out")}
        emit(f"qk_norm_rope_sm{arch}", compile_for(
            qk._qk_norm_rope_kernel, rows, arch, num_warps=1,
            types={**bf16, "pos_ptr": "*i64", "eps": "fp32", "attention_factor": "fp32"}))
        for kv in ("i8", "bf16") if qks else ():
            emit(f"qk_norm_rope_store_{kv}_sm{arch}", compile_for(
                qks._qk_norm_rope_store_kernel, dict(
                    rows, PAGE_SIZE=64, IS_INT8=kv == "i8", SIGNAL_DEPENDENTS=pdl), arch,
                num_warps=1, types={**bf16, "k_cache_ptr": f"*{kv}", "v_cache_ptr": f"*{kv}",
                                    "slot_ptr": "*i64", "pos_ptr": "*i64", "eps": "fp32",
                                    "attention_factor": "fp32"}))
    for qt, kt, d, page, bm, bn, warps, stages, tma, qk8, stage_q, arch in PREFILL:
        i8 = kt == "i8"
        types = {"q_ptr": f"*{qt}", "k_ptr": f"*{kt}", "v_ptr": f"*{kt}", "o_ptr": f"*{qt}",
                 "seq_lens_ptr": "*i32", "qsl_ptr": "*i32", "pt_ptr": "*i32",
                 "desc_k": f"tensordesc<{kt}[{bn},{d}]>",
                 "desc_v": f"tensordesc<{kt}[{d},{bn}]>" if i8 else f"tensordesc<{kt}[{bn},{d}]>"}
        const = dict(GROUP=4, HEAD_DIM=d, PAGE_SIZE=page, BLOCK_M=bm, BLOCK_N=bn, IS_INT8=i8,
                     DOT_PREC="ieee" if qt == "fp32" else "tf32", USE_TMA=tma, QK_INT8=qk8,
                     STAGE_Q=stage_q)
        if "WARP_SPEC" in pa._prefill_kernel.arg_names:  # before kernels/tiles.py
            const["WARP_SPEC"] = False
        name = f"prefill_{qt}_{kt}_p{page}_{'tma' if tma else 'ptr'}_w{warps}s{stages}_sm{arch}"
        emit(name, compile_for(pa._prefill_kernel, const, arch, types=types, num_warps=warps,
                               num_stages=stages))
    print(json.dumps(res))


if __name__ == "__main__":
    main()
