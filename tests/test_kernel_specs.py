"""Kernel compiles on a cold Triton cache: the launches of a reply need no more specializations
than intended (``tests/launch_specs.py`` computes Triton 3.6's specialization key of each launch
on the CPU, on meta-device shapes, with an H200's tiles and PDL choices).

A reply as ``infer generate`` runs it: a prompt of up to 16 tokens prefilled through the
decode-path kernels, then 1-row decode steps. Intended, per kernel: the GEMV once per tile
configuration and row class (Triton specializes ``M``: 1, divisible by 16, other; a
``do_not_specialize`` M, branch ``cold-specs-gemv``, would make it once per tile, which waits
for a GPU measurement of the decode step's speed); RMSNorm twice
(with and without the residual add); q/k-norm + RoPE and the KV store never with a 16-bit
pool (stage 1 does both: ``models.qwen3_fused.ATTENTION_PROLOGUE``), their fused kernel once
with INT8; stage 1 and the
combine once for the prompt's ``NUM_QUERIES`` and once for the decode step (a 1-token prompt
shares the decode step's combine; stage 1's decode step has slabs, the prompt's has not).
Speculative verify steps add nothing, and a short prompt after a history shares the stage 1 of
a first prompt of its length.
"""

from __future__ import annotations

import pytest
import torch
from launch_specs import LaunchRecorder, decode_path_kernels, generate_like, gpu_facts, launch_key

from kernels import gemv


def _reply_compiles(size: str, prompt_len: int, buckets=(1, 1, 1), **kw) -> dict[str, int]:
    with gpu_facts(), LaunchRecorder(decode_path_kernels()) as rec:
        generate_like(size, prompt_len, buckets, **kw)
    return rec.counts()


@pytest.mark.parametrize("size", ["8b", "tiny"])
@pytest.mark.parametrize("prompt_len", [1, 2, 13, 16])
def test_reply_compiles_each_kernel_as_often_as_intended(size, prompt_len):
    """13 tokens: ``infer generate M Hello`` (the chat template): 17 compiles in all, 8 of them
    the GEMV's (its row count specialized: M == 1 a constexpr, 13 not; a 1-token prompt shares
    the decode step's)."""
    # per row class (M == 1, and the prompt's rows), with the norms in the GEMVs
    # (models.qwen3_fused.NORM_IN_GEMV): the plain GEMV of the first layer's qkv, the qkv and
    # SwiGLU gate/up consumers, the o_proj / down_proj producer: 4; the lm_head runs one row
    # (M == 1 only), on the 8B in the first qkv's tile, on the tiny model in one of its own.
    # One RMSNorm (no residual: the first layer's input and the final norm). The greedy pick's
    # two kernels once each (no argument of theirs varies with the rows). A BF16 pool: no
    # q/k-norm + RoPE or KV store launch (stage 1's prologue); INT8: their one fused kernel.
    one_row = {"8b": 4, "tiny": 5}[size]
    expect = {
        "_gemv_kernel": one_row + (0 if prompt_len == 1 else 4), "_rmsnorm_kernel": 1,
        "_decode_split_kernel": 2, "_combine_kernel": 1 if prompt_len == 1 else 2,
        "_greedy_partial_kernel": 1, "_greedy_combine_kernel": 1}
    assert _reply_compiles(size, prompt_len) == expect
    assert _reply_compiles(size, prompt_len, kv_cache="int8") == expect | {
        "_qk_norm_rope_store_kernel": 1}


@pytest.mark.parametrize("top_k", [20, 50, 64])
def test_sampled_reply_compiles_the_draw_once_instead_of_the_argmax(top_k):
    """A real Qwen3 samples (its ``generation_config``: top-k 20): the draw's two kernels
    (``kernels.topk_sample``) compile once each, in place of the greedy pick's two."""
    greedy = _reply_compiles("8b", 13)
    sampled = _reply_compiles("8b", 13, top_k=top_k)
    del greedy["_greedy_partial_kernel"], greedy["_greedy_combine_kernel"]
    assert sampled == greedy | {"_topk_partial_kernel": 1, "_topk_sample_kernel": 1}


@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_verify_steps_add_only_the_gemv_16_row_class(kv_cache):
    """Speculative verify steps (2 to 16 one-query rows; ``chat``) reuse the decode step's
    attention kernels: stage 1 and the combine do not specialize the lse strides, which differ
    between the one-sequence workspace slice and the packed view of one-query rows."""
    base = _reply_compiles("8b", 13, kv_cache=kv_cache)
    verify = _reply_compiles("8b", 13, (1, 2, 4, 8, 16, 1), kv_cache=kv_cache)
    # the GEMV's third row class (16 rows: divisible by 16) is the one addition
    assert verify == base | {"_gemv_kernel": 12}


def test_short_prompts_of_one_length_share_stage1_whatever_the_page_table():
    """A prompt of up to 16 tokens after a cached history (a chat turn) reuses the stage 1 of a
    first prompt of the same length: the page-table row stride (the table's width) is not
    specialized."""
    with gpu_facts(), LaunchRecorder(decode_path_kernels()) as rec:
        for cached in (0, 100, 1000, 1100):  # tables 1, 2, 16 and 18 pages wide
            generate_like("8b", 13, (), cached=cached)
    assert rec.counts()["_decode_split_kernel"] == 1


@pytest.mark.parametrize("n, k, swiglu", [(6144, 4096, False), (4096, 12288, False),
                                          (24576, 4096, True), (1024, 2048, False)])
def test_gemv_keys_for_1_to_16_rows(n, k, swiglu):
    """The GEMV and the split-K reduce (the 0.6B's o_proj) compile once per row class that
    Triton specializes M into: 1, divisible by 16 (16), other (2..15)."""
    w = torch.empty(n, k, dtype=torch.bfloat16, device="meta")
    kernels = [gemv._gemv_kernel, gemv._splitk_reduce_kernel]
    with gpu_facts(), LaunchRecorder(kernels) as rec:
        for m in range(1, 17):
            x = torch.empty(m, k, dtype=torch.bfloat16, device="meta")
            (gemv.gemv_swiglu if swiglu else gemv.gemv)(x, w)
    expected = {"_gemv_kernel": 3} | ({"_splitk_reduce_kernel": 3} if n == 1024 else {})
    assert rec.counts() == expected
    assert rec.launches["_gemv_kernel"] == 16


def test_launch_key_follows_triton_int_rules():
    """The rule the keys rest on (Triton 3.6, ``native_specialize_impl``): an int argument equal
    to 1 becomes a constexpr and one divisible by 16 carries that divisibility (unless the kernel
    names it in ``do_not_specialize``, as stage 1 does its page-table stride): the GEMV's M
    too."""
    from kernels.rmsnorm import _rmsnorm_kernel  # its row strides are plain, specialized ints

    x = torch.empty(16, 64, dtype=torch.float16, device="meta")

    def key(stride: int) -> str:
        return launch_key(_rmsnorm_kernel, x, x, x[0], x, x, stride, 64, 64, 64, 1e-6,
                          HIDDEN=64, BLOCK=64, HAS_RESIDUAL=True, USE_PDL=False)

    assert len({key(1), key(2), key(3), key(32), key(48)}) == 3  # 1 | 2, 3 | 32, 48
    w = torch.empty(32, 64, dtype=torch.float16, device="meta")

    def gemv_key(m: int) -> str:
        y = torch.empty(m, 32, dtype=torch.float16, device="meta")
        return launch_key(gemv._gemv_kernel, x[:m], w, y, m, 32, 64, 64, 64, 32, BLOCK_M=16,
                          BLOCK_N=16, BLOCK_K=64, EVEN_K=True, SWIGLU=False, STAGES=1,
                          DOT_PREC="tf32")

    assert gemv_key(3) == gemv_key(5) and len({gemv_key(1), gemv_key(3), gemv_key(16)}) == 3
