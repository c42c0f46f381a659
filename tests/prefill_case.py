"""The prefill-kernel test case (``test_kernels_prefill.py``, ``test_kernels_prefill_int8.py`` use
it): a pool holding sequences of cached and new tokens on scrambled pages, NaN (or garbage codes
with NaN scales) in every slot no sequence owns, the step's queries and meta; the kernel run with
tile overrides, and the check against ``kernels.reference.paged_attention``."""

from __future__ import annotations

import dataclasses
import math

import torch

from infer.kv_pool import LayerCache, int8_v_shape
from infer.meta import build_meta
from kernels import reference as ref
from kernels.prefill_attention import prefill_attention
from kernels.tiles import PrefillTiles, prefill_tiles

# INT8 (per-vector, scale = amax/127) output error relative to full precision, as NMSE
# sum((o - o_ref)^2) / sum(o_ref^2). Measured ~5e-5 on the CPU cases (random data); 10x margin.
INT8_NMSE_BOUND = 5e-4
TOL = {torch.float32: dict(atol=2e-5, rtol=2e-5), torch.float16: dict(atol=2e-3, rtol=4e-3),
       torch.bfloat16: dict(atol=1.5e-2, rtol=2e-2)}


def make_step(spec, *, page_size=16, hkv=1, group=1, head_dim=16, dtype=torch.float16,
              kv="float", num_pages=None, pages=None, device="cpu", fill_nan=True):
    """A pool holding ``spec = [(num_cached, num_new), ...]`` sequences, plus queries and meta.

    Pages are drawn in scrambled order (or given as ``pages``); the pool starts as NaN (float) or
    garbage codes with NaN scales (INT8), so anything read outside the stored positions shows.
    Returns (q [T, Hq, D], cache, meta, full-precision K/V per sequence).
    """
    need = [-(-(c + n) // page_size) for c, n in spec]
    if pages is None:
        num_pages = num_pages or sum(need) + 3
        pages = torch.randperm(num_pages).tolist()
    shape = (num_pages, hkv, page_size, head_dim)
    if kv == "int8":
        def codes(shape=shape):
            if fill_nan:
                return torch.randint(-127, 128, shape, dtype=torch.int8, device=device)
            return torch.empty(shape, dtype=torch.int8, device=device)

        def scales():
            s = torch.empty(shape[:3], dtype=torch.float32, device=device)
            return s.fill_(math.nan) if fill_nan else s

        cache = LayerCache(codes(), codes(int8_v_shape(shape)), scales(), scales())
    else:
        def values():
            x = torch.empty(shape, dtype=dtype, device=device)
            return x.fill_(math.nan) if fill_nan else x

        cache = LayerCache(values(), values())
    seqs, kvs, i = [], [], 0
    for (c, n), m in zip(spec, need, strict=True):
        seqs.append((pages[i:i + m], c, n))
        i += m
    meta = build_meta(seqs, page_size, device)
    for (seq_pages, c, n) in seqs:
        s = c + n
        k = torch.randn(s, hkv, head_dim, device=device).to(dtype)
        v = torch.randn(s, hkv, head_dim, device=device).to(dtype)
        slots = torch.tensor([seq_pages[p // page_size] * page_size + p % page_size
                              for p in range(s)], dtype=torch.int64, device=device)
        ref.store_kv(k, v, cache, slots)
        kvs.append((k.float(), v.float()))
    q = (1.5 * torch.randn(meta.num_tokens, hkv * group, head_dim, device=device)).to(dtype)
    return q, cache, meta, kvs


TILE_FIELDS = {f.name for f in dataclasses.fields(PrefillTiles)}


def run_kernel(q, cache, meta, **kw):
    """``prefill_attention`` on a step; keyword arguments named like ``PrefillTiles`` fields
    override the default tiles (``use_tma`` picks the default tiles of that load path)."""
    mql = kw.pop("max_query_len", meta.max_query_len)
    over = {k: kw.pop(k) for k in list(kw) if k in TILE_FIELDS}
    tiles = None
    if over:
        tma = over.get("use_tma", True)
        base = prefill_tiles(q.device, q.dtype, cache.k.dtype, max_query_len=mql,
                             page_size=cache.k.shape[2], head_dim=q.shape[2], tma=tma)
        tiles = dataclasses.replace(base, **{"use_tma": tma, **over})
    return prefill_attention(q, cache.k, cache.v, meta.seq_lens, meta.query_start_loc,
                             meta.page_table, max_query_len=mql,
                             sm_scale=kw.pop("sm_scale", None), k_scale=cache.k_scale,
                             v_scale=cache.v_scale, tiles=tiles, **kw)


def check(q, cache, meta, **kw):
    out = run_kernel(q, cache, meta, **kw)
    expect = ref.paged_attention(q.float(), cache, meta, kw.get("sm_scale"))
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), expect, **TOL[q.dtype])
    return out
