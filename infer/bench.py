"""``infer bench``: prefill and decode speed of one model at chosen context lengths, against the
decode ceiling of the device (its measured read bandwidth over the bytes one decode step must
read: ``Engine.ceiling_tokens_per_s``, DESIGN.md "Measuring speed").

Per length, a fresh session prefills a prompt of that many tokens (pseudo-random ids, the same
for every run: speed does not depend on the text) and decodes a fixed number of tokens greedily
past any stop token, through the same ``Session.generate`` as the other commands (CUDA graphs
and all). The figures are the session's own statistics: the time to the first token, the prefill
rate (prompt tokens / that time) and the decode rate after the first token; the ceiling is taken
at the mean number of cached positions during the decode. Untimed warm-up replies first compile
every kernel shape the lengths use and capture the decode graph (``warmup_lengths``), so that the
first length does not pay for compilation in its time to first token.

Engine-side only: the table, its labels and the command's flow are ``infer/ui/bench_view.py``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from infer.config import SamplingParams, parse_ctx


@dataclass
class BenchResult:
    """One context length's figures.

    Attributes:
        prompt_tokens: tokens prefilled (the context length benchmarked).
        new_tokens: tokens decoded.
        ttft_s: seconds from the start of the prefill to the first sampled token.
        prefill_tokens_per_s: prompt_tokens / ttft_s.
        decode_tokens_per_s: tokens/s after the first token.
        ceiling_tokens_per_s: the decode ceiling at the mean cached length, None on a CPU.
        fraction_of_ceiling: decode_tokens_per_s / ceiling_tokens_per_s (None without a ceiling).
    """

    prompt_tokens: int
    new_tokens: int
    ttft_s: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    ceiling_tokens_per_s: float | None
    fraction_of_ceiling: float | None

    def to_dict(self) -> dict:
        return asdict(self)


def parse_lengths(text: str | None, ctx: int, tokens: int, max_ctx: int | None = None) -> list[int]:
    """Context lengths to benchmark, ascending and distinct.

    ``text``: comma-separated sizes as ``--ctx`` takes them (``"4k,32k"``), or None for the
    default: 4096 and the longest prompt that fits (``ctx - tokens``), or just the latter when
    it is shorter than 4096. ``max_ctx``: the most positions the model supports (a length
    plus ``tokens`` past it is an error), None for no limit.

    Raises:
        ValueError: on a malformed size, a ``tokens`` below 2, or a length that does not leave
            room for ``tokens`` new tokens in ``ctx``.
    """
    if tokens < 2:
        raise ValueError(f"--tokens must be at least 2 (decode speed is timed after the first "
                         f"token), got {tokens}")
    room = ctx - tokens
    if room < 1:
        raise ValueError(f"--ctx {ctx} leaves no room for a prompt and {tokens} new tokens "
                         f"(--tokens): raise --ctx or lower --tokens")
    if text is None:
        return sorted({min(4096, room), room})
    lengths = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        try:
            lengths.add(parse_ctx(part))
        except ValueError:
            raise ValueError(f"--lengths: invalid length {part!r}: give token counts such as "
                             "4096 or 4k (k = 1024), comma-separated") from None
    lengths = sorted(lengths)
    if not lengths:
        raise ValueError(f"--lengths {text!r} names no length: give sizes such as 4k,32k")
    if max_ctx is not None and lengths[-1] + tokens > max_ctx:
        raise ValueError(f"--lengths {lengths[-1]} plus {tokens} new tokens (--tokens) are "
                         f"beyond the largest context the model supports ({max_ctx} tokens)")
    if lengths[-1] > room:
        raise ValueError(f"--lengths {lengths[-1]} plus {tokens} new tokens (--tokens) do not fit "
                         f"in --ctx {ctx}: raise --ctx (e.g. --ctx "
                         f"{-(-(lengths[-1] + tokens) // 1024)}k) or lower the length")
    return lengths


def bench_prompt(n: int, vocab: int, seed: int = 0) -> list[int]:
    """``n`` pseudo-random token ids in ``[0, vocab)``, the same for the same arguments."""
    rng = random.Random(seed)
    return [rng.randrange(vocab) for _ in range(n)]


def warmup_lengths(lengths: list[int], chunk: int) -> list[int]:
    """Prompt lengths of the warm-up replies: between them they prefill every chunk shape that
    ``lengths`` prefill in chunks of ``chunk`` tokens, in a few chunks each.

    A prefill of ``n`` tokens runs chunks of ``chunk`` tokens and a tail of ``n % chunk``; the
    first attends no cached prefix, the others do. Triton specializes on the chunk's token count
    (the prefill tiles shrink to short chunks; a tail of up to 16 tokens takes the decode kernel)
    and the shapes depend on the prefix, so each (tokens, has prefix) pair compiles once. A
    length of up to two chunks is warmed up as it is; a longer one as two chunks plus its tail
    (the first chunk, a chunk after a prefix, the tail after a prefix).
    """
    return sorted({min(n, 2 * chunk + n % chunk) for n in lengths})


def _reply(engine, ids: list[int], sampling: SamplingParams):
    """Run one reply to ``ids`` on a fresh session (closed afterwards); return its stats."""
    session = engine.new_session()
    try:
        for _ in session.generate(ids, sampling):
            pass
        return session.stats
    finally:
        session.close()


def run_bench(engine, lengths: list[int], tokens: int) -> Iterator[BenchResult]:
    """Yield one ``BenchResult`` per length (ascending as given), each on a fresh session.

    Args:
        engine: an ``infer.engine.Engine`` whose context holds ``max(lengths) + tokens``.
        lengths: prompt lengths in tokens.
        tokens: tokens to decode per length (>= 2), greedy, past stop tokens.
    """
    vocab = engine.tokenizer.vocab_limit or engine.model_config.vocab_size
    prompt = bench_prompt(max(lengths), vocab)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=tokens, ignore_eos=True)
    # warm-up, not timed: compiles the kernels of every prefill shape and of a decode step and
    # captures the decode graph, which would otherwise land in the first length's figures
    for n in warmup_lengths(lengths, engine.config.chunk):
        _reply(engine, prompt[:n], sampling.replace(max_new_tokens=2))
    for n in lengths:
        st = _reply(engine, prompt[:n], sampling)
        ceiling = engine.ceiling_tokens_per_s(n + st.new_tokens // 2)
        decode = st.decode_tokens_per_s
        yield BenchResult(
            prompt_tokens=n, new_tokens=st.new_tokens, ttft_s=st.ttft_s,
            prefill_tokens_per_s=n / st.ttft_s if st.ttft_s > 0 else 0.0,
            decode_tokens_per_s=decode, ceiling_tokens_per_s=ceiling,
            fraction_of_ceiling=decode / ceiling if ceiling else None)


def cache_dtype(engine) -> str:
    """The dtype the KV pool really stores: ``"int8"``, or for ``--kv-cache bf16`` the model's
    activation dtype, ``"bfloat16"`` on CUDA and ``"float32"`` on the CPU
    (``EngineConfig.torch_dtype``)."""
    if engine.config.kv_cache == "int8":
        return "int8"
    return str(engine.pool.layers[0].k.dtype).removeprefix("torch.")
