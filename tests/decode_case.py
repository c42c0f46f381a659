"""The decode-kernel test case (``test_kernels_decode.py``, ``test_int8_codes.py`` use it): a
paged pool holding a batch of sequences on scrambled pages, with NaN in every slot no sequence
owns, the step's queries and the reference outputs."""

from __future__ import annotations

import dataclasses
import math

import torch

from infer.kv_pool import LayerCache, int8_v_shape
from infer.meta import AttnMeta
from kernels import reference
from kernels.decode_attention import decode_attention
from kernels.tiles import DecodeTiles, decode_tiles

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=2e-3, rtol=2e-3),
       torch.bfloat16: dict(atol=1.5e-2, rtol=1.5e-2)}
INT8_NMSE = 1e-3  # INT8 pool vs attention over the unquantized K/V


class Case:
    """A pool holding ``seq_lens`` sequences on scrambled pages; every other slot is NaN."""

    def __init__(self, seq_lens, n, kv_heads, group, head_dim, page_size, dtype, int8,
                 device="cpu", huge_pages=0, k_gain=1.0):
        self.n, self.dtype, self.device = n, dtype, device
        pages_per = [-(-s // page_size) for s in seq_lens]
        used = sum(pages_per)
        num_pages = max(huge_pages, used + 2)
        shape = (num_pages, kv_heads, page_size, head_dim)
        store = torch.int8 if int8 else dtype
        if huge_pages:  # virtual memory: only the pages written below become resident
            ids = torch.arange(num_pages - 2 * used - 1, num_pages, 2)[:used]
            ids = ids[torch.randperm(used)]
            nan_page = 1
            mk = lambda s, dt: torch.empty(s, dtype=dt, device=device)
        else:
            perm = torch.randperm(num_pages)
            ids, nan_page = perm[:used], int(perm[used])
            mk = lambda s, dt: torch.full(s, -1 if dt == torch.int8 else math.nan, dtype=dt,
                                          device=device)
        self.cache = LayerCache(mk(shape, store), mk(int8_v_shape(shape) if int8 else shape, store),
                                *((mk(shape[:3], torch.float32), mk(shape[:3], torch.float32))
                                  if int8 else ()))
        self._nan_fill(torch.tensor([nan_page]), int8)  # padding page-table entries
        table = torch.full((len(seq_lens), max(pages_per + [1]) + 1), nan_page, dtype=torch.int32)
        fulls, start = [], 0  # fulls: the unquantized K/V per sequence, float32
        for b, s in enumerate(seq_lens):
            pages = ids[start:start + pages_per[b]]
            start += pages_per[b]
            table[b, :len(pages)] = pages.to(torch.int32)
            self._nan_fill(pages, int8)
            k = torch.randn(s, kv_heads, head_dim, device=device) * k_gain
            v = torch.randn(s, kv_heads, head_dim, device=device)
            pos = torch.arange(s, device=device)
            slots = pages.to(device)[pos // page_size] * page_size + pos % page_size
            reference.store_kv(k.to(dtype), v.to(dtype), self.cache, slots)
            fulls.append((k.to(dtype).float(), v.to(dtype).float()))
        self.fulls = fulls
        bsz = len(seq_lens)
        self.seq_lens = torch.tensor(seq_lens, dtype=torch.int32, device=device)
        self.page_table = table.to(device)
        self.q = torch.randn(bsz * n, kv_heads * group, head_dim, device=device).to(dtype)
        self.meta = AttnMeta(
            positions=torch.zeros(bsz * n, dtype=torch.int64, device=device),
            slot_mapping=torch.zeros(bsz * n, dtype=torch.int64, device=device),
            seq_lens=self.seq_lens,
            query_start_loc=torch.arange(0, bsz * n + 1, n, dtype=torch.int32, device=device),
            page_table=self.page_table, max_query_len=n, max_seq_len=max(seq_lens))

    def _nan_fill(self, pages, int8):
        """Unused slots of a sequence's pages hold NaN (fp) or NaN scales (int8)."""
        c = self.cache
        if int8:
            c.k_scale[pages] = math.nan
            c.v_scale[pages] = math.nan
        else:
            c.k[pages] = math.nan
            c.v[pages] = math.nan

    def tiles(self, **overrides) -> DecodeTiles:
        """The default tiles of this case with ``overrides`` (``DecodeTiles`` fields)."""
        c = self.cache
        rows = self.n * self.q.shape[1] // c.k.shape[1]
        base = decode_tiles(self.device, c.k.dtype, page_size=c.k.shape[2], rows=rows)
        return dataclasses.replace(base, **overrides)

    def run(self, num_splits=None, workspace=None, out=None, **tile_overrides):
        """``decode_attention`` on this case; keyword arguments other than the launcher's own
        override fields of the default ``DecodeTiles``."""
        c = self.cache
        return decode_attention(self.q, c.k, c.v, self.seq_lens, self.page_table,
                                num_queries=self.n, k_scale=c.k_scale, v_scale=c.v_scale,
                                num_splits=num_splits, workspace=workspace, out=out,
                                tiles=self.tiles(**tile_overrides) if tile_overrides else None)

    def expected(self):
        """The reference over the pool (dequantized for INT8), zeros for empty sequences."""
        out = reference.paged_attention(self.q, self.cache, self.meta).float()
        return self._zero_empty(out)

    def expected_full(self):
        """Attention over the unquantized K/V (float32)."""
        out = torch.zeros(self.q.shape, dtype=torch.float32, device=self.device)
        for b, (k, v) in enumerate(self.fulls):
            s = k.shape[0]
            if s:
                out[b * self.n:(b + 1) * self.n] = reference.dense_causal_attention(
                    self.q[b * self.n:(b + 1) * self.n], k, v, q_offset=s - self.n)
        return out

    def _zero_empty(self, out):
        for b, s in enumerate(self.seq_lens.tolist()):
            if s == 0:
                out[b * self.n:(b + 1) * self.n] = 0
        return out


def _lengths(n, page):
    """Around page boundaries, never shorter than n, plus a padding sequence (0)."""
    return [max(n, s) for s in (1, page - 1, page, page + 1, 3 * page + 5)] + [0]
