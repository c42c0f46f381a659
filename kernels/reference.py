"""Plain-PyTorch references: the CPU attention path and the oracle for every Triton kernel.

Everything here is written for clarity, not speed: it loops over sequences, gathers K/V through the
page table, dequantizes INT8 and runs softmax attention in float32. Shapes follow
``infer/meta.py`` (``AttnMeta``) and ``infer/kv_pool.py`` (``LayerCache``).
"""

from __future__ import annotations

import math

import torch

INT8_MAX = 127.0


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-vector INT8 quantization over the last dim.

    Args:
        x: [..., D] any float dtype.

    Returns:
        codes: int8 [..., D], ``round(x / scale)`` clamped to [-127, 127].
        scale: float32 [...], ``max(amax, 1e-8) / 127``: a zero vector gets codes 0 and a tiny
            finite scale (never 0/0).
    """
    xf = x.float()
    amax = xf.abs().amax(dim=-1)
    scale = torch.clamp(amax, min=1e-8) / INT8_MAX
    codes = torch.clamp(torch.round(xf / scale.unsqueeze(-1)), -INT8_MAX, INT8_MAX)
    return codes.to(torch.int8), scale


def dequantize_int8(codes: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Inverse of ``quantize_int8``: float32 [..., D] = codes * scale[..., None]."""
    return codes.float() * scale.float().unsqueeze(-1)


def store_kv(k: torch.Tensor, v: torch.Tensor, cache, slot_mapping: torch.Tensor) -> None:
    """Write a step's new K/V into the pool (reference for ``kernels/store_kv.py``).

    Args:
        k, v: [T, kv_heads, head_dim] new keys/values (after k-norm and RoPE for keys).
        cache: a ``LayerCache``; INT8 pools get codes plus per-(token, head) scales, V codes in
            transposed pages ``[num_pages, kv_heads, head_dim, page_size]``.
        slot_mapping: int64 [T], flat slot ``page * page_size + offset``; a negative slot means
            "skip this token" (padding).
    """
    page_size = cache.k.shape[2]
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    k, v = k[keep], v[keep]
    page, off = slots // page_size, slots % page_size
    if cache.k.dtype == torch.int8:
        kc, ks = quantize_int8(k)
        vc, vs = quantize_int8(v)
        cache.k[page, :, off] = kc
        cache.v[page, :, :, off] = vc  # transposed pages: [page, H, D, slot]
        cache.k_scale[page, :, off] = ks
        cache.v_scale[page, :, off] = vs
    else:
        cache.k[page, :, off] = k.to(cache.k.dtype)
        cache.v[page, :, off] = v.to(cache.v.dtype)


def gather_kv(cache, pages: torch.Tensor, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Gather one sequence's cached K/V as float32 [seq_len, kv_heads, head_dim] each."""
    page_size = cache.k.shape[2]
    n_pages = -(-seq_len // page_size)
    idx = pages[:n_pages].long()
    if cache.k.dtype == torch.int8:
        k = dequantize_int8(cache.k[idx], cache.k_scale[idx])
        v = dequantize_int8(cache.v[idx].transpose(2, 3), cache.v_scale[idx])  # [., H, P, D]
    else:
        k, v = cache.k[idx].float(), cache.v[idx].float()
    # [pages, H, P, D] -> [pages * P, H, D]
    k = k.permute(0, 2, 1, 3).reshape(-1, k.shape[1], k.shape[3])[:seq_len]
    v = v.permute(0, 2, 1, 3).reshape(-1, v.shape[1], v.shape[3])[:seq_len]
    return k, v


def dense_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                           sm_scale: float | None = None, q_offset: int = 0) -> torch.Tensor:
    """Causal softmax attention with GQA, computed in float32.

    Args:
        q: [n, Hq, D]; k, v: [S, Hkv, D] with Hq a multiple of Hkv.
        sm_scale: logit scale, default 1/sqrt(D).
        q_offset: position of query 0 (query t attends to keys 0 .. q_offset + t).

    Returns:
        [n, Hq, D] float32.
    """
    n, hq, d = q.shape
    s, hkv, _ = k.shape
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(d)
    group = hq // hkv
    kf = k.float().repeat_interleave(group, dim=1)  # [S, Hq, D]
    vf = v.float().repeat_interleave(group, dim=1)
    scores = torch.einsum("nhd,shd->hns", q.float(), kf) * sm_scale
    qpos = q_offset + torch.arange(n, device=q.device)[:, None]
    kpos = torch.arange(s, device=q.device)[None, :]
    scores = scores.masked_fill((kpos > qpos)[None], float("-inf"))
    p = torch.softmax(scores, dim=-1)
    return torch.einsum("hns,shd->nhd", p, vf)


def paged_attention(q: torch.Tensor, cache, meta, sm_scale: float | None = None) -> torch.Tensor:
    """Causal attention of the step's queries to everything cached, through the page table.

    The step's own K/V must already be stored (``store_kv``). A sequence with ``seq_lens`` 0 (a
    padding row) gives exact zeros. Reference for the prefill and decode kernels.

    Args:
        q: [T, Hq, D] queries of the step's new tokens (after q-norm and RoPE).
        cache: the layer's ``LayerCache`` (BF16/FP16/FP32 or INT8 + scales).
        meta: ``AttnMeta`` (``seq_lens``, ``query_start_loc``, ``page_table``).
        sm_scale: logit scale, default 1/sqrt(D).

    Returns:
        [T, Hq, D] in q's dtype.
    """
    out = torch.empty_like(q)
    seq_lens = meta.seq_lens.tolist()
    qsl = meta.query_start_loc.tolist()
    for b, seq_len in enumerate(seq_lens):
        lo, hi = qsl[b], qsl[b + 1]
        if hi == lo:
            continue
        if seq_len == 0:  # a padding row: exact zeros
            out[lo:hi] = 0
            continue
        k, v = gather_kv(cache, meta.page_table[b], seq_len)
        out[lo:hi] = dense_causal_attention(q[lo:hi], k, v, sm_scale,
                                            q_offset=seq_len - (hi - lo)).to(q.dtype)
    return out


def merge_partials(o_part: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """Merge split-KV partial results (reference for ``kernels/combine.py``).

    Args:
        o_part: float32 [..., S, D], each split's output normalized within the split.
        lse: float32 [..., S], each split's log-sum-exp of scores (natural log); -inf for an
            empty split.

    Returns:
        float32 [..., D]; a row whose splits are all empty gives exact zeros.
    """
    m = lse.amax(dim=-1, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    w = torch.exp(lse - m)  # empty splits -> 0
    denom = w.sum(dim=-1, keepdim=True)
    w = torch.where(denom > 0, w / denom.clamp(min=1e-30), torch.zeros_like(w))
    o = torch.where(w.unsqueeze(-1) > 0, o_part, torch.zeros_like(o_part))
    return (w.unsqueeze(-1) * o).sum(dim=-2)


def split_partials(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, num_queries: int,
                   num_splits: int, block_n: int, sm_scale: float | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence's split-KV stage-1 partials (reference for ``kernels/decode_attention.py``).

    Split ``s`` takes key blocks ``[s * nb // S, (s + 1) * nb // S)`` of the ``nb = cdiv(seq_len,
    block_n)`` blocks of ``block_n`` positions; query ``t`` sits at ``seq_len - n + t``.

    Args:
        q: [n, Hq, D] the sequence's queries; k, v: float32 [seq_len, Hkv, D] (``gather_kv``).
        num_queries: n; num_splits: S; block_n: keys per block.

    Returns:
        ``(o_part, lse)``: float32 [Hkv, S, n * group, D] and [Hkv, S, n * group], tile row
        ``t * group + g`` for query head ``h * group + g``: each split's output normalized within
        the split and its natural log-sum-exp; a split with no visible key (empty, or every key
        after the row's query) gives ``lse = -inf`` and a zero ``o_part``.
    """
    seq_len, hkv, d = k.shape
    n, hq = num_queries, q.shape[1]
    group = hq // hkv
    scale = sm_scale if sm_scale is not None else d ** -0.5
    nb = -(-seq_len // block_n)
    o_part = torch.zeros(hkv, num_splits, n * group, d, dtype=torch.float64)
    lse = torch.full((hkv, num_splits, n * group), -math.inf, dtype=torch.float64)
    qd = q.double().view(n, hkv, group, d)
    for s in range(num_splits):
        lo = min(seq_len, (s * nb // num_splits) * block_n)
        hi = min(seq_len, ((s + 1) * nb // num_splits) * block_n)
        for t in range(n):
            end = min(hi, seq_len - n + t + 1)  # keys this query may see
            if end <= lo:
                continue
            ks, vs = k[lo:end].double(), v[lo:end].double()  # [m, Hkv, D]
            sc = torch.einsum("hgd,mhd->hgm", qd[t], ks) * scale
            rows = slice(t * group, (t + 1) * group)
            lse[:, s, rows] = torch.logsumexp(sc, dim=-1)
            o_part[:, s, rows] = torch.einsum("hgm,mhd->hgd", torch.softmax(sc, dim=-1), vs)
    return o_part.float(), lse.float()


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float,
             residual: torch.Tensor | None = None):
    """RMSNorm over the last dim as transformers' Qwen3 (reference for ``kernels/rmsnorm.py``).

    Args:
        x: [..., H] float; weight: [H] same dtype; residual: None or like x.

    Returns:
        ``weight * (x * rsqrt(mean(x^2) + eps))`` computed in float32, cast to x's dtype before
        the weight multiply; with ``residual``: ``(that of x + residual, x + residual)``.
    """
    if residual is not None:
        x = x + residual
    xf = x.float()
    out = weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return out if residual is None else (out, x)


def qk_norm_rope(q: torch.Tensor, k: torch.Tensor, q_weight: torch.Tensor,
                 k_weight: torch.Tensor, eps: float, positions: torch.Tensor,
                 inv_freq: torch.Tensor, attention_factor: float = 1.0):
    """Per-head RMSNorm then rotate-half RoPE (reference for ``kernels/qk_norm_rope.py``).

    q: [T, Hq, D], k: [T, Hkv, D]; positions int64 [T]; inv_freq float32 [D/2]. cos/sin are built
    as in ``models/rope.py`` (float32, times ``attention_factor``, cast to q's dtype).
    Returns (q_out, k_out) shaped like q and k.
    """
    freqs = positions.float()[:, None] * inv_freq.to(positions.device)  # (T, D/2)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = (emb.cos() * attention_factor).to(q.dtype)[:, None]  # (T, 1, D)
    sin = (emb.sin() * attention_factor).to(q.dtype)[:, None]

    def one(x, w):
        x = rms_norm(x, w, eps)
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    return one(q, q_weight), one(k, k_weight)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """SwiGLU's gate (Shazeer 2020): ``silu(gate) * up`` for ``gate_up = [gate | up]`` [T, 2I]
    (reference for ``kernels/silu_mul.py``; the model's torch path). Returns [T, I] in the input
    dtype; each op rounds to it, as transformers' Qwen3 MLP does."""
    gate, up = gate_up.split(gate_up.shape[-1] // 2, dim=-1)
    return torch.nn.functional.silu(gate) * up


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``x @ weight.T`` (``F.linear`` without bias) accumulated in float64 and rounded once to
    x's dtype (reference for ``kernels/gemv.py``). x: [M, K]; weight: [N, K] -> [M, N]."""
    return (x.double() @ weight.double().T).to(x.dtype)


def linear_rstd(stream: torch.Tensor, norm_weight: torch.Tensor, eps: float,
                weight: torch.Tensor) -> torch.Tensor:
    """``rms_norm(stream) @ weight.T`` with the norm's per-row scale applied after the dot, as
    ``kernels/gemv_norm.py`` computes it (its reference): ``round(norm_weight * stream)`` is the
    operand, the sum runs in float64, and ``rsqrt(mean(stream^2) + eps)`` (float32) multiplies
    it before the one rounding. stream: [M, K]; norm_weight: [K]; weight: [N, K] -> [M, N]."""
    sf = stream.float()
    rstd = torch.rsqrt(sf.pow(2).mean(-1, keepdim=True) + eps)
    scaled = (norm_weight * stream).double()
    return ((scaled @ weight.double().T) * rstd.double()).to(stream.dtype)
