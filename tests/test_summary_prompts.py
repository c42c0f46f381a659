"""infer/summary_prompts.py: a plan that needs more than the model's largest context is told the
largest --part-tokens and/or --max-new-tokens that fit there, never a --ctx past it (summarize
said "raise --ctx to at least 150,108" to a model whose limit is 131,072); and through the CLI."""

from __future__ import annotations

import re

import pytest
from cli_helpers import assert_one_line_error, invoke

from infer.summary_prompts import check_plan

TOP = 131072  # the tiny checkpoint's largest context: 4 x 32,768 with YaRN


def at_most(msg: str, flag: str) -> int:
    """The count ``lower ... {flag} to at most N`` names in ``msg``."""
    return int(re.search(rf"{flag} to at most ([\d,]+)", msg)[1].replace(",", ""))


def refused(tok, ctx: int, part: int, final: int | None) -> str:
    with pytest.raises(ValueError) as e:
        check_plan(tok, ctx, part, final, max_ctx=TOP)
    return str(e.value)


def assert_no_ctx_past_the_limit(msg: str) -> None:
    assert "raise --ctx" not in msg and "at least" not in msg, msg
    assert "(with --ctx 128k)" in msg and "beyond the largest context this model supports " \
        "(131,072 tokens)" in msg, msg


@pytest.mark.parametrize("final", [1024, None])
def test_part_tokens_past_the_limit(tok, final):
    """--part-tokens 50000: the parts need 3 x 50,000 tokens and more; the largest that fit at
    128k (with the final budget, which is --part-tokens itself without --max-new-tokens)."""
    msg = refused(tok, 2048, 50000, final)
    assert_no_ctx_past_the_limit(msg)
    assert "--max-new-tokens to" not in msg
    most = at_most(msg, "--part-tokens")
    assert check_plan(tok, TOP, most, final, max_ctx=TOP) > 0
    with pytest.raises(ValueError):
        check_plan(tok, TOP, most + 1, final)


def test_max_new_tokens_past_the_limit(tok):
    """A final budget of 140,000 tokens with small parts: lower --max-new-tokens (or the parts,
    which cannot make room for it: not named)."""
    msg = refused(tok, 2048, 64, 140000)
    assert_no_ctx_past_the_limit(msg)
    assert "--part-tokens to" not in msg
    most = at_most(msg, "--max-new-tokens")
    check_plan(tok, TOP, 64, most, max_ctx=TOP)
    with pytest.raises(ValueError):
        check_plan(tok, TOP, 64, most + 1)


def test_either_flag_fixes_it(tok):
    msg = refused(tok, 2048, 20000, 120000)
    assert_no_ctx_past_the_limit(msg)
    new, part = at_most(msg, "--max-new-tokens"), at_most(msg, "--part-tokens")
    check_plan(tok, TOP, 20000, new)
    check_plan(tok, TOP, part, 120000)
    for args in ((20000, new + 1), (part + 1, 120000)):
        with pytest.raises(ValueError):
            check_plan(tok, TOP, *args)


def test_both_flags_must_be_lowered(tok):
    msg = refused(tok, 2048, 50000, 140000)
    assert_no_ctx_past_the_limit(msg)
    part = at_most(msg, "--part-tokens")
    total = int(re.search(r"add up to at most ([\d,]+)", msg)[1].replace(",", ""))
    check_plan(tok, TOP, part, total - part)
    for args in ((part, total - part + 1), (part + 1, total - part - 1)):
        with pytest.raises(ValueError):
            check_plan(tok, TOP, *args)


def test_within_the_limit_the_ctx_is_still_named(tok):
    """A plan that fits at some --ctx up to the limit keeps its message: raise --ctx to at least
    the one that works."""
    msg = refused(tok, 2048, 1500, None)
    need = int(re.search(r"raise --ctx to at least ([\d,]+)", msg)[1].replace(",", ""))
    assert need <= TOP
    check_plan(tok, need, 1500, None, max_ctx=TOP)


def test_summarize_names_the_part_tokens_that_fit(tiny_ckpt, texts_dir):
    text = texts_dir / "pep-0498-literal-string-interpolation.txt"  # ~6,500 tokens
    result = invoke("summarize", text, "--model", tiny_ckpt, "--device", "cpu", "--ctx", "2k",
                    "--part-tokens", "50000")
    assert_one_line_error(result, 2, "cannot be summarized in parts: part summaries of 50,000 "
                                     "tokens (--part-tokens)")
    assert_no_ctx_past_the_limit(result.stderr)
    assert re.search(r"lower --part-tokens to at most [\d,]+ \(with --ctx 128k\)$",
                     result.stderr.strip()), result.stderr
