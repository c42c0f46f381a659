"""Compile the decode-path kernels for one GPU target on a CPU; run as a script (the test suite
runs under TRITON_INTERPRET=1, where kernels cannot be compiled):

    python3 tests/compile_targets.py ARCH     # e.g. 80 or 90; prints one JSON line

For each kernel, the constexprs its launcher would pick on a GPU of that compute capability
(``kernels.tiles.decode_tiles`` and ``default_num_splits`` for an INT8 pool at the Qwen3-8B shape
on 132 SMs, stage 1 as after the fused q/k-norm + RoPE + KV store, ``models.qwen3.FUSED_KV_STORE``,
and on a BF16 pool with the attention prologue, ``kernels/decode_prologue.py``;
whose default-off PTX ``compile_ptx_digest.py`` checks; ``kernels.device.supports_pdl``
decides programmatic dependent launch), and whether the PTX holds ``griddepcontrol`` (which exists
from sm_90 on).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.pop("TRITON_INTERPRET", None)

import torch  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, compile  # noqa: E402

from kernels import device  # noqa: E402
from kernels.combine import _combine_kernel  # noqa: E402
from kernels.decode_attention import _decode_split_kernel, slab_capacity  # noqa: E402
from kernels.decode_plan import default_num_splits  # noqa: E402
from kernels.qk_norm_rope import _launch_options  # noqa: E402
from kernels.qk_norm_rope_store import _qk_norm_rope_store_kernel  # noqa: E402
from kernels.store_kv import _store_kv_kernel  # noqa: E402
from kernels.tiles import decode_tiles, store_tiles  # noqa: E402
from kernels.topk_sample import (  # noqa: E402
    GPU_BLOCK,
    _topk_partial_kernel,
    _topk_sample_kernel,
)

POINTERS = {"k_ptr": "*bf16", "v_ptr": "*bf16", "k_cache_ptr": "*i8", "v_cache_ptr": "*i8",
            "q_ptr": "*bf16", "out_ptr": "*bf16", "seq_lens_ptr": "*i32",
            "page_table_ptr": "*i32", "slot_ptr": "*i64", "slab_ptr": "*i32"}


def compile_for(kernel, constexprs: dict, arch: int, types: dict | None = None, **options):
    """Pointers float32 unless named in POINTERS (stage 1 reads int8 codes through k_ptr/v_ptr:
    see ``main``), scalars int32 (float32 for ``qk_scale``); ``types`` overrides any argument's
    type (e.g. ``{"desc_k": "tensordesc<bf16[64,128]>"}``); a constexpr left out takes its
    default, as at a launch."""
    signature, consts = {}, {}
    defaults = {p.name: p.default for p in kernel.params if p.is_constexpr and p.has_default}
    for i, name in enumerate(kernel.arg_names):
        if name in constexprs or name in defaults:
            signature[name] = "constexpr"
            consts[(i,)] = constexprs.get(name, defaults.get(name))
        elif types and name in types:
            signature[name] = types[name]
        elif name.endswith("_ptr"):
            signature[name] = POINTERS.get(name, "*fp32")
        else:
            signature[name] = "fp32" if name == "qk_scale" else "i32"
    return compile(ASTSource(kernel, signature, constexprs=consts),
                   target=GPUTarget("cuda", arch, 32), options=options)


def main() -> None:
    arch = int(sys.argv[1])
    device._capability = lambda index: (arch // 10, arch % 10)
    device._sm_count = lambda index: 132  # an H200
    gpu = torch.device("cuda", 0)
    pdl = device.supports_pdl(gpu)
    tiles = decode_tiles(gpu, torch.int8, page_size=64, rows=4)
    splits = default_num_splits(1, 8, gpu, torch.int8)
    POINTERS.update(k_ptr="*i8", v_ptr="*i8")  # stage 1 on an INT8 pool
    stage1 = compile_for(_decode_split_kernel, dict(
        NUM_KV_HEADS=8, GROUP=4, NUM_QUERIES=1, SLAB=slab_capacity(4), HEAD_DIM=128,
        PAGE_SIZE=64, BLOCK_N=tiles.block_n, ROWS=16, NUM_SPLITS=splits, IS_INT8=True,
        INT8_MAGIC=tiles.int8_magic, DOT_PREC="tf32", USE_PDL=pdl and tiles.pdl,
        Q_AFTER_WAIT=pdl and tiles.pdl, LAZY_RESCALE=tiles.lazy_rescale), arch,
        num_warps=tiles.num_warps, num_stages=tiles.num_stages, launch_pdl=pdl and tiles.pdl)
    # stage 1 with the attention prologue (kernels/decode_prologue.py) on a BF16 pool, one token
    POINTERS.update(k_ptr="*bf16", v_ptr="*bf16", k_new_ptr="*bf16", v_new_ptr="*bf16",
                    qw_ptr="*bf16", kw_ptr="*bf16", pos_ptr="*i64")
    bf16_tiles = decode_tiles(gpu, torch.bfloat16, page_size=64, rows=4)
    prologue = compile_for(_decode_split_kernel, dict(
        NUM_KV_HEADS=8, GROUP=4, NUM_QUERIES=1, SLAB=slab_capacity(4), HEAD_DIM=128,
        PAGE_SIZE=64, BLOCK_N=bf16_tiles.block_n, ROWS=16, NUM_SPLITS=33, IS_INT8=False,
        INT8_MAGIC=0, DOT_PREC="tf32", USE_PDL=pdl and bf16_tiles.pdl, Q_AFTER_WAIT=False,
        LAZY_RESCALE=bf16_tiles.lazy_rescale, PROLOGUE=True, PRECISE_TRIG=True), arch,
        types={"eps": "fp32", "attention_factor": "fp32"}, num_warps=bf16_tiles.num_warps,
        num_stages=bf16_tiles.num_stages, launch_pdl=pdl and bf16_tiles.pdl)
    combine = compile_for(_combine_kernel, dict(
        NUM_KV_HEADS=8, GROUP=4, NUM_QUERIES=1, NUM_SPLITS=splits, HEAD_DIM=128, BLOCK_S=256,
        BLOCK_D=16, USE_PDL=pdl), arch, num_warps=4, launch_pdl=pdl)
    POINTERS.update(k_ptr="*bf16", v_ptr="*bf16")  # the store's new K/V rows
    store_opts = store_tiles(gpu, torch.int8)
    store = compile_for(_store_kv_kernel, dict(
        NUM_KV_HEADS=8, HEAD_DIM=128, PAGE_SIZE=64, BLOCK_H=8, BLOCK_D=128, IS_INT8=True,
        SIGNAL_DEPENDENTS=pdl and store_opts.pdl), arch, num_warps=store_opts.num_warps)
    rows = _launch_options(128)
    POINTERS.update(q_out_ptr="*bf16", qw_ptr="*bf16", kw_ptr="*bf16", pos_ptr="*i64")
    fused = compile_for(_qk_norm_rope_store_kernel, dict(
        NUM_Q_HEADS=32, HEAD_DIM=128, PAGE_SIZE=64, BLOCK_HALF=rows["BLOCK_HALF"], IS_INT8=True,
        PRECISE_TRIG=True, SIGNAL_DEPENDENTS=pdl), arch,
        types={"eps": "fp32", "attention_factor": "fp32"}, num_warps=rows["num_warps"])
    # the sampling kernels (no PDL): their launchers' constexprs for Qwen3 at top-k 20
    POINTERS.update(logits_ptr="*bf16", keys_ptr="*i64", tok_ptr="*i64", ids_ptr="*i64",
                    drafts_ptr="*i64", ok_ptr="*i64")
    sampling = [compile_for(_topk_partial_kernel, dict(BLOCK=GPU_BLOCK), arch, num_warps=4)] + [
        compile_for(_topk_sample_kernel, dict(
            BLOCK_C=2048, BLOCK_K=32, TINY=1.1754943508222875e-38, NON_FINITE_ID=-1,
            VERIFY=verify), arch, types={"temperature": "fp32", "top_p": "fp32",
                                         "min_p": "fp32"}, num_warps=4)
        for verify in (False, True)]
    print(json.dumps({"arch": arch, "pdl": pdl, **{
        name: "griddepcontrol" in k.asm["ptx"]
        for name, k in (("stage1", stage1), ("stage1_prologue", prologue),
                        ("combine", combine), ("store_kv", store),
                        ("qk_norm_rope_store", fused), ("topk_sample", sampling[0]))},
        "topk_sample_compiled": all(k.asm["cubin"] for k in sampling)}))


if __name__ == "__main__":
    main()
