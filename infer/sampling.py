"""Next-token sampling on device, without a host sync.

Order (as in HF transformers' logits processors): mask padded vocabulary ids, presence penalty,
then greedy argmax at temperature 0; otherwise temperature, top-k, softmax, top-p, min-p, and a draw
by the exponential-race trick: with ``q ~ Exp(1)`` i.i.d., ``argmax(p / q)`` is a sample from
``p`` (gpt-fast's ``multinomial_sample_one_no_sync``). With top-k on, the filters and the draw run
on the k candidates of ``torch.topk`` instead of the whole vocabulary (the filters:
``infer/sampling_filters.py``). Every
operation has a shape fixed by the vocabulary or by top_k and branches only on host values of
``SamplingParams``, so it can live in a CUDA graph.

A row whose logits are not all usable (a NaN, a +inf, or every allowed id at -inf: its max logit
is not finite) yields ``NON_FINITE`` (-1) instead of a token, chosen with ``torch.where`` so the
other rows and the graph are untouched; the caller must check for it on the host. NOTE: -1 is
not a token id: a step must not feed it to the embedding (a device-side index error).

Greedy without a presence penalty on CUDA takes ``kernels.greedy.greedy_tokens`` instead (with
``FUSED_GREEDY``): two Triton kernels that read the logits once and give the same tokens,
``NON_FINITE`` included, as the torch ops. Sampling with top-k (1..``MAX_TOP_K``) and no presence
penalty on CUDA takes ``kernels.topk_sample`` (with ``FUSED_TOPK``; ``verify_sample`` too): the
same noise from the same generator (or, given per-row keys, noise the kernel draws itself:
``infer/noise_keys.py``), two kernels for the rest, the torch path's token up to float
rounding at a near-tie and up to which of several logits tied at the k-th value is kept
(``torch.topk`` keeps any; the kernels the smallest ids). The torch ops stay the path everywhere
else.

``verify_sample`` is the verify step of speculative decoding (``infer/speculate.py``): per row a
token and whether the row's draft token is accepted, by the rule for a deterministic draft
(Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding"; Chen et al.
2023, "Accelerating LLM Decoding with Speculative Sampling", with the draft distribution a point
mass): accept the draft d with probability p(d), else draw from p with d removed. The emitted
token is then distributed exactly as p.
"""

from __future__ import annotations

import torch

from infer.sampling_filters import full_probs, topk_probs
from infer.sampling_params import SamplingParams, draw_seed
from kernels.greedy import NON_FINITE, greedy_tokens  # NON_FINITE: re-exported, its home is there
from kernels.topk_sample import MAX_TOP_K, topk_sample, topk_verify

_TINY = torch.finfo(torch.float32).tiny
# Greedy (no presence penalty) on CUDA through kernels/greedy.py: 2 launches instead of ~8 torch
# ops on the [N, V] logits (~22 us a step on an H100), the same tokens. Off: the torch ops.
FUSED_GREEDY = True
# Top-k sampling (no presence penalty) on CUDA through kernels/topk_sample.py: 2 kernels (and
# the noise's launch, unless keyed) instead of ~54 torch ops (~100 us a step on an H100). Off:
# the torch ops.
FUSED_TOPK = True


def resolve_seed(seed: int | None) -> int:
    """``seed``, or a fresh random seed (``infer.sampling_params.draw_seed``) if None."""
    return seed if seed is not None else draw_seed()


def make_generator(seed: int | None, device: torch.device | str) -> torch.Generator:
    """A ``torch.Generator`` on ``device`` seeded with ``seed`` (a fresh random seed if None).

    torch's CPU generator (a Mersenne twister) keeps only a seed's low 32 bits, so seeds that
    differ above them would give the same draws there; on the CPU the high 32 bits are folded in
    first (``lo ^ (hi * 0x9E3779B1 mod 2**32)``: seeds below 2**32 unchanged, and seeds with the
    same low bits and different high bits kept apart). CUDA's Philox takes all 64 bits.
    """
    return seed_generator(torch.Generator(device=device), seed)


def seed_generator(g: torch.Generator, seed: int | None) -> torch.Generator:
    """``g`` seeded with ``seed`` (a fresh random seed if None), the high 32 bits folded in on
    the CPU (``make_generator``); returns ``g``."""
    s = resolve_seed(seed)
    if g.device.type == "cpu":
        s = (s & 0xFFFFFFFF) ^ (((s >> 32) * 0x9E3779B1) & 0xFFFFFFFF)
    g.manual_seed(s)
    return g


def _no_keys(noise_keys: torch.Tensor | None) -> None:
    """Raise ``ValueError`` for keys given to a draw that does not take the kernels: it would
    draw from a generator instead, and a seeded reply would silently stop repeating."""
    if noise_keys is not None:
        raise ValueError("noise_keys were given, but this draw takes the torch path (see "
                         "infer.noise_keys.uses_keys): pass the generator instead")


def sample(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None,
           *, presence: torch.Tensor | None = None, vocab_limit: int | None = None,
           noise_keys: torch.Tensor | None = None) -> torch.Tensor:
    """Pick one token per row.

    Args:
        logits: float [N, V] (any float dtype; computed in float32). Not modified.
        params: the sampling parameters (host values).
        generator: source of the Exp(1) noise (``make_generator``); None uses torch's default.
            Unused when greedy.
        presence: bool [V] or [N, V], True for ids already generated; their logits drop by
            ``params.presence_penalty``. None: no penalty.
        vocab_limit: ids >= this are never picked (the model pads its vocabulary; 151669 for
            Qwen3). None: all ids allowed.
        noise_keys: int64 [>= N] per-row keys on the logits' device
            (``infer.noise_keys.row_keys``): a draw through ``kernels.topk_sample`` takes its
            noise from them instead of ``generator`` (the same distribution, other draws).
            None: ``generator``. Raises ``ValueError`` when given to a torch-path draw.

    Returns:
        int64 [N] token ids, on the logits' device; ``NON_FINITE`` (-1) for a row whose max
        logit (after the ``vocab_limit`` mask) is not finite. Greedy without a penalty on CUDA:
        ``kernels.greedy.greedy_tokens`` (module notes), the same tokens; top-k sampling
        without a penalty on CUDA: ``kernels.topk_sample`` with the same noise.
    """
    if _use_fused_greedy(logits, params, presence):
        return _greedy_tokens(logits, vocab_limit)
    if _use_fused_topk(logits, params, presence):
        noise = (_noise(logits, params, generator) if noise_keys is None
                 else noise_keys[:logits.shape[0]])
        return topk_sample(logits, noise, params.top_k, params.temperature, params.top_p,
                           params.min_p, _limit(logits, vocab_limit))[0]
    _no_keys(noise_keys)
    x = _masked(logits, vocab_limit)
    finite = torch.isfinite(x.amax(dim=-1))  # [N]; NaN propagates through amax
    if presence is not None and params.presence_penalty:
        x = x - params.presence_penalty * presence.to(x.dtype)
    if params.greedy:
        tok = x.argmax(dim=-1)
    else:
        x = x / params.temperature
        if 0 < params.top_k < x.shape[-1]:
            probs, idx = topk_probs(x, params)
            tok = idx.gather(-1, _race(probs, generator)[:, None]).squeeze(-1)
        else:
            tok = _race(full_probs(x, params), generator)
    return torch.where(finite, tok, NON_FINITE)


def verify_sample(logits: torch.Tensor, drafts: torch.Tensor, params: SamplingParams,
                  generator: torch.Generator | None = None, *, vocab_limit: int | None = None,
                  noise_keys: torch.Tensor | None = None) -> torch.Tensor:
    """Per row, the token to emit and whether the row's draft token is accepted (no host sync).

    Greedy: the token is the argmax and the draft is accepted iff it equals the argmax. Sampling:
    ``p`` is ``sample``'s filtered distribution (temperature, top-k, top-p, min-p, in that order;
    no presence penalty); with ``u ~ U(0, 1)`` per row, the draft ``d`` is accepted iff
    ``d >= 0`` and ``u < p(d)``, and the token is then ``d``; otherwise (or with no draft) the
    token is drawn from ``p`` with ``d``'s entry removed (``p`` itself for a row without a draft)
    by the exponential race. So the token is distributed as ``p`` whatever the draft (lossless:
    ``P(t) = p(d) [t = d] + (1 - p(d)) p(t) [t != d] / (1 - p(d)) = p(t)``), and a draft is
    accepted with probability ``p(d)``. The noise is drawn in a fixed order: ``u``
    ([R]), then the race's Exp(1) noise (as many values as ``sample`` draws).

    Args:
        logits: float [R, V]: the target's logits after each verify row. Not modified.
        drafts: int64 [R] on the logits' device: the draft token at each row's next position, -1
            for none (the bonus row, padding rows); ids outside [0, V) count as no draft.
        params: the sampling parameters (host values). A presence penalty is not applied:
            speculative decoding is off with one (the penalty would change between draft rows).
        generator: source of the noise (``make_generator``); unused when greedy.
        noise_keys: as ``sample``'s (then ``u`` is drawn from them too).
        vocab_limit: ids >= this are never picked (as in ``sample``).

    Returns:
        int64 [2, R]: row 0 the token per row (``NON_FINITE`` where the max logit is not
        finite), row 1 the acceptance flag (1/0; 0 where not finite).

    Raises:
        ValueError: ``params`` has a presence penalty.
    """
    if params.presence_penalty:
        raise ValueError("speculative decoding does not apply a presence penalty: turn one of "
                         "them off")
    if _use_fused_greedy(logits, params, None):
        tok = _greedy_tokens(logits, vocab_limit)  # [R], NON_FINITE where not finite
        return torch.stack([tok, ((tok >= 0) & (tok == drafts)).long()])
    if _use_fused_topk(logits, params, None):  # the same u and race noise as below
        if noise_keys is not None:  # or both from the rows' keys
            u, noise = None, noise_keys[:logits.shape[0]]
        else:
            u = torch.rand(logits.shape[0], device=logits.device, generator=generator)
            noise = _noise(logits, params, generator)
        return topk_verify(logits, drafts, u, noise, params.top_k, params.temperature,
                           params.top_p, params.min_p, _limit(logits, vocab_limit))
    _no_keys(noise_keys)
    x = _masked(logits, vocab_limit)
    vocab = x.shape[-1]
    finite = torch.isfinite(x.amax(dim=-1))  # [R]
    has = (drafts >= 0) & (drafts < vocab)  # [R]
    d = drafts.clamp(0, vocab - 1)[:, None]  # [R, 1] a valid index for every row
    if params.greedy:
        tok = x.argmax(dim=-1)
        ok = has & (tok == drafts)
    else:
        x = x / params.temperature
        u = torch.rand(x.shape[0], device=x.device, generator=generator)  # [R]
        if 0 < params.top_k < vocab:
            probs, idx = topk_probs(x, params)  # [R, k]
            is_d = (idx == d) & has[:, None]
        else:
            probs, idx = full_probs(x, params), None  # [R, V]
            is_d = torch.zeros_like(probs, dtype=torch.bool).scatter_(-1, d, has[:, None])
        p_d = (probs * is_d).sum(-1)  # [R] unnormalized, like probs
        residual = probs.masked_fill(is_d, 0.0)
        # NOTE: a residual without mass means p(d) = 1 up to rounding: accept d.
        ok = has & ((u * probs.sum(-1) < p_d) | (residual.sum(-1) <= 0))  # u < p(d), normalized
        pick = _race(residual, generator)
        drawn = pick if idx is None else idx.gather(-1, pick[:, None]).squeeze(-1)
        tok = torch.where(ok, drafts, drawn)
    ok = ok & finite
    return torch.stack([torch.where(finite, tok, NON_FINITE), ok.long()])


def _use_fused_greedy(logits: torch.Tensor, params: SamplingParams,
                      presence: torch.Tensor | None) -> bool:
    """Whether greedy picks go through ``kernels.greedy`` (module notes): ``FUSED_GREEDY``,
    temperature 0, no presence penalty to apply, and CUDA logits (Triton needs a GPU; the CPU
    keeps the torch ops). Tests patch it to run the kernels in the interpreter."""
    return (FUSED_GREEDY and params.greedy and logits.is_cuda
            and not (presence is not None and params.presence_penalty))


def fused_topk_takes(params: SamplingParams, vocab_size: int, on_cuda: bool,
                     penalized: bool) -> bool:
    """Whether a sampled pick of ``params`` over ``vocab_size`` columns goes through
    ``kernels.topk_sample`` (module notes): ``FUSED_TOPK``, not greedy, ``0 < top_k <=
    MAX_TOP_K`` and below the vocabulary, no presence penalty to apply (``penalized``), CUDA."""
    return (FUSED_TOPK and not params.greedy and 0 < params.top_k <= MAX_TOP_K
            and params.top_k < vocab_size and on_cuda and not penalized)


def _use_fused_topk(logits: torch.Tensor, params: SamplingParams,
                    presence: torch.Tensor | None) -> bool:
    """``fused_topk_takes`` for these logits and presence mask. Tests patch it to run the
    kernels in the interpreter."""
    return fused_topk_takes(params, logits.shape[-1], logits.is_cuda,
                            bool(presence is not None and params.presence_penalty))


def _noise(logits: torch.Tensor, params: SamplingParams,
           generator: torch.Generator | None) -> torch.Tensor:
    """The Exp(1) noise ``_race`` would draw for the top-k candidates: float32 [N, top_k] from
    ``generator`` (the same values)."""
    return torch.empty((logits.shape[0], params.top_k), dtype=torch.float32,
                       device=logits.device).exponential_(1.0, generator=generator)


def _limit(logits: torch.Tensor, vocab_limit: int | None) -> int | None:
    """``vocab_limit`` capped at the logits' columns (past them it masks nothing)."""
    return None if vocab_limit is None else min(vocab_limit, logits.shape[-1])


def _greedy_tokens(logits: torch.Tensor, vocab_limit: int | None) -> torch.Tensor:
    """``kernels.greedy.greedy_tokens``, with a ``vocab_limit`` past the vocabulary masking
    nothing (as in ``_masked``: a tiny model may have fewer ids than its tokenizer)."""
    return greedy_tokens(logits, _limit(logits, vocab_limit))


def _masked(logits: torch.Tensor, vocab_limit: int | None) -> torch.Tensor:
    """float32 logits with ids >= ``vocab_limit`` at -inf (a copy if anything changes)."""
    x = logits.float()
    if vocab_limit is not None and vocab_limit < x.shape[-1]:
        x = x.clone() if x is logits else x
        x[..., vocab_limit:] = float("-inf")
    return x


def _race(probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """int64 [N]: a draw per row from ``probs`` [N, C] (unnormalized): ``argmax(p / q)`` with
    ``q ~ Exp(1)`` i.i.d."""
    q = torch.empty_like(probs).exponential_(1.0, generator=generator).clamp_(min=_TINY)
    return (probs / q).argmax(dim=-1)
