"""The prompts of a map-reduce summary and the context budget they leave (``infer/summarize.py``
runs the map-reduce).

Four templates: ``SUMMARY_PROMPT`` (a whole text in one reply), ``PART_PROMPT`` (part k of n of the
text), ``GROUP_PROMPT`` (consecutive part summaries combined into one: a level of the reduce) and
``COMBINE_PROMPT`` (the final combining prompt). ``part_limit`` sizes the parts so that a part's
prompt plus its reply budget fits the context, and so does the combining prompt of two part
summaries (every reduce level shrinks); ``check_plan`` also fits the final combining prompt with
its reply budget, before any work. ``template_overhead`` is what a template's chat prompt takes
without its text.

The plan gives each summary in a combining prompt ``--part-tokens`` plus ``SUMMARY_SHARE`` tokens
(its "Part k:" label and the blank line after it). A reply of ``--part-tokens`` tokens can take
more than that once its text is encoded again inside the prompt: a sampled token sequence need
not be its text's own tokenization (an unfinished UTF-8 character decodes to U+FFFD, which
encodes as several tokens; BPE merges across the reply's token boundaries differ), and a random
model's 512-token replies re-encode to 530-570 tokens. So ``labelled_summaries`` cuts a summary
whose labelled text is longer than its share to the share (``trim_to_tokens``) when it is reused,
and reports the tokens cut: the plan then holds for any reply, and every reduce level shrinks.
"""

from __future__ import annotations

from infer.wording import counted

SUMMARY_PROMPT = (
    "Summarize the following text. Give its main points, the key people or ideas, and how it "
    "ends or what it concludes, in a few short paragraphs.\n\n---\n{text}\n---\n\n"
    "Write the summary of the text above.")
PART_PROMPT = (
    "The following text is part {k} of {n} of a longer text. Summarize this part: its main "
    "points, the key people or ideas, and what happens in it, in a few short paragraphs."
    "\n\n---\n{text}\n---\n\nWrite the summary of this part.")
COMBINE_PROMPT = (
    "Below are summaries of consecutive parts of one text, in order. Combine them into one "
    "summary of the whole text: its main points, the key people or ideas, and how it ends or "
    "what it concludes, in a few short paragraphs.\n\n---\n{text}\n---\n\n"
    "Write the summary of the whole text.")
GROUP_PROMPT = (
    "Below are summaries of consecutive parts ({first} to {last} of {n}) of one text, in order. "
    "Combine them into one summary of these parts, keeping the main points, the key people or "
    "ideas and what happens, in a few short paragraphs.\n\n---\n{text}\n---\n\n"
    "Write the combined summary.")
TEMPLATE_MARGIN = 16  # tokens: a part's text may tokenize a little longer inside the template
SUMMARY_SHARE = 8  # tokens a combining prompt gives each summary beyond --part-tokens
SEPARATOR_TOKENS = 2  # of SUMMARY_SHARE: the "\n\n" between labelled summaries
FINAL_SHARE = 16  # tokens the final combining prompt gives its one summary beyond --part-tokens


def template_overhead(tokenizer, template: str, think: bool) -> int:
    """Tokens ``template``'s chat prompt takes without its text, plus ``TEMPLATE_MARGIN``."""
    content = template.format(text="", k=999, n=999, first=999, last=999)
    ids = tokenizer.chat_ids([{"role": "user", "content": content}], enable_thinking=think)
    return len(ids) + TEMPLATE_MARGIN


def part_limit(tokenizer, ctx: int, part_tokens: int, think: bool = False,
               final_tokens: int | None = None) -> int:
    """The most tokens of text one part may hold: its prompt (``PART_PROMPT``) plus its reply
    budget ``part_tokens`` must fit in ``ctx``, and so must two summaries' combining prompt.

    Raises:
        ValueError: the context is too small for that. The message names the smallest --ctx that
            works: with ``final_tokens``, the one ``check_plan`` accepts with that final budget.
    """
    limit = ctx - template_overhead(tokenizer, PART_PROMPT, think) - part_tokens
    group = ctx - template_overhead(tokenizer, GROUP_PROMPT, think) - part_tokens
    two = 2 * (part_tokens + SUMMARY_SHARE)  # two labelled summaries (labelled_summaries)
    if limit < part_tokens or group < two:
        need = ctx - min(limit - part_tokens, group - two)
        lower = "--part-tokens"
        if final_tokens is not None:
            final_need = _final_need(tokenizer, part_tokens, final_tokens, think)
            if final_need > need:  # the final reply's budget sets it: --part-tokens alone won't
                need, lower = final_need, "--max-new-tokens and --part-tokens"
        raise ValueError(f"--ctx {ctx:,} is too small to summarize a text in parts with part "
                         f"summaries of {counted(part_tokens, 'token')} (--part-tokens): raise "
                         f"--ctx to at least {need:,} or lower {lower}")
    return limit


def _final_need(tokenizer, part_tokens: int, final: int, think: bool) -> int:
    """The smallest context the final combining prompt (one part summary) and its reply of
    ``final`` tokens fit in."""
    return template_overhead(tokenizer, COMBINE_PROMPT, think) + part_tokens + FINAL_SHARE + final


def check_plan(tokenizer, ctx: int, part_tokens: int, final_tokens: int | None,
               think: bool = False, *, max_ctx: int | None = None) -> int:
    """Check that a map-reduce in ``ctx`` can finish: a part with its reply fits
    (``part_limit``), and so does the final combining prompt holding one part summary with the
    final reply (``final_tokens``; None: ``part_tokens``). Returns ``part_limit``.

    ``max_ctx``: the largest context the model supports (tokens; None: no limit known). When the
    plan needs more than that, no --ctx can help: the message names instead the largest
    ``--part-tokens`` and/or ``--max-new-tokens`` that fit at ``max_ctx`` (``_past_limit``).

    Raises:
        ValueError: either does not fit (the message names the flag to change).
    """
    final = final_tokens or part_tokens
    if max_ctx is not None:
        _check_limit(tokenizer, part_tokens, final_tokens, think, max_ctx)
    limit = part_limit(tokenizer, ctx, part_tokens, think, final)
    room = ctx - _final_need(tokenizer, part_tokens, 0, think)  # for the final reply
    if final > room:
        fix = (f"lower --max-new-tokens to at most {room:,}" if room >= 1 else
               "lower --part-tokens")
        raise ValueError(f"the final summary's budget ({counted(final, 'token')}, "
                         f"--max-new-tokens) does not fit in the context of "
                         f"{counted(ctx, 'token')} next to its combining prompt and the part "
                         f"summaries (up to {counted(part_tokens, 'token')} each, --part-tokens): "
                         f"{fix}, or raise --ctx")
    return limit


def _check_limit(tokenizer, part: int, final_tokens: int | None, think: bool,
                 max_ctx: int) -> None:
    """Raise ValueError when no context up to ``max_ctx`` fits the plan of part summaries of
    ``part`` tokens and a final reply of ``final_tokens`` (None: ``part``), naming what does.

    With O_p, O_g, O_c the overheads of the part, group and combining prompts
    (``template_overhead``) and F the final budget, the plan needs a context of
    max(O_p + 2 * part, O_g + 3 * part + 2 * S, O_c + part + S_f + F) tokens, S =
    ``SUMMARY_SHARE``, S_f = ``FINAL_SHARE`` (``part_limit``, ``check_plan``). At ``max_ctx`` the
    largest ``--part-tokens`` solves each term for ``part`` (with F = part when ``final_tokens``
    is None); the largest ``--max-new-tokens`` is ``max_ctx - O_c - part - S_f``, if the parts
    fit there at all.
    """
    o_p, o_g, o_c = (template_overhead(tokenizer, t, think)
                     for t in (PART_PROMPT, GROUP_PROMPT, COMBINE_PROMPT))
    final = final_tokens or part
    need = max(o_p + 2 * part, o_g + 3 * part + 2 * SUMMARY_SHARE,
               o_c + part + FINAL_SHARE + final)
    if need <= max_ctx:
        return
    m = max_ctx
    # the parts, and a group of two summaries with its reply
    parts_max = min((m - o_p) // 2, (m - o_g - 2 * SUMMARY_SHARE) // 3)
    both = m - o_c - FINAL_SHARE  # the final combining prompt: one part summary and the final reply
    if final_tokens is None:  # the final budget is --part-tokens too
        part_max, final_max = min(parts_max, both // 2), 0
    else:
        part_max = min(parts_max, both - final_tokens)
        final_max = both - part if part <= parts_max else 0
    at = f"with --ctx {m // 1024}k" if m % 1024 == 0 else f"with --ctx {m}"
    fixes = ([f"--max-new-tokens to at most {final_max:,}"] if final_max >= 1 else []) + \
        ([f"--part-tokens to at most {part_max:,}"] if part_max >= 1 else [])
    if parts_max < 1:  # the prompts alone fill it (a model with very few positions)
        fix = "it is too short to summarize a text in parts"
    elif fixes:
        fix = f"lower {' or '.join(fixes)} ({at})"
    else:
        fix = (f"lower --part-tokens to at most {parts_max:,} and --max-new-tokens so that the "
               f"two add up to at most {both:,} ({at})")
    final_words = ("" if final_tokens is None else
                   f" and a final summary of {counted(final_tokens, 'token')} (--max-new-tokens)")
    raise ValueError(f"part summaries of {counted(part, 'token')} (--part-tokens){final_words} "
                     f"need a context of {counted(need, 'token')}, beyond the largest context "
                     f"this model supports ({counted(m, 'token')}): {fix}")


def labelled_summaries(tokenizer, summaries: list[str], part_tokens: int
                       ) -> tuple[list[str], list[int]]:
    """``summaries`` labelled ("Part k:") as a combining prompt holds them, each cut to its share
    of the plan (module docstring): at most ``part_tokens + SUMMARY_SHARE - SEPARATOR_TOKENS``
    tokens, labels included. Returns ``(labelled texts, tokens cut from each)``; a summary
    within its share (any whose text encodes to its reply's length or less, up to part 999) is
    kept whole (0 cut)."""
    limit = part_tokens + SUMMARY_SHARE - SEPARATOR_TOKENS
    labelled = [f"Part {k + 1}:\n{s}" for k, s in enumerate(summaries)]
    sizes = tokenizer.count_tokens(labelled)
    cut = [0] * len(labelled)
    for k, n in enumerate(sizes):
        if n > limit:
            labelled[k] = trim_to_tokens(tokenizer, labelled[k], limit)
            cut[k] = n - len(tokenizer.encode(labelled[k]))
    return labelled, cut


def trim_to_tokens(tokenizer, text: str, limit: int) -> str:
    """``text`` itself if it encodes to at most ``limit`` tokens, else the text of the longest
    run of its first tokens, at most ``limit``, that encodes back to those same tokens: a prefix
    of ``text`` as the tokenizer reads it (normalized: Qwen3's is NFC), never cut inside a
    character (that decodes to U+FFFD, which encodes otherwise). "" if no run does."""
    ids = tokenizer.encode(text)
    if len(ids) <= limit:
        return text
    for n in range(limit, 0, -1):
        head = tokenizer.decode(ids[:n])
        if tokenizer.encode(head) == ids[:n]:
            return head
    return ""
