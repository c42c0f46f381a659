"""Top-k sampling in two kernels: top-k, temperature, softmax, top-p, min-p and the draw.

``infer.sampling.sample`` with top-k on (Qwen3's ``generation_config``: temperature 0.6, top-k
20, top-p 0.95) runs about 54 small torch launches a step on the [N, V] logits (``torch.topk``'s
radix select alone is a dozen), about 100 us on an H100: 8 % of a 0.6B step. Here the logits are
read once, in their own dtype, and the rest works on candidates:

- Stage 1, grid ``(N, P)`` with ``P = cdiv(V, BLOCK)``: program ``(r, p)`` takes columns
  ``[p * BLOCK, (p + 1) * BLOCK)`` of row ``r`` and writes its k best as int64 keys into a
  workspace ``[N, P * k]``. A key packs the float32 value (its bits mapped to an order-preserving
  int32, -0 read as +0) above ``2**31 - 1 - column``, so one int64 max is the largest value and,
  among equal values, the smallest column (``torch.argmax``'s tie rule); k such maxima, each
  taking its element out, give the k best. Ids ``>= vocab_limit`` enter as -inf (as in the torch
  path's mask); a NaN or a +inf among the allowed ids makes the block write ``BAD_KEY``, which
  decodes to NaN: the row's ``NON_FINITE``.
- Stage 2, one program per row: the k best of the row's ``P * k`` keys the same way, in descending
  order, then what ``infer.sampling_filters.topk_probs`` and ``infer.sampling._race`` do on them:
  divide by the temperature, softmax, drop a candidate when the mass before it reaches ``top_p``,
  drop one below ``min_p`` times the best, and pick ``argmax(p / q)`` with the caller's Exp(1) noise
  ``q`` ``[N, k]`` (the exponential race: gpt-fast's ``multinomial_sample_one_no_sync``). With the
  noise the torch path draws from the same generator state, the token is the torch path's; only
  float rounding (the softmax's sum, the cumulative sum, the temperature) can tell them apart at a
  near-tie. ``topk_verify`` runs speculative decoding's verify rule in the same stage 2
  (``infer.sampling.verify_sample``: accept the draft with probability p(d), else race on p without
  it).
- Keyed noise: instead of the noise, the caller may pass one int64 key per row; stage 2 then
  draws ``q = -log(1 - U)`` itself, ``U`` from Triton's counter-based Philox (``tl.rand``) seeded
  with the key at counters ``0..k-1`` (the verify rule's ``u`` at counter ``MAX_TOP_K``;
  ``kernels/keyed_noise.py`` gives the same values). A CUDA graph of the draw then needs no
  torch generator: the decode runner writes the keys with each step's inputs
  (``infer.noise_keys.row_keys``), as vLLM's sampler seeds per request.

BLOCK is 2048 on a GPU (75 programs of 4 warps a row for Qwen3's 151936 columns, 1500 keys for
stage 2; ``benchmarks/sampling.py`` measured it against 1024 and 4096) and small under
the interpreter, so the CPU tests cross many blocks. ``MAX_TOP_K`` bounds k: stage 1 costs k block
reductions and stage 2 k reductions over ``P * k`` keys; a larger k stays on the torch path.
No host sync and allocation only: safe under CUDA graph capture.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels import device
from kernels.checks import check_last_dim_contiguous
from kernels.greedy import NON_FINITE

MAX_TOP_K = 64  # the largest k these kernels take (common choices: 20 Qwen3, 40, 50)
U_COUNTER = tl.constexpr(MAX_TOP_K)  # keyed verify: the Philox counter of u (noise: 0..k-1)
GPU_BLOCK = 2048  # columns per stage-1 program on a GPU
STAGE2_WARPS = None  # stage 2's warps; None: up to 8, one per 512 keys (benchmarks/sampling.py)
INTERPRETER_BLOCK = 128  # ... under the Triton interpreter (CPU tests)
TAKEN = tl.constexpr(-(2**63))  # a key already picked, or no column: below every real key
BAD_KEY = tl.constexpr(2**63 - 1)  # a block with a NaN or +inf among its allowed ids: NaN
_TINY = float(torch.finfo(torch.float32).tiny)


@triton.jit
def _key(x, cols):
    """int64 keys of float32 values ``x`` (no NaN) at columns ``cols`` (int32 in [0, 2**31)):
    ordered by value, then by the smaller column (the low 31 bits hold ``2**31 - 1 - col``)."""
    x = tl.where(x == 0.0, 0.0, x)  # -0 == +0: one key, the column decides
    bits = x.to(tl.int32, bitcast=True)
    ordered = tl.where(bits >= 0, bits, bits ^ 0x7FFFFFFF)
    return (ordered.to(tl.int64) << 32) + (2147483647 - cols).to(tl.int64)


@triton.jit
def _unkey(key):
    """(float32 value, int32 column) of ``_key``'s keys; ``BAD_KEY`` gives NaN."""
    ordered = (key >> 32).to(tl.int32)
    bits = tl.where(ordered >= 0, ordered, ordered ^ 0x7FFFFFFF)
    col = 2147483647 - (key & 2147483647).to(tl.int32)
    return bits.to(tl.float32, bitcast=True), col


@triton.jit
def _topk_partial_kernel(
    logits_ptr,  # [N, V] float16/bfloat16/float32, last dim contiguous
    keys_ptr,  # [N, P * k] int64 out: each block's k best keys (TAKEN past its columns)
    stride_row,  # logits' row stride (elements)
    num_cols,  # V
    vocab_limit,  # columns >= this enter as -inf
    top_k,  # k
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    blk = tl.program_id(1)
    cols = blk * BLOCK + tl.arange(0, BLOCK)
    inside = cols < num_cols
    raw = tl.load(logits_ptr + row * tl.cast(stride_row, tl.int64) + cols, mask=inside,
                  other=float("-inf")).to(tl.float32)
    allowed = cols < vocab_limit
    bad = tl.max((allowed & ((raw != raw) | (raw == float("inf")))).to(tl.int32), axis=0) > 0
    x = tl.where(allowed & (raw == raw), raw, float("-inf"))
    keys = tl.where(inside, _key(x, cols), TAKEN)
    out = keys_ptr + (row * tl.num_programs(1) + blk) * top_k
    for j in range(top_k):
        best = tl.max(keys, axis=0)
        keys = tl.where(keys == best, TAKEN, keys)  # keys are unique (the column is in them)
        tl.store(out + j, tl.where(bad & (j == 0), BAD_KEY, best))


@triton.jit
def _topk_sample_kernel(
    keys_ptr,  # [N, C] int64, from stage 1 (C = P * k)
    noise_ptr,  # [N, k] float32 Exp(1) draws, contiguous; KEYED: int64 [N] per-row keys
    tok_ptr,  # [N] int64 out: the drawn id, or NON_FINITE
    probs_ptr,  # [N, k] float32 out: the filtered probabilities, descending (0 = dropped)
    ids_ptr,  # [N, k] int64 out: their ids
    drafts_ptr,  # VERIFY: [N] int64 draft ids (outside [0, V): none)
    u_ptr,  # VERIFY: [N] float32 U(0, 1) draws
    ok_ptr,  # VERIFY: [N] int64 out: 1 where the draft is accepted
    num_keys,  # C
    num_cols,  # V
    top_k,  # k
    temperature,  # > 0
    top_p,  # in (0, 1]; 1 keeps all
    min_p,  # in [0, 1]
    BLOCK_C: tl.constexpr,  # power of two >= C
    BLOCK_K: tl.constexpr,  # power of two >= k
    TINY: tl.constexpr,
    NON_FINITE_ID: tl.constexpr,
    VERIFY: tl.constexpr,  # speculative decoding's verify rule (``topk_verify``)
    KEYED: tl.constexpr = False,  # the noise (and u) drawn here from the row's key (Philox)
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_C)
    keys = tl.load(keys_ptr + row * num_keys + offs, mask=offs < num_keys, other=TAKEN)
    slots = tl.arange(0, BLOCK_K)
    best_keys = tl.full([BLOCK_K], TAKEN, tl.int64)
    for j in range(top_k):
        best = tl.max(keys, axis=0)
        keys = tl.where(keys == best, TAKEN, keys)
        best_keys = tl.where(slots == j, best, best_keys)
    vals, ids = _unkey(best_keys)
    used = slots < top_k
    top = tl.max(tl.where(slots == 0, vals, float("-inf")), axis=0)  # slot 0: the row's max
    finite = (top > float("-inf")) & (top < float("inf"))  # NaN (BAD_KEY) fails both
    v = tl.where(used, vals / temperature, float("-inf"))
    e = tl.where(used, tl.exp(v - tl.max(v, axis=0)), 0.0)
    probs = e / tl.sum(e, axis=0)
    if top_p < 1.0:
        before = tl.cumsum(probs, axis=0) - probs  # sorted already: the mass ahead of each
        probs = tl.where(before >= top_p, 0.0, probs)
    first = tl.max(tl.where(slots == 0, probs, 0.0), axis=0)
    probs = tl.where(probs < min_p * first, 0.0, probs)
    if KEYED:  # Exp(1) = -log(1 - U), U in [0, 1) from Philox keyed by the row's key
        row_key = tl.load(noise_ptr + row)
        q = tl.where(used, -tl.log(1.0 - tl.rand(row_key, slots)), 1.0)
    else:
        q = tl.load(noise_ptr + row * top_k + slots, mask=used, other=1.0)
    if VERIFY:  # accept the draft d with probability p(d), else draw from p without d
        d = tl.load(drafts_ptr + row)
        is_d = used & (ids.to(tl.int64) == d) & (d >= 0) & (d < num_cols)
        p_d = tl.sum(tl.where(is_d, probs, 0.0), axis=0)
        total = tl.sum(probs, axis=0)  # the filters leave it below 1: p(d) is p_d / total
        residual = tl.where(is_d, 0.0, probs)
        if KEYED:  # counter MAX_TOP_K of the row's stream: past every noise counter
            u = tl.sum(tl.where(slots == 0, tl.rand(row_key, slots + U_COUNTER), 0.0), axis=0)
        else:
            u = tl.load(u_ptr + row)
        # NOTE: a residual without mass means p(d) = 1 up to rounding: accept d
        ok = (d >= 0) & (d < num_cols) & ((u * total < p_d) | (tl.sum(residual, axis=0) <= 0))
        score = tl.where(used, residual / tl.maximum(q, TINY), -1.0)
    else:
        score = tl.where(used, probs / tl.maximum(q, TINY), -1.0)
    pick = tl.min(tl.where(score == tl.max(score, axis=0), slots, BLOCK_K), axis=0)
    tok = tl.max(tl.where(slots == pick, ids, 0), axis=0).to(tl.int64)
    if VERIFY:
        tok = tl.where(ok, d, tok)
        tl.store(ok_ptr + row, (ok & finite).to(tl.int64))
    tl.store(tok_ptr + row, tl.where(finite, tok, NON_FINITE_ID).to(tl.int64))
    tl.store(probs_ptr + row * top_k + slots, probs, mask=used)
    tl.store(ids_ptr + row * top_k + slots, ids.to(tl.int64), mask=used)


def topk_sample(logits: torch.Tensor, noise: torch.Tensor, top_k: int, temperature: float,
                top_p: float = 1.0, min_p: float = 0.0, vocab_limit: int | None = None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One draw per row from the top-k filtered distribution (module notes).

    Args:
        logits: [N, V] float16/bfloat16/float32 (N >= 0), last dim contiguous. Not modified.
        noise: float32 [N, top_k] contiguous Exp(1) draws on the logits' device (clamped to the
            smallest normal float here, as ``infer.sampling._race`` does); or int64 [N] keys,
            one per row: the kernel then draws the noise itself, ``-log(1 - U)`` with ``U`` of
            Triton's Philox (``tl.rand``) seeded with the row's key at counters ``0..top_k-1``
            (``kernels.keyed_noise.keyed_noise`` gives the same values), so a CUDA graph needs
            no generator.
        top_k: 1..min(``MAX_TOP_K``, V - 1) (a k of V or more is no top-k: the torch path).
        temperature: > 0; divides the float32 logits.
        top_p: in (0, 1]; a candidate is dropped when the mass before it reaches ``top_p``.
        min_p: in [0, 1]; a candidate below ``min_p`` times the best's probability is dropped.
        vocab_limit: ids >= this enter as -inf (the model's padded ids); 1..V. None: all ids.

    Returns:
        ``(tokens, probs, ids)``: int64 [N] the drawn ids (``NON_FINITE`` (-1) for a row whose
        max over the allowed ids is NaN or +-inf); float32 [N, top_k] the filtered
        probabilities in descending order (normalized before top-p and min-p, 0 = dropped;
        unspecified in a ``NON_FINITE`` row); int64 [N, top_k] their ids.
        ``infer.sampling_filters.topk_probs`` gives the same probabilities and ids (up to
        rounding, and up to which of several ids tied at the k-th value is kept: here the
        smallest).
        Allocation only, no host sync: safe under graph capture.

    Raises:
        ValueError: a shape, dtype, device or range above not met.
    """
    return _launch(logits, noise, top_k, temperature, top_p, min_p, vocab_limit)


def topk_verify(logits: torch.Tensor, drafts: torch.Tensor, u: torch.Tensor, noise: torch.Tensor,
                top_k: int, temperature: float, top_p: float = 1.0, min_p: float = 0.0,
                vocab_limit: int | None = None) -> torch.Tensor:
    """Speculative decoding's verify rule on the top-k filtered distribution ``p`` of each row:
    ``infer.sampling.verify_sample``'s sampling branch (a deterministic draft d is accepted iff
    ``u < p(d)``; otherwise the token is drawn from ``p`` with d removed, by the race).

    Args:
        logits, noise, top_k, temperature, top_p, min_p, vocab_limit: as ``topk_sample``
            (``noise`` is the residual race's).
        drafts: int64 [N] on the logits' device: the draft per row; ids outside [0, V): none.
        u: float32 [N] U(0, 1) draws on the logits' device; None with keys for ``noise`` (then
            ``U`` at the row key's counter ``MAX_TOP_K``).

    Returns:
        int64 [2, N]: row 0 the token (``NON_FINITE`` where the max logit is not finite), row 1
        1 where the draft is accepted (0 where not finite).

    Raises:
        ValueError: as ``topk_sample``, or ``drafts`` / ``u`` not [N] int64 / float32 there.
    """
    out = None
    if logits.dim() == 2:  # else _launch raises
        rows = logits.shape[0]
        if u is None and noise.dtype == torch.int64:
            u = torch.empty(rows, dtype=torch.float32, device=logits.device)  # unread
        for name, t, dtype in (("drafts", drafts, torch.int64), ("u", u, torch.float32)):
            if t is None or t.shape != (rows,) or t.dtype != dtype or t.device != logits.device:
                got = "None" if t is None else f"{t.dtype} {tuple(t.shape)} on {t.device}"
                raise ValueError(f"topk_verify: {name} must be {dtype} [{rows}] on "
                                 f"{logits.device}, got {got}")
        out = torch.empty((2, rows), dtype=torch.int64, device=logits.device)
    _launch(logits, noise, top_k, temperature, top_p, min_p, vocab_limit,
            verify=(drafts.contiguous(), u.contiguous(), out), name="topk_verify")
    return out


def _launch(logits, noise, top_k, temperature, top_p, min_p, vocab_limit, verify=None,
            name="topk_sample"):
    """Check the arguments (``topk_sample``'s Raises, the messages led by ``name``), launch both
    stages; ``verify``: ``(drafts, u, out [2, N])`` for the verify rule, the token into
    ``out[0]``."""
    if logits.dim() != 2 or logits.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        raise ValueError(f"{name}: logits must be [N, V] float16/bfloat16/float32, got "
                         f"{tuple(logits.shape)} {logits.dtype}")
    check_last_dim_contiguous("topk_sample", logits=logits)
    rows, vocab = logits.shape
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= min(
            MAX_TOP_K, vocab - 1):
        raise ValueError(f"{name}: top_k must be an int in 1..{min(MAX_TOP_K, vocab - 1)} "
                         f"(MAX_TOP_K and V - 1), got {top_k!r}")
    keyed = noise.dtype == torch.int64
    if (noise.shape != ((rows,) if keyed else (rows, top_k))
            or noise.dtype not in (torch.float32, torch.int64)
            or noise.device != logits.device or not noise.is_contiguous()):
        raise ValueError(f"{name}: noise must be contiguous float32 {(rows, top_k)} (draws) or "
                         f"int64 ({rows},) (keys) on {logits.device}, got "
                         f"{tuple(noise.shape)} {noise.dtype} on {noise.device}")
    if not (temperature > 0 and 0 < top_p <= 1 and 0 <= min_p <= 1):
        raise ValueError(f"{name}: needs temperature > 0, top_p in (0, 1], min_p in "
                         f"[0, 1]; got {temperature}, {top_p}, {min_p}")
    limit = vocab if vocab_limit is None else vocab_limit
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= vocab:
        raise ValueError(f"{name}: vocab_limit must be an int in 1..{vocab}, got "
                         f"{vocab_limit!r}")
    dev = logits.device
    tok = torch.empty(rows, dtype=torch.int64, device=dev) if verify is None else verify[2][0]
    probs = torch.empty((rows, top_k), dtype=torch.float32, device=dev)
    ids = torch.empty((rows, top_k), dtype=torch.int64, device=dev)
    if rows == 0:
        return tok, probs, ids
    block = INTERPRETER_BLOCK if device.capability(dev) is None else GPU_BLOCK
    parts = triton.cdiv(vocab, block)
    keys = torch.empty((rows, parts * top_k), dtype=torch.int64, device=dev)
    _topk_partial_kernel[(rows, parts)](
        logits_ptr=logits, keys_ptr=keys, stride_row=logits.stride(0), num_cols=vocab,
        vocab_limit=limit, top_k=top_k, BLOCK=block, num_warps=4)
    drafts, u, ok = (tok, noise, tok) if verify is None else (verify[0], verify[1], verify[2][1])
    block_c = triton.next_power_of_2(parts * top_k)
    _topk_sample_kernel[(rows,)](
        keys_ptr=keys, noise_ptr=noise, tok_ptr=tok, probs_ptr=probs, ids_ptr=ids,
        drafts_ptr=drafts, u_ptr=u, ok_ptr=ok, num_keys=parts * top_k, num_cols=vocab,
        top_k=top_k, temperature=float(temperature), top_p=float(top_p), min_p=float(min_p),
        BLOCK_C=block_c, BLOCK_K=max(16, triton.next_power_of_2(top_k)), TINY=_TINY,
        NON_FINITE_ID=NON_FINITE, VERIFY=verify is not None, KEYED=keyed,
        num_warps=STAGE2_WARPS or max(1, min(8, block_c // 512)))
    return tok, probs, ids
