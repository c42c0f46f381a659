"""How many compiles a sequence of kernel launches needs: Triton 3.6's specialization key of each
launch, computed on the CPU without compiling (``tests/test_kernel_specs.py``; as a script it
prints the keys of a generate-like run of the Qwen3-8B shape on an H200).

A ``@triton.jit`` kernel compiles once per distinct key (``JITFunction.run`` in
``triton/runtime/jit.py``: ``compute_cache_key`` of the binder's ``specialization`` and the launch
options). The binder (``create_function_from_signature``) maps each argument through
``native_specialize_impl``:

- a constexpr: ``("constexpr", value)``;
- an int: ``("constexpr", 1)`` when it equals 1, else ``("i32", "D")`` when divisible by 16
  (``tt.divisibility`` 16), ``("i32", "")`` otherwise (``i64`` past int32); an argument named in
  ``do_not_specialize``: ``("i32", None)``, whatever the value;
- a tensor: ``("*bf16", "D")`` when its address is a multiple of 16 bytes, else ``""``
  (``do_not_specialize_on_alignment``: never ``"D"``);
- a float ``("fp32", None)``, a bool ``("u1", None)``, None ``("constexpr", None)``.

``launch_key`` calls that same binder. Under ``TRITON_INTERPRET=1`` (the test suite) a kernel is an
``InterpretedFunction``, which keeps the ``triton.jit`` keyword arguments: the binder is built
from them, so the keys are those a GPU launch computes. Meta tensors report their byte offset
as ``data_ptr``, the alignment a view of a CUDA caching-allocator block (512-byte aligned) has:
a model on the meta device gives real shapes' keys without memory or compute.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch
from triton.backends.compiler import BaseBackend
from triton.runtime.jit import JITFunction, compute_cache_key, create_function_from_signature


@functools.cache
def _binder(fn, do_not_specialize: tuple, do_not_specialize_on_alignment: tuple):
    jit = JITFunction(fn, do_not_specialize=list(do_not_specialize),
                      do_not_specialize_on_alignment=list(do_not_specialize_on_alignment))
    return create_function_from_signature(jit.signature, jit.params, BaseBackend)


def binder_of(kernel):
    """The argument binder of ``kernel`` (a ``JITFunction`` or the interpreter's stand-in):
    ``binder(*args, **kwargs) -> (bound args, specialization, launch options)``."""
    if isinstance(kernel, JITFunction):
        dns, dnsa = kernel.do_not_specialize, kernel.do_not_specialize_on_alignment
    else:  # InterpretedFunction: the jit keyword arguments as given
        dns = kernel.kwargs.get("do_not_specialize")
        dnsa = kernel.kwargs.get("do_not_specialize_on_alignment")
    return _binder(kernel.fn, tuple(dns or ()), tuple(dnsa or ()))


def launch_key(kernel, *args, **kwargs) -> str:
    """The cache key ``kernel[grid](*args, **kwargs)`` looks its compiled kernel up by (the
    ``debug`` and ``instrumentation_mode`` options ``run`` adds are left out: the same for every
    launch of a run)."""
    _, spec, options = binder_of(kernel)(*args, **kwargs)
    return compute_cache_key({}, spec, options)


def differing(kernel, keys: list[list[tuple]]) -> dict[str, list]:
    """The arguments whose specialization differs between ``keys`` (``specialization`` lists of
    ``kernel``): name -> the values, one per key."""
    names = list(inspect.signature(kernel.fn).parameters)
    return {n: [k[i] for k in keys] for i, n in enumerate(names)
            if len({repr(k[i]) for k in keys}) > 1}


class LaunchRecorder:
    """Inside ``with``: each launch of ``kernels`` records its key and specialization (by the
    kernel's name); with ``execute=False`` nothing runs (the outputs stay as allocated).

    Attributes:
        specs: kernel name -> ``{key: specialization}``, keys in first-launch order.
        calls: kernel name -> ``{key: (args, kwargs)}`` of the key's first launch (what
            ``tests/compile_launch_ptx.py`` compiles).
        launches: kernel name -> launches seen.
    """

    def __init__(self, kernels: Iterable, execute: bool = False):
        self.kernels, self.execute = list(kernels), execute
        self.specs: dict[str, dict[str, list[tuple]]] = {}
        self.calls: dict[str, dict[str, tuple]] = {}
        self.launches: dict[str, int] = {}

    def counts(self) -> dict[str, int]:
        """Kernel name -> distinct keys (= compiles on an empty cache), launched kernels only."""
        return {name: len(keys) for name, keys in self.specs.items()}

    def __enter__(self) -> LaunchRecorder:
        for kernel in self.kernels:
            kernel.run = self._recording(kernel, kernel.run)  # an instance attribute
        return self

    def __exit__(self, *exc) -> None:
        for kernel in self.kernels:
            del kernel.run  # the class's run again

    def _recording(self, kernel, run):
        name = kernel.fn.__name__

        def recorded(*args, grid, warmup, **kwargs):
            _, spec, options = binder_of(kernel)(*args, **kwargs)
            key = compute_cache_key({}, spec, options)
            self.specs.setdefault(name, {}).setdefault(key, spec)
            self.calls.setdefault(name, {}).setdefault(key, (args, kwargs))
            self.launches[name] = self.launches.get(name, 0) + 1
            if self.execute:
                return run(*args, grid=grid, warmup=warmup, **kwargs)
            return None

        return recorded


def decode_path_kernels() -> list:
    """Every ``triton.jit`` kernel a step of 1 to 16 tokens may launch."""
    from kernels.combine import _combine_kernel
    from kernels.decode_attention import _decode_split_kernel
    from kernels.gemv import _gemv_kernel, _splitk_reduce_kernel
    from kernels.greedy import _greedy_combine_kernel, _greedy_partial_kernel
    from kernels.qk_norm_rope import _qk_norm_rope_kernel
    from kernels.qk_norm_rope_store import _qk_norm_rope_store_kernel
    from kernels.rmsnorm import _rmsnorm_kernel
    from kernels.store_kv import _store_kv_kernel
    from kernels.topk_sample import _topk_partial_kernel, _topk_sample_kernel
    return [_gemv_kernel, _splitk_reduce_kernel, _rmsnorm_kernel, _qk_norm_rope_kernel,
            _qk_norm_rope_store_kernel, _store_kv_kernel, _decode_split_kernel, _combine_kernel,
            _greedy_partial_kernel, _greedy_combine_kernel, _topk_partial_kernel,
            _topk_sample_kernel]


@contextlib.contextmanager
def gpu_facts(capability: tuple[int, int] = (9, 0), sms: int = 132) -> Iterator[None]:
    """Inside: the launchers' tile and PDL choices are those of a GPU of ``capability`` with
    ``sms`` SMs (an H200 by default) for tensors on any device (the meta device too)."""
    from kernels import decode_plan, device, tiles

    saved = [(mod, name, getattr(mod, name)) for mod, name in
             ((device, "capability"), (tiles, "capability"), (tiles, "sm_count"),
              (decode_plan, "sm_count"))]
    device.capability = tiles.capability = lambda dev: capability
    tiles.sm_count = decode_plan.sm_count = lambda dev: sms
    try:
        yield
    finally:
        for mod, name, value in saved:
            setattr(mod, name, value)


def generate_like(size: str, prompt_len: int, buckets: Iterable[int] = (1, 1, 1), *,
                  page_size: int = 64, num_pages: int = 64, layers: int | None = 2,
                  kv_cache: str = "bf16", cached: int = 0, top_k: int = 0) -> None:
    """The launches of a reply as ``infer generate`` runs it, on the meta device (launch them
    under a ``LaunchRecorder`` with ``execute=False``; under ``gpu_facts`` for a GPU's tiles):
    the prompt of ``prompt_len`` tokens (at most 16: the decode-path kernels) prefilled in one
    chunk after ``cached`` positions (a chat turn's history) and its last row's logits, then
    one step of the graph runner per entry of ``buckets``, of that many rows
    (``GraphRunner._run``'s model part over ``StaticBuffers``: 1 is a plain decode step, 16
    the largest speculative verify step, which ``generate`` never runs by default), each with
    its logits' greedy pick (``kernels.greedy``, as ``sample`` runs it on CUDA), or with
    ``top_k`` > 0 its draw (``kernels.topk_sample``: a real Qwen3's ``generation_config``
    samples with top-k 20, top-p 0.95 and temperature 0.6). ``size``: a
    ``models.random_checkpoint`` size (``"tiny"``, ``"8b"``, ...), with ``layers`` decoder
    layers (None: all; every layer launches the same kernels). BF16 weights; ``kv_cache`` as
    ``EngineConfig.kv_cache``."""
    from infer.attention import TritonAttention
    from infer.kv_pool import KVPool
    from infer.meta import build_meta
    from infer.step_buffers import StaticBuffers
    from kernels import device
    from kernels.decode_plan import default_num_splits
    from kernels.greedy import greedy_tokens
    from kernels.topk_sample import topk_sample
    from models.config import Qwen3Config
    from models.meta_modules import meta_modules
    from models.qwen3 import Qwen3ForCausalLM
    from models.qwen3_fused import project
    from models.random_checkpoint import base_config

    assert 1 <= prompt_len <= 16
    cfg = base_config(size)
    if layers is not None:
        cfg["num_hidden_layers"] = layers
    c = Qwen3Config.from_dict(cfg)
    with meta_modules():
        model = Qwen3ForCausalLM(c).to(torch.bfloat16).eval()
    meta_dev = torch.device("meta")
    pool = KVPool(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, num_pages, page_size,
                  kv_cache, torch.bfloat16, meta_dev)
    # the engine's split count: a GPU's (under gpu_facts) for a CUDA pool, 2 on the CPU
    splits_dev = torch.device("cuda", 0) if device.capability(meta_dev) else meta_dev
    attn = TritonAttention(pool, group=c.gqa_group, max_batch=1,
                           num_splits=default_num_splits(1, c.num_key_value_heads, splits_dev,
                                                         pool.layer(0).k.dtype))

    def forward(ids: torch.Tensor, meta) -> torch.Tensor:  # Qwen3ForCausalLM.forward on CUDA
        return model._forward_fused(model.model.embed_tokens(ids), meta.positions, attn, meta)

    limit = min(151669, c.vocab_size)  # the Qwen3 tokenizer's vocab_limit, as the engine passes

    def pick(logits: torch.Tensor) -> None:  # ``infer.sampling.sample`` on CUDA
        if top_k:
            noise = torch.empty((logits.shape[0], top_k), device=meta_dev)
            topk_sample(logits, noise, top_k, 0.6, 0.95, 0.0, limit)
        else:
            greedy_tokens(logits, limit)
    with torch.inference_mode():
        pages = pool.allocate(-(-(cached + prompt_len) // page_size))
        meta = build_meta([(pages, cached, prompt_len)], page_size, meta_dev)
        hidden = forward(torch.zeros(prompt_len, dtype=torch.int64, device=meta_dev), meta)
        # the first token's logits (session._forward) and its pick (``sample`` on CUDA)
        pick(project(model.lm_head, hidden[-1:]).float())
        bufs = StaticBuffers.allocate(16, c.vocab_size, num_pages, meta_dev)
        for rows in buckets:
            logits = project(model.lm_head, forward(bufs.input_ids[:rows],
                                                    bufs.meta(rows, page_size))).float()
            pick(logits)


def main() -> None:
    """Print, per kernel, its compiles for a 13-token prompt (``infer generate M Hello``'s chat
    template) and 3 decode steps of the Qwen3-8B shape on an H200, and the arguments whose
    specialization tells the compiles apart."""
    import json

    kernels = decode_path_kernels()
    with gpu_facts(), LaunchRecorder(kernels) as rec:
        generate_like("8b", 13)
    by_name = {k.fn.__name__: k for k in kernels}
    for name, specs in rec.specs.items():
        diff = differing(by_name[name], list(specs.values())) if len(specs) > 1 else {}
        print(json.dumps({"kernel": name, "launches": rec.launches[name],
                          "compiles": len(specs), "differ": diff}, default=str))
    print(json.dumps({"total_compiles": sum(rec.counts().values())}))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
