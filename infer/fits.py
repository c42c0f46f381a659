"""The one context rule: a prompt and its reply fit in the context (prompt + reply <= ctx), and no
context is longer than the checkpoint supports (``models.context``). The engine and the commands
check through ``check_fits``, the chat loop through ``fits`` (it words its own message, of the
message sent); the decode loop stops a reply by the same rule (``infer/decode_loop.py``)."""

from __future__ import annotations

from infer.wording import counted


def fits(n_prompt: int, ctx: int, max_new: int = 0) -> bool:
    """Whether the prompt and a reply of ``max_new`` tokens (0: no limit, so at least one token)
    fit in the context."""
    return n_prompt + max(max_new, 1) <= ctx


def check_fits(n_prompt: int, ctx: int, max_new: int = 0, *, max_ctx: int,
               fixed: int = 0) -> None:
    """Raise ValueError when the prompt and its reply do not fit in the context (``fits``); the
    message gives both counts and a --ctx, or, past ``max_ctx`` (the largest context the
    checkpoint supports), what fits at this --ctx and at the largest, or to shorten the input.
    ``fixed``: the prompt's tokens that are not the input (the chat template, a system prompt):
    a prompt as long as the context or longer is told to shorten its input only when a one-token
    input would fit with the reply (a one-token prompt cannot be shortened).
    """
    if fits(n_prompt, ctx, max_new):
        return
    n_reply = max(max_new, 1)
    prompt = f"the prompt is {counted(n_prompt, 'token')}"
    need = -(-(n_prompt + n_reply) // 1024)
    beyond = f"beyond the largest context this model supports ({counted(max_ctx, 'token')})"
    if n_prompt + 1 > max_ctx:
        raise ValueError(f"{prompt}, {beyond}: shorten the input")
    if n_prompt + n_reply > max_ctx:
        room, most = ctx - n_prompt, max_ctx - n_prompt  # at this --ctx; at the largest one
        fix = (f"lower --max-new-tokens to at most {room:,} (at --ctx {ctx:,}; up to {most:,} "
               f"with --ctx {max_ctx // 1024}k)" if room >= 1 else
               f"raise --ctx (up to {max_ctx // 1024}k) and lower --max-new-tokens to at most "
               f"{most:,}")
        raise ValueError(f"{prompt} and the reply up to {max_new:,} "
                         f"(--max-new-tokens): {n_prompt + max_new:,} tokens, {beyond}: {fix}")
    if n_prompt >= ctx:  # no room for one reply token: a lower --max-new-tokens cannot help
        size = ("which leaves no room for a reply in" if n_prompt == ctx else "longer than")
        shorter = n_prompt > fixed + 1 and fits(fixed + 1, ctx, max_new)
        raise ValueError(f"{prompt}, {size} the context of {counted(ctx, 'token')}"
                         f": raise --ctx (e.g. --ctx {need}k)"
                         f"{' or shorten the input' if shorter else ''}")
    raise ValueError(f"{prompt} and the reply up to {max_new:,} "
                     f"(--max-new-tokens): {n_prompt + max_new:,} tokens, more than the context "
                     f"of {counted(ctx, 'token')}: raise --ctx (e.g. --ctx {need}k) or lower "
                     f"--max-new-tokens to at most {ctx - n_prompt:,}")
