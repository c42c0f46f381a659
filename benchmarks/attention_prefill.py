"""Prefill cases of the attention benchmark (``benchmarks/attention.py``; its module docstring
defines the records): ours per tile config against SDPA's FlashAttention-2 and cuDNN backends.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from benchmarks.attention_common import DEVICE, HKV, HQ, D, bench, make_pool

# Prefill tile sweep: (BLOCK_M, BLOCK_N, num_warps, num_stages, TMA loads); the other
# ``PrefillTiles`` fields (int8 scoring, staged queries) keep the default for the step.
SWEEP_PREFILL = [(128, 64, 8, 3, False), (128, 128, 8, 3, False), (128, 64, 8, 4, False),
                 (128, 64, 4, 3, False), (64, 64, 4, 3, False), (64, 128, 4, 3, False),
                 (64, 64, 4, 4, False), (32, 64, 4, 3, False), (32, 32, 4, 4, False),
                 (128, 64, 8, 3, True), (128, 64, 8, 4, True), (64, 64, 4, 3, True),
                 (128, 64, 4, 3, True), (128, 64, 4, 4, True), (128, 64, 4, 2, True),
                 (64, 64, 4, 4, True), (64, 64, 4, 6, True), (128, 64, 8, 5, True),
                 (128, 64, 8, 6, True)]


def causal_flops(n_new: int, seq_len: int) -> float:
    """4 * head_dim * Hq FLOPs per attended (query, key) pair; query t of the chunk attends
    ``seq_len - n_new + t + 1`` keys."""
    ctx = seq_len - n_new
    return 4.0 * (n_new * ctx + n_new * (n_new + 1) / 2) * D * HQ


def _label(cfg) -> object:
    """A record's ``config``: "default", the sweep's tile list, or the default's overrides."""
    if isinstance(cfg, dict):
        return {"default+": cfg}
    return list(cfg) if cfg else "default"


def bench_prefill(seq_len: int, n_new: int, kv: str, configs: list, rep_ms: int):
    """Yields prefill records: ours per tile config for the last ``n_new`` positions of a
    ``seq_len`` sequence; SDPA flash and cuDNN for bf16 whole-prompt prefill (n_new = seq_len)."""
    from kernels.prefill_attention import prefill_attention
    from kernels.tiles import prefill_tiles
    base = {"what": "prefill", "kv": kv, "positions": seq_len, "new_tokens": n_new}
    flops = causal_flops(n_new, seq_len)
    k, v, ks, vs, table, seq_lens = make_pool(seq_len, kv)
    q = torch.randn(n_new, HQ, D, dtype=torch.bfloat16, device=DEVICE)
    qsl = torch.tensor([0, n_new], dtype=torch.int32, device=DEVICE)
    out = torch.empty_like(q)
    default = prefill_tiles(q.device, q.dtype, k.dtype, max_query_len=n_new, page_size=k.shape[2],
                            head_dim=D)
    for cfg in configs:
        try:
            tiles = None
            if isinstance(cfg, dict):  # --prefill-opts: PrefillTiles fields over the default
                tiles = dataclasses.replace(default, **cfg)
            elif cfg:
                bm, bn, nw, st, tma = cfg
                tiles = dataclasses.replace(default, block_m=bm, block_n=bn, num_warps=nw,
                                            num_stages=st, use_tma=tma)
            fn = lambda tiles=tiles: prefill_attention(  # noqa: E731
                q, k, v, seq_lens, qsl, table, max_query_len=n_new, sm_scale=D ** -0.5,
                k_scale=ks, v_scale=vs, out=out, tiles=tiles)
            fn()
            ms = bench(fn, rep_ms)
            yield {**base, "impl": "ours", "config": _label(cfg),
                   "us": ms * 1e3, "TFLOP/s": flops / ms / 1e9}
        except Exception as e:  # e.g. out of shared memory for a large tile
            yield {**base, "impl": "ours", "config": _label(cfg),
                   "error": f"{type(e).__name__}: {e}"[:300]}
    if kv != "bf16" or n_new != seq_len:  # SDPA's is_causal has no cached-prefix offset
        return
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q4 = q.view(1, seq_len, HQ, D).transpose(1, 2)  # [1, Hq, S, D]
    kc = torch.randn(1, HKV, seq_len, D, dtype=torch.bfloat16, device=DEVICE)
    vc = torch.randn_like(kc)
    for name, backend in (("sdpa_flash", SDPBackend.FLASH_ATTENTION),
                          ("sdpa_cudnn", SDPBackend.CUDNN_ATTENTION)):
        rec = {**base, "impl": name}
        for gqa in ("enable_gqa", "expanded"):
            try:
                if gqa == "enable_gqa":
                    kk, vv, kw = kc, vc, {"enable_gqa": True}
                else:
                    kk = kc.repeat_interleave(HQ // HKV, dim=1)
                    vv = vc.repeat_interleave(HQ // HKV, dim=1)
                    kw = {}

                def fn(kk=kk, vv=vv, kw=kw, backend=backend):
                    with sdpa_kernel(backend):
                        return F.scaled_dot_product_attention(q4, kk, vv, is_causal=True, **kw)
                fn()
                ms = bench(fn, rep_ms)
                rec.update(gqa=gqa, us=ms * 1e3, **{"TFLOP/s": flops / ms / 1e9})
                rec.pop("error", None)
                break
            except Exception as e:  # backend unavailable for this shape/build
                rec["error"] = f"{type(e).__name__}: {e}"[:300]
        yield rec
