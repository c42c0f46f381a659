"""Cross-entropy through the lm_head in row chunks, so the [tokens, vocab] logits never exist whole.

With Qwen3's 151936-wide vocabulary the logits are the largest tensor of a training step (32k
tokens x 151936 x 4 bytes = 20 GB in float32, more with their gradient). ``linear_cross_entropy``
computes ``mean_t CE(hidden[t] @ weight.T, target[t])`` one chunk of rows at a time and, in the same
pass, that chunk's gradients with respect to ``hidden`` and ``weight`` (softmax minus one-hot,
times the two operands), as the fused linear-cross-entropy of Liger-Kernel and Apple's
"Cut Your Losses" (Wijmans et al. 2024) do, but in plain torch: peak extra memory is one chunk's
logits plus the weight's float32 gradient, and no matmul is recomputed in the backward pass.
``token_losses`` is the forward-only, per-token version for evaluation.

Numerics: the matmuls run in ``compute_dtype`` (bfloat16 under autocast; the operands are cast
explicitly, autocast is off inside), the log-sum-exp and the softmax in float32, the weight
gradient is accumulated in float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

DEFAULT_CHUNK = 4096  # rows per chunk: 4096 x 151936 float32 logits = 2.5 GB


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk: int, compute_dtype: torch.dtype):
        n = hidden.shape[0]
        grad_h = torch.empty_like(hidden)
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        with torch.autocast(hidden.device.type, enabled=False):
            w = weight.to(compute_dtype)  # (V, H)
            for s in range(0, n, chunk):
                h = hidden[s:s + chunk].to(compute_dtype)  # (c, H)
                tgt = targets[s:s + chunk]
                logits = (h @ w.T).float()  # (c, V)
                lse = torch.logsumexp(logits, dim=-1)  # (c,)
                total += (lse - logits.gather(1, tgt[:, None])[:, 0]).sum()
                # d(sum of CE)/d logits = softmax - one_hot(target), in place of the logits
                g = logits.sub_(lse[:, None]).exp_()
                rows = torch.arange(g.shape[0], device=g.device)
                g[rows, tgt] -= 1.0
                g = g.to(compute_dtype)
                grad_h[s:s + chunk] = (g @ w).to(hidden.dtype)
                grad_w += (g.T @ h).float()
        ctx.save_for_backward(grad_h, grad_w)
        ctx.weight_dtype = weight.dtype
        return total / n

    @staticmethod
    def backward(ctx, grad_out):
        grad_h, grad_w = ctx.saved_tensors
        n = grad_h.shape[0]
        scale = grad_out / n
        return (grad_h * scale.to(grad_h.dtype), (grad_w * scale).to(ctx.weight_dtype),
                None, None, None)


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                         chunk: int = DEFAULT_CHUNK,
                         compute_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Mean cross-entropy of ``hidden @ weight.T`` against ``targets``, differentiable in
    ``hidden`` and ``weight``.

    Args:
        hidden: [N, H] float (the final-norm output of every position).
        weight: [V, H] float, the lm_head (the tied embedding).
        targets: int64 [N], each row's next token, in [0, V).
        chunk: rows per chunk (bounds the logits to [chunk, V] float32).
        compute_dtype: the matmul dtype; None: autocast's dtype when autocast is on for
            ``hidden``'s device, else ``hidden``'s dtype.

    Returns:
        A float32 scalar, the mean over the N rows (natural log).

    NOTE: the gradients are computed in the forward pass, so the forward costs three matmuls of
    [N, H] x [H, V] and the backward none; call it only where the loss will be backpropagated
    (use ``token_losses`` for evaluation).
    """
    assert hidden.ndim == 2 and weight.ndim == 2 and hidden.shape[1] == weight.shape[1]
    assert targets.shape == (hidden.shape[0],) and targets.dtype == torch.int64
    if compute_dtype is None:
        dev = hidden.device.type
        compute_dtype = (torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev)
                         else hidden.dtype)
    return _LinearCrossEntropy.apply(hidden, weight, targets, chunk, compute_dtype)


@torch.no_grad()
def token_losses(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                 chunk: int = DEFAULT_CHUNK) -> torch.Tensor:
    """Per-row cross-entropy [N] float32 of ``hidden [N, H] @ weight.T`` against ``targets``
    (int64 [N]), in row chunks; the matmul runs as ``F.linear`` does under the ambient autocast.
    """
    out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
    for s in range(0, hidden.shape[0], chunk):
        logits = F.linear(hidden[s:s + chunk], weight).float()  # (c, V)
        # lse - target logit: F.cross_entropy's nll_loss would stop a deterministic-mode run
        picked = logits.gather(1, targets[s:s + chunk, None])[:, 0]
        out[s:s + chunk] = torch.logsumexp(logits, dim=-1) - picked
    return out
