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

With ``speculate`` (``infer bench --speculate``) each length is then decoded a second time on a
fresh session, with prompt-lookup speculation (``Session.generate(..., speculate=True)``), the
same tokens, greedy and past stop tokens, and the result adds the speculative decode rate, the
speedup over the plain decode, the drafts made and accepted, and whether the two greedy token
sequences are identical (they must be; a difference is reported, not raised). Pseudo-random
prompts give prompt lookup nothing to draft, so both decodes then take ``phrase_prompt``'s
prompt instead: a pseudo-random phrase of ``PHRASE_TOKENS`` ids repeated to the length. With
random weights expect the cost of the verify steps; with a trained model, the gain. The warm-up
then also captures the step of every verify bucket and runs one speculative reply, untimed.

Engine-side only: the table, its labels and the command's flow are ``infer/ui/bench_view.py``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass

from infer.config import parse_ctx
from infer.sampling_params import SamplingParams
from infer.wording import counted


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

    Measured with speculation only (None otherwise; ``to_dict`` then leaves them out, so the
    record of a run without it keeps its shape):
        spec_decode_tokens_per_s: tokens/s after the first token, speculating.
        speedup: spec_decode_tokens_per_s / decode_tokens_per_s (0.0 if the latter is 0).
        spec_fraction_of_ceiling: spec_decode_tokens_per_s / ceiling_tokens_per_s (above 1:
            faster than any plain decode can be; None without a ceiling).
        drafted, accepted: drafts verified and accepted in the speculative decode.
        mean_accepted: drafts accepted per verify step (0.0 without verify steps).
        identical: the greedy tokens with speculation equal those without.
    """

    prompt_tokens: int
    new_tokens: int
    ttft_s: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    ceiling_tokens_per_s: float | None
    fraction_of_ceiling: float | None
    spec_decode_tokens_per_s: float | None = None
    speedup: float | None = None
    spec_fraction_of_ceiling: float | None = None
    drafted: int | None = None
    accepted: int | None = None
    mean_accepted: float | None = None
    identical: bool | None = None

    def to_dict(self) -> dict:
        """The fields as a dict; the speculative ones only when measured."""
        d = asdict(self)
        if self.spec_decode_tokens_per_s is None:
            for key in SPEC_FIELDS:
                del d[key]
        return d


SPEC_FIELDS = ("spec_decode_tokens_per_s", "speedup", "spec_fraction_of_ceiling", "drafted",
               "accepted", "mean_accepted", "identical")
PHRASE_TOKENS = 64  # the repeated phrase of the speculative bench's prompt


def parse_lengths(text: str | None, ctx: int, tokens: int, max_ctx: int | None = None) -> list[int]:
    """Context lengths to benchmark, ascending and distinct.

    ``text``: comma-separated sizes as ``--ctx`` takes them (``"4k,32k"``), or None for the
    default: 4096 and the longest prompt that fits (``ctx - tokens``), or just the latter when
    it is shorter than 4096. ``max_ctx``: the most positions the model supports (a length
    plus ``tokens`` past it is an error), None for no limit.

    Raises:
        ValueError: on a malformed size, an empty item (``4k,,32k``), a ``tokens`` below 2,
            or a length that does not leave room for ``tokens`` new tokens in ``ctx``.
    """
    if tokens < 2:
        raise ValueError(f"--tokens must be at least 2 (decode speed is timed after the first "
                         f"token), got {tokens}")
    room = ctx - tokens
    if room < 1:
        raise ValueError(f"--ctx {ctx:,} leaves no room for a prompt and "
                         f"{counted(tokens, 'new token')} (--tokens): raise --ctx or lower "
                         "--tokens")
    if text is None:
        return sorted({min(4096, room), room})
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise ValueError(f"--lengths {text!r} names no length: give sizes such as 4k,32k")
    if "" in parts:  # "4k,,32k" or "4k,": a typo, not a length to drop silently
        raise ValueError(f"--lengths {text!r} has an empty item (a comma too many): give sizes "
                         "such as 4k,32k")
    lengths = set()
    for part in parts:
        try:
            lengths.add(parse_ctx(part))
        except ValueError:
            raise ValueError(f"--lengths: invalid length {part!r}: give token counts such as "
                             "4096 or 4k (k = 1024), comma-separated") from None
    lengths = sorted(lengths)
    # NOTE: "--lengths: a prompt of 131,072 tokens", not "--lengths 131,072" (two lengths)
    prompt = f"--lengths: a prompt of {counted(lengths[-1], 'token')} plus " \
             f"{counted(tokens, 'new token')} (--tokens)"
    if max_ctx is not None and lengths[-1] + tokens > max_ctx:
        raise ValueError(f"{prompt} is beyond the largest context the model supports "
                         f"({counted(max_ctx, 'token')}): lower the length or --tokens")
    if lengths[-1] > room:
        raise ValueError(f"{prompt} does not fit in --ctx {ctx:,}: raise --ctx (e.g. --ctx "
                         f"{-(-(lengths[-1] + tokens) // 1024)}k) or lower the length or "
                         f"--tokens")
    return lengths


def bench_prompt(n: int, vocab: int, seed: int = 0) -> list[int]:
    """``n`` pseudo-random token ids in ``[0, vocab)``, the same for the same arguments."""
    rng = random.Random(seed)
    return [rng.randrange(vocab) for _ in range(n)]


def phrase_prompt(n: int, vocab: int, seed: int = 0) -> list[int]:
    """``n`` ids: ``bench_prompt(PHRASE_TOKENS, vocab, seed)`` repeated (the last copy cut), so
    that prompt lookup finds drafts; the same for the same arguments."""
    phrase = bench_prompt(PHRASE_TOKENS, vocab, seed)
    return (phrase * -(-n // PHRASE_TOKENS))[:n]


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


def _reply(engine, ids: list[int], sampling: SamplingParams, speculate: bool = False):
    """Run one reply to ``ids`` on a fresh session (closed afterwards); return ``(stats,
    tokens)``."""
    session = engine.new_session()
    try:
        out = list(session.generate(ids, sampling, speculate=speculate))
        return session.stats, out
    finally:
        session.close()


def _spec_warmup(engine, prompt: list[int], sampling: SamplingParams) -> None:
    """Untimed: capture the decode step of every row bucket a verify step may take (the runner
    captures them lazily otherwise, in the middle of a timed decode; nothing without CUDA
    graphs), then run one speculative reply, which compiles the verify path's kernel shapes."""
    runner = engine.graph_runner()
    for rows in runner.buckets:
        runner.prepare(sampling, rows)
    _reply(engine, prompt, sampling, speculate=True)


def run_bench(engine, lengths: list[int], tokens: int, speculate: bool = False
              ) -> Iterator[BenchResult]:
    """Yield one ``BenchResult`` per length (ascending as given), each on a fresh session.

    Args:
        engine: an ``infer.engine.Engine`` whose context holds ``max(lengths) + tokens``.
        lengths: prompt lengths in tokens.
        tokens: tokens to decode per length (>= 2), greedy, past stop tokens.
        speculate: also decode each length with prompt-lookup speculation (the speculative
            fields of ``BenchResult``); the prompt is then ``phrase_prompt``'s, for both decodes.
    """
    vocab = engine.tokenizer.vocab_limit or engine.model_config.vocab_size
    prompt = (phrase_prompt if speculate else bench_prompt)(max(lengths), vocab)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=tokens, ignore_eos=True)
    # warm-up, not timed: compiles the kernels of every prefill shape and of a decode step and
    # captures the decode graph, which would otherwise land in the first length's figures
    warm = warmup_lengths(lengths, engine.config.chunk)
    for n in warm:
        _reply(engine, prompt[:n], sampling.replace(max_new_tokens=2))
    if speculate:
        _spec_warmup(engine, prompt[:warm[0]], sampling)
    for n in lengths:
        st, plain = _reply(engine, prompt[:n], sampling)
        ceiling = engine.ceiling_tokens_per_s(n + st.new_tokens // 2)
        decode = st.decode_tokens_per_s
        spec = {}
        if speculate:
            sst, fast = _reply(engine, prompt[:n], sampling, speculate=True)
            rate = sst.decode_tokens_per_s
            spec = dict(spec_decode_tokens_per_s=rate, speedup=rate / decode if decode else 0.0,
                        spec_fraction_of_ceiling=rate / ceiling if ceiling else None,
                        drafted=sst.drafted, accepted=sst.accepted,
                        mean_accepted=sst.mean_accepted, identical=fast == plain)
        yield BenchResult(
            prompt_tokens=n, new_tokens=st.new_tokens, ttft_s=st.ttft_s,
            prefill_tokens_per_s=n / st.ttft_s if st.ttft_s > 0 else 0.0,
            decode_tokens_per_s=decode, ceiling_tokens_per_s=ceiling,
            fraction_of_ceiling=decode / ceiling if ceiling else None, **spec)


def cache_dtype(engine) -> str:
    """The dtype the KV pool really stores: ``"int8"``, or for ``--kv-cache bf16`` the model's
    activation dtype, ``"bfloat16"`` on CUDA and ``"float32"`` on the CPU
    (``EngineConfig.torch_dtype``)."""
    if engine.config.kv_cache == "int8":
        return "int8"
    return str(engine.pool.layers[0].k.dtype).removeprefix("torch.")
