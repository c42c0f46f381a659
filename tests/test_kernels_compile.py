"""The decode-path kernels compile for real GPU targets, on a CPU (Triton's bundled ptxas).

The interpreter runs the kernels' Python, not the compiler: an instruction that exists only on
some GPUs (``griddepcontrol``, programmatic dependent launch, sm_90+) passes every CPU test and
fails to compile on an older GPU. ``tests/compile_targets.py`` compiles stage 1 (also with the
attention prologue), the combine, the
KV store and the fused q/k-norm + RoPE + KV store (and the top-k sampling kernels, which have no
PDL) with the constexprs their launchers pick for a
target, in a subprocess (this suite runs under TRITON_INTERPRET=1); ``tests/compile_pdl_chain.py``
reads where the PDL chain's waits and signals sit in the sm_90 PTX; ``tests/compile_launch_ptx.py``
compiles the decode GEMM, stage 1 and the combine as their launches specialize them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("compile_targets.py")


@pytest.mark.parametrize("arch", [80, 90])
def test_decode_kernels_compile_with_pdl_only_on_hopper(arch):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, str(SCRIPT), str(arch)], capture_output=True,
                         text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    res = json.loads(run.stdout.strip().splitlines()[-1])
    hopper = arch >= 90
    assert res == {"arch": arch, "pdl": hopper, "stage1": hopper, "stage1_prologue": hopper,
                   "combine": hopper,
                   "store_kv": hopper, "qk_norm_rope_store": hopper, "topk_sample": False,
                   "topk_sample_compiled": True}


def test_prefill_default_tiles_fit_hopper_shared_memory():
    """The 6-stage (INT8: 7-stage) Hopper tiles are taken only where they fit: every default
    config compiles for sm_90 within the 232448 bytes of shared memory a CTA may use (float32
    operands and head_dim 256 at 6 stages would need ~260 KB and fail to launch)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, str(SCRIPT.with_name("compile_prefill_tiles.py"))],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    cases = [json.loads(line) for line in run.stdout.strip().splitlines()]
    assert len(cases) == 7
    for c in cases:
        assert c["shared"] <= 232448, c
        deep = c["head_dim"] <= 128 and c["q"] != "fp32" and c["pool"] != "fp32"
        deep_stages = 7 if c["pool"] == "i8" else 6  # 16-bit / int8 at head_dim 128
        assert (c["tiles"][3] == deep_stages) == deep, c
        assert c["tiles"][4] is True, c  # TMA


def test_gemv_default_tiles_fit_shared_memory():
    """The decode GEMM's default tiles (``kernels/gemv.py`` ``_config``) compile for sm_80 and
    sm_90 in bfloat16, float16 and float32 at the Qwen3-0.6B/8B/14B projection shapes, within
    the shared memory a CTA may use (float32 takes half the columns for that)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, str(SCRIPT.with_name("compile_gemv_tiles.py"))],
                         capture_output=True, text=True, env=env, timeout=900)
    assert run.returncode == 0, run.stderr[-2000:]
    cases = [json.loads(line) for line in run.stdout.strip().splitlines()]
    assert len(cases) == 2 * 3 * 14
    for c in cases:
        assert 0 < c["shared"] <= (232448 if c["arch"] == 90 else 166912), c
    # split-K (on an H200's 132 SMs) for the 0.6B's narrow o_proj and down_proj only
    split = {(c["n"], c["k"]) for c in cases if c["split_k"] > 1}
    assert split == {(1024, 2048), (1024, 3072)}, split


def test_pdl_chain_kernels_wait_before_touching_the_predecessors_data():
    """The PDL chain's contract (``kernels/pdl_chain.py``) in the sm_90 PTX: with the chain on,
    each GEMV loads, copies and stores nothing before ``griddepcontrol.wait`` and signals its
    dependents after its last tensor-core instruction; the split-K reduce, RMSNorm and q/k-norm
    + RoPE store nothing before the wait and signal; with the chain off the GEMVs hold no PDL
    instruction."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, str(SCRIPT.with_name("compile_pdl_chain.py"))],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    cases = {(c["kernel"], c["chain"]): c
             for c in map(json.loads, run.stdout.strip().splitlines())}
    gemvs = ("qkv", "o_proj", "gate_up", "down", "o_proj_0.6b")
    assert set(cases) == {(g, on) for g in gemvs for on in (True, False)} | {
        ("rmsnorm", True), ("qk_norm_rope", True)}
    for g in gemvs:
        on, off = cases[g, True], cases[g, False]
        assert on["wait"] and on["signal"] and on["signal_after_mma"], on
        assert (on["loads_before_wait"], on["stores_before_wait"],
                on["async_copies_before_wait"]) == (0, 0, 0), on
        assert not (off["wait"] or off["signal"]), off
    assert cases["o_proj_0.6b", True]["split_k"] > 1
    reduce_on, reduce_off = (cases["o_proj_0.6b", on]["reduce"] for on in (True, False))
    assert reduce_on["wait"] and reduce_on["signal"], reduce_on
    assert reduce_on["loads_before_wait"] == reduce_on["stores_before_wait"] == 0
    assert not (reduce_off["wait"] or reduce_off["signal"])
    for name in ("rmsnorm", "qk_norm_rope"):
        c = cases[name, True]
        assert c["wait"] and c["signal"] and c["stores_before_wait"] == 0, c


def test_decode_launches_compile_once_per_code():
    """``tests/compile_launch_ptx.py`` compiles the decode-path launches as an H200 specializes
    them. The decode GEMM (the 8B's projections, the 0.6B's split-K o_proj; not its reduce) has
    a key of its own for 1, 13 and 16 rows (Triton specializes M: 1, divisible by 16, other);
    stage 1 and the combine have one key and one PTX for a decode step and a 16-row verify step
    (BF16 and INT8 caches; the lse strides are not specialized)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, str(SCRIPT.with_name("compile_launch_ptx.py"))],
                         capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    cases = {c["case"]: c for c in map(json.loads, run.stdout.strip().splitlines())}
    for p in ("qkv", "o_proj", "gate_up", "down", "lm_head", "o_proj_0.6b"):
        assert len({cases[f"{p}_m{m}"]["key"] for m in (1, 13, 16)}) == 3, p
    same = [[f"{k}_{kv}_step1", f"{k}_{kv}_verify16"]
            for k in ("stage1", "combine") for kv in ("bf16", "int8")]
    for names in same:
        assert len({(cases[n]["key"], cases[n]["ptx"]) for n in names}) == 1, names
    assert len(cases) == 3 * 7 + 3 * 4  # + each attention kernel's prompt


def test_hand_pipelined_prefill_loop_still_waits_at_once():
    """``tests/compile_prefill_pipelined.py`` (BENCHMARKS.md, "the prefill loop software-pipelined
    by hand"): with Triton 3.6 the next block's scores are waited for as soon as they are
    issued (``pendings = 0``), so the tensor cores do not overlap the softmax. Should a Triton
    release defer that wait, this fails: time the pipelined loop then (``attention.py``)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, str(SCRIPT.with_name("compile_prefill_pipelined.py"))],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    plain, piped = (json.loads(line) for line in run.stdout.strip().splitlines())
    assert plain["ptx_sequence"] == ["mma x8", "wait 0", "exp2", "mma x4", "wait 0"]
    assert piped["pipelined"] and piped["ptx_sequence"].count("mma x8") == 2
    assert set(piped["wait_pendings"]) == {0}
    # the scores of the next block are waited for before the current block's exponentials
    seq = piped["ptx_sequence"]
    assert seq[seq.index("mma x8", 1) + 1] == "wait 0"
