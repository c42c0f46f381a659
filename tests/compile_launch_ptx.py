"""Compile decode-path kernels for sm_90 on a CPU exactly as their launches on an H200 specialize
them; run as a script (the test suite runs under TRITON_INTERPRET=1, where kernels cannot be
compiled):

    python3 tests/compile_launch_ptx.py [ROOT [OUTDIR]]   # ROOT: a checkout (default: this one)

The launchers run on meta tensors under ``tests/launch_specs.py``'s ``LaunchRecorder`` and
``gpu_facts``; each launch's signature, constexprs and attributes (an int argument equal to 1 as
a constexpr, ``tt.divisibility`` 16 for ints divisible by 16 and 16-byte aligned pointers, unless
``do_not_specialize``) go through ``JITFunction._pack_args`` and ``triton.compile`` as
``JITFunction.run`` would on a GPU. The cases:

- the decode GEMM (``kernels/gemv.py``) for the Qwen3-8B's projections (qkv, o_proj, gate/up
  with SwiGLU, down, lm_head; BF16, the tiles ``kernels.tiles.gemv_tiles`` picks on 132 SMs) and
  the 0.6B's split-K o_proj (the partial GEMV, then ``_splitk_reduce_kernel``), at 1, 13 and 16
  rows (``{proj}_m{rows}``);
- stage 1 and the combine of split-KV decode (``kernels/decode_attention.py``,
  ``kernels/combine.py``) in an 8B reply with a BF16 and an INT8 cache (``generate_like``): the
  13-token prompt, a decode step and a 16-row verify step (``{kernel}_{cache}_{step}``).

Prints one JSON line per case: the digests of its PTX (without debug line info:
``compile_ptx_digest.clean_ptx``) and SASS, and the launch key; with OUTDIR it also writes each
case's PTX and SASS there. Run it on two checkouts and diff the OUTDIRs to see what a change of a
kernel's specialization does to the generated code.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else HERE.parent
OUTDIR = Path(sys.argv[2]) if len(sys.argv) > 2 else None
os.environ.pop("TRITON_INTERPRET", None)
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(HERE)]

import torch  # noqa: E402
from compile_ptx_digest import clean_ptx, sass  # noqa: E402
from launch_specs import (  # noqa: E402
    LaunchRecorder,
    decode_path_kernels,
    generate_like,
    gpu_facts,
    launch_key,
)
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource, compile, make_backend  # noqa: E402
from triton.runtime.jit import create_function_from_signature  # noqa: E402

from kernels import gemv  # noqa: E402
from kernels.combine import _combine_kernel  # noqa: E402
from kernels.decode_attention import _decode_split_kernel  # noqa: E402
from kernels.tiles import decode_tiles  # noqa: E402

# name: (weight rows: N, or 2I for the gate/up pair; K; swiglu), the Qwen3-8B's projections
# and the 0.6B's o_proj (split-K: the partial GEMV, then _splitk_reduce_kernel)
PROJECTIONS = {"qkv": (6144, 4096, False), "o_proj": (4096, 4096, False),
               "gate_up": (24576, 4096, True), "down": (4096, 12288, False),
               "lm_head": (151936, 4096, False), "o_proj_0.6b": (1024, 2048, False)}
ROWS = (1, 13, 16)  # a decode step; the 13-token prompt of ``infer generate M Hello``; a verify


def compile_launch(kernel, args: tuple, kwargs: dict, arch: int = 90):
    """``kernel`` (a ``JITFunction``) compiled for ``sm_{arch}`` as a launch with ``args`` and
    ``kwargs`` compiles it: ``JITFunction.run``'s binder, ``_pack_args`` and ``compile``."""
    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, spec, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, spec,
                                                              options)
    return compile(ASTSource(kernel, signature, constexprs, attrs), target=target,
                   options=options.__dict__)


def main() -> None:
    gemvs()
    attention()


def gemvs() -> None:
    """The GEMV cases (module notes)."""
    with gpu_facts():
        for name, (n, k, swiglu) in PROJECTIONS.items():
            w = torch.empty(n, k, dtype=torch.bfloat16, device="meta")
            for m in ROWS:
                kernels = [gemv._gemv_kernel, gemv._splitk_reduce_kernel]
                with LaunchRecorder(kernels) as rec:
                    x = torch.empty(m, k, dtype=torch.bfloat16, device="meta")
                    (gemv.gemv_swiglu if swiglu else gemv.gemv)(x, w)
                for kernel, suffix in zip(kernels, ("", "_reduce"), strict=True):
                    for args, kwargs in rec.calls.get(kernel.fn.__name__, {}).values():
                        _emit(f"{name}_m{m}{suffix}", kernel, args, kwargs)


def attention() -> None:
    """The stage 1 and combine cases (module notes)."""
    for kv in ("bf16", "int8"):
        for step, buckets in (("step1", (1,)), ("verify16", (16,))):
            with gpu_facts(), LaunchRecorder(decode_path_kernels()) as rec:
                generate_like("8b", 13, buckets, kv_cache=kv, num_pages=65)
                magic = decode_tiles(torch.device("cuda", 0), torch.int8).int8_magic
            for kernel, label in ((_decode_split_kernel, "stage1"), (_combine_kernel, "combine")):
                calls = list(rec.calls[kernel.fn.__name__].values())  # the prompt's, the step's
                cases = [(step, calls[-1])] + ([("prompt13", calls[0])] if step == "step1" else [])
                for name, (args, kwargs) in cases:
                    if kwargs.get("IS_INT8"):  # a CUDA q's code conversion (meta: as on a CPU)
                        kwargs = {**kwargs, "INT8_MAGIC": magic}
                    _emit(f"{label}_{kv}_{name}", kernel, args, kwargs)


def _emit(case: str, jit, args: tuple, kwargs: dict) -> None:
    kernel = compile_launch(jit, args, kwargs)
    out = {"case": case}
    for suffix, text in (("ptx", clean_ptx(kernel.asm["ptx"])),
                         ("sass", sass(kernel.asm["cubin"]))):
        out[suffix] = hashlib.sha1(text.encode()).hexdigest()[:12]
        if OUTDIR:
            OUTDIR.mkdir(parents=True, exist_ok=True)
            (OUTDIR / f"{case}.{suffix}").write_text(text)
    out["key"] = launch_key(jit, *args, **kwargs)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
