"""The decode-prologue test case (``test_kernels_decode_prologue.py`` on the CPU,
``test_decode_prologue_gpu.py`` on a GPU): a pool of random data, sequences on scrambled pages and
one decode step's raw q, k and v, run through stage 1 with the prologue and through the unfused
path (``qk_norm_rope``, ``store_kv``, ``decode_attention``: the oracle), and the check that the
two agree."""

from __future__ import annotations

import torch

from infer.kv_pool import LayerCache, int8_v_shape
from kernels.decode_attention import decode_attention
from kernels.decode_prologue import DecodePrologue
from kernels.qk_norm_rope import qk_norm_rope
from kernels.store_kv import store_kv
from models.config import YarnScaling
from models.rope import rope_parameters

YARN = YarnScaling(factor=4.0, original_max_position_embeddings=32768)
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float16: dict(atol=2e-3, rtol=2e-3),
       torch.bfloat16: dict(atol=1.6e-2, rtol=1.6e-2)}


class Step:
    """A pool of random data, sequences on scrambled pages and one decode step's raw q, k, v
    (views into one fused qkv row, as the model passes them).

    ``seq_lens`` count this step's ``n`` tokens (0: a padding sequence, slot -1). With
    ``slab_rows`` the step is a verify step of one-query rows: ``seq_lens`` are then those of
    the rows, and ``slab_rows`` says which rows one program attends (``one_sequence``: rows of
    one sequence without slabs, one program per row). RoPE runs at the positions
    plus ``rope_shift`` (large angles; the keys walked stay few)."""

    def __init__(self, seq_lens, n, group, dtype, int8, slab_rows=None, rope_shift=100_000,
                 seed=0, kv_heads=2, head_dim=16, page=8, device="cpu", one_sequence=False):
        g = torch.Generator().manual_seed(seed)
        self.n, self.dtype, self.page = n, dtype, page
        rows = len(seq_lens)
        pages_per = -(-max(seq_lens) // page)
        num_pages = pages_per * rows + 3
        shape = (num_pages, kv_heads, page, head_dim)
        if int8:
            cache = (torch.randint(-127, 128, shape, dtype=torch.int8, generator=g),
                     torch.randint(-127, 128, int8_v_shape(shape), dtype=torch.int8, generator=g),
                     torch.rand(shape[:3], generator=g) * 0.05,
                     torch.rand(shape[:3], generator=g) * 0.05)
        else:
            cache = tuple(torch.randn(shape, generator=g).to(dtype) for _ in range(2))
        self.cache = LayerCache(*(t.to(device) for t in cache))
        perm = torch.randperm(num_pages, generator=g)[:pages_per * rows].view(rows, pages_per)
        if slab_rows is not None or one_sequence:  # a verify step's rows: one sequence's pages
            perm[:] = perm[0]
        if slab_rows is not None:
            slab_rows = slab_rows.to(device)
        self.page_table = perm.to(torch.int32).to(device)
        self.seq_lens = torch.tensor(seq_lens, dtype=torch.int32, device=device)
        tokens = rows * n
        hq = kv_heads * group
        qkv = torch.randn(tokens, (hq + 2 * kv_heads) * head_dim, generator=g) * 2
        qkv = qkv.to(device=device, dtype=dtype)
        q, k, v = qkv.split([hq * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
        self.q = q.view(tokens, hq, head_dim)
        self.k = k.view(tokens, kv_heads, head_dim)
        self.v = v.view(tokens, kv_heads, head_dim)
        pos = torch.zeros(tokens, dtype=torch.int64)
        slots = torch.full((tokens,), -1, dtype=torch.int64)
        for b, s in enumerate(seq_lens):
            for t in range(n if s else 0):
                p = s - n + t
                pos[b * n + t] = p + rope_shift
                slots[b * n + t] = int(perm[b, p // page]) * page + p % page
        qw = (torch.rand(head_dim, generator=g) + 0.5).to(device, dtype)
        kw = torch.randn(head_dim, generator=g).to(device, dtype)
        inv_freq, af = rope_parameters(head_dim, 1e6, YARN)
        self.norm = (qw, kw, 1e-6, pos.to(device), inv_freq.to(device), af)
        self.slots = slots.to(device)
        self.slab_rows = slab_rows

    def prologue(self) -> DecodePrologue:
        qw, kw, eps, pos, inv_freq, af = self.norm
        return DecodePrologue(self.k, self.v, qw, kw, eps, pos, inv_freq, af, self.slots)

    def unfused(self, num_splits):
        """The oracle on a copy of the pool: ``(out, pool)``."""
        c = LayerCache(*(None if t is None else t.clone()
                         for t in (self.cache.k, self.cache.v, self.cache.k_scale,
                                   self.cache.v_scale)))
        qo, ko = qk_norm_rope(self.q, self.k, *self.norm)
        store_kv(ko, self.v, c.k, c.v, self.slots, c.k_scale, c.v_scale)
        return self.attend(qo, c, num_splits, None), c

    def fused(self, num_splits):
        """Stage 1 with the prologue on this step's pool (written in place): ``out``."""
        return self.attend(self.q, self.cache, num_splits, self.prologue())

    def attend(self, q, c, num_splits, prologue):
        return decode_attention(q, c.k, c.v, self.seq_lens, self.page_table, num_queries=self.n,
                                k_scale=c.k_scale, v_scale=c.v_scale, num_splits=num_splits,
                                slab_rows=self.slab_rows, prologue=prologue)


def check_prologue(step: Step, num_splits: int | None) -> None:
    """Stage 1 with the prologue against the oracle: the outputs within the dtype's tolerance,
    values stored bit for bit, keys within the tolerance, every other slot of the pool
    untouched."""
    want, want_pool = step.unfused(num_splits)
    got = step.fused(num_splits)
    tol = TOL[step.dtype]
    torch.testing.assert_close(got.float(), want.float(), **tol)
    pool, new = step.cache, step.slots[step.slots >= 0]
    page, off = new // step.page, new % step.page
    assert torch.equal(pool.v, want_pool.v)
    torch.testing.assert_close(pool.k.float(), want_pool.k.float(), **tol)
    untouched = torch.ones(pool.k.shape[:3], dtype=torch.bool, device=pool.k.device)
    untouched[page, :, off] = False
    assert torch.equal(pool.k[untouched], want_pool.k[untouched])

