"""The `infer` command line's context rule (prompt + reply <= ``--ctx``; a ``--ctx`` past the
checkpoint's native positions turns YaRN on; none past the largest context the model supports;
``infer.fits.check_fits``'s messages; a chat message that does not fit beside the conversation),
through typer's test runner on a tiny random checkpoint on the CPU."""

from __future__ import annotations

import json
import re

import pytest
from cli_helpers import FAST, assert_one_line_error, invoke, ok_json

pytestmark = pytest.mark.usefixtures("cli_tokenizer_once")


def test_ctx_past_max_position_embeddings_turns_yarn_on_and_says_so(tiny_ckpt):
    ok = invoke("generate", tiny_ckpt, "hi", *FAST, "--max-new-tokens", "1", "--ctx", "40960")
    assert ok.exit_code == 0 and "YaRN" not in ok.stderr, ok.output
    result = invoke("generate", tiny_ckpt, "hi", *FAST, "--max-new-tokens", "1", "--ctx", "41k")
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if "YaRN" in line]
    assert len(notes) == 1 and notes[0].startswith("note:") and "40,960" in notes[0]
    assert "factor 1.5 over 32,768" in notes[0] and "warning" not in result.stderr


@pytest.mark.parametrize("ctx", ["3000000", "99999999999k", "131073"])
def test_ctx_beyond_the_checkpoint_is_bad_input_naming_the_largest(tiny_ckpt, ctx):
    result = invoke("generate", tiny_ckpt, "hi", "--device", "cpu", "--ctx", ctx)
    assert_one_line_error(result, 2, "beyond the largest context", "131,072")


def test_prompt_filling_the_context_leaves_no_room(tiny_ckpt, tok):
    n = len(tok.chat_ids([{"role": "user", "content": "hi"}], enable_thinking=False))
    result = invoke("generate", tiny_ckpt, "hi", "--device", "cpu", "--ctx", n,
                    "--max-new-tokens", "0")
    assert_one_line_error(result, 2, f"the prompt is {n:,} tokens, which leaves no room for a "
                          f"reply in the context of {n} tokens", f"--ctx {-(-(n + 1) // 1024)}k")


def test_no_limit_reply_fills_the_context_and_no_more(tiny_ckpt, tok):
    """One rule: prompt + reply <= ctx, with --max-new-tokens 0 as with a budget (64 is refused
    for a 1-token prompt at --ctx 64, so no limit must not give 64 either)."""
    flags = ["--raw", "--ctx", "64", "--page-size", "16", "--device", "cpu", "--seed", "0",
             "--temperature", "1", "--top-k", "0", "--top-p", "1", "--json"]
    assert len(tok.encode("Hello")) == 1
    refused = invoke("generate", tiny_ckpt, "Hello", *flags, "--max-new-tokens", "64")
    assert refused.exit_code == 2 and "65 tokens" in json.loads(refused.stdout)["error"]
    budget = ok_json(invoke("generate", tiny_ckpt, "Hello", *flags, "--max-new-tokens", "63"))
    assert budget["new_tokens"] <= 63
    free = ok_json(invoke("generate", tiny_ckpt, "Hello", *flags, "--max-new-tokens", "0"))
    assert free["prompt_tokens"] + free["new_tokens"] <= 64, free["new_tokens"]
    assert free["stop_reason"] in ("context", "stop")


def test_check_fits_past_the_largest_context():
    from infer.fits import check_fits

    top = 131072  # Qwen3's largest context (YaRN factor 4 over 32768): models/context.py
    check_fits(top - 1, top, max_ctx=top)  # fits: no error
    with pytest.raises(ValueError) as info:  # war_and_peace.txt at 32k, with --no-split
        check_fits(774_000, 32768, 1024, max_ctx=top)
    msg = str(info.value)
    assert "774,000 tokens" in msg and f"largest context this model supports ({top:,}" in msg
    assert "shorten" in msg and "--ctx" not in msg
    with pytest.raises(ValueError) as info:  # the prompt fits alone, not with the reply
        check_fits(top - 100, 32768, 1000, max_ctx=top)
    msg = str(info.value)  # --ctx 32768 holds not even the prompt: it must grow too
    assert "largest context" in msg
    assert "raise --ctx (up to 128k) and lower --max-new-tokens to at most 100" in msg
    with pytest.raises(ValueError) as info:  # a huge reply budget at a small --ctx
        check_fits(3, 1024, 10**20, max_ctx=top)
    msg = str(info.value)  # the budget that works at this --ctx, and at the model's largest
    assert "lower --max-new-tokens to at most 1,021 (at --ctx 1,024; up to 131,069 with --ctx " \
        "128k)" in msg and "shorten" not in msg
    with pytest.raises(ValueError) as info:  # within the model's reach: suggest a --ctx
        check_fits(100_000, 32768, max_ctx=top)
    assert f"--ctx {-(-100_001 // 1024)}k" in str(info.value)
    with pytest.raises(ValueError, match="supports \\(262,144 tokens\\)"):  # Qwen3-4B-2507
        check_fits(300_000, 262144, max_ctx=262144)


def test_chat_refuses_a_reply_budget_no_turn_fits_as_generate_does(tiny_ckpt, tok):
    """--max-new-tokens past the context: chat refuses it at start-up (exit 2, one line, before
    any turn), with generate's wording for the shortest prompt a turn can have."""
    n = len(tok.chat_ids([{"role": "user", "content": ""}], enable_thinking=True)) + 1
    result = invoke("chat", tiny_ckpt, "--ctx", "1k", "--device", "cpu", "--max-new-tokens",
                    "2000", input="hi\n")
    assert_one_line_error(result, 2, f"even with a one-token message the prompt is {n:,} tokens "
                          "and the reply up to 2,000 (--max-new-tokens)",
                          "raise --ctx (e.g. --ctx 2k)")
    generate = invoke("generate", tiny_ckpt, "hi", "--ctx", "1k", "--device", "cpu",
                      "--max-new-tokens", "2000")
    assert generate.exit_code == 2
    assert "more than the context of 1,024 tokens" in generate.stderr
    assert "more than the context of 1,024 tokens" in result.stderr
    ok = invoke("chat", tiny_ckpt, "--ctx", "1k", "--device", "cpu", "--max-new-tokens", "2",
                input="hi\n")
    assert ok.exit_code == 0 and "error" not in ok.stderr, ok.output


def test_chat_reply_budget_boundary_is_the_shortest_sendable_message(tok):
    """The shortest message a chat turn can send is one token ("a"; empty lines are skipped):
    a budget that fits beside it passes, one more token is refused."""
    from infer.ui.repl import check_reply_budget

    n = len(tok.chat_ids([{"role": "user", "content": "a"}], enable_thinking=True))
    assert n == len(tok.chat_ids([{"role": "user", "content": ""}], enable_thinking=True)) + 1
    check_reply_budget(tok, None, 256, 256 - n, think=True, max_ctx=40960)
    with pytest.raises(ValueError, match="one-token message"):
        check_reply_budget(tok, None, 256, 256 - n + 1, think=True, max_ctx=40960)


def test_check_fits_says_1_token_not_1_tokens():
    from infer.fits import check_fits

    with pytest.raises(ValueError) as info:  # generate --raw Hello --ctx 64 --max-new-tokens 64
        check_fits(1, 64, 64, max_ctx=131072)
    assert str(info.value).startswith("the prompt is 1 token and the reply up to 64")
    with pytest.raises(ValueError) as info:
        check_fits(1, 1, max_ctx=131072)
    assert "the prompt is 1 token, which leaves no room for a reply in the context of 1 token:" \
        in str(info.value)
    with pytest.raises(ValueError) as info:  # generate a --raw --ctx 1 --max-new-tokens 1
        check_fits(1, 1, 1, max_ctx=131072)
    assert "which leaves no room for a reply in the context of 1 token:" in str(info.value)
    with pytest.raises(ValueError, match="the prompt is 2,000 tokens, longer than the context of "
                                         "1,024 tokens"):
        check_fits(2000, 1024, max_ctx=131072)


def test_check_fits_offers_a_lower_max_new_tokens_only_when_it_helps():
    """A prompt as long as the context or longer fits with no --max-new-tokens: the message
    said "or lower --max-new-tokens" all the same; now only when the prompt leaves room."""
    from infer.fits import check_fits

    for n_prompt, need in ((2048, 3), (7416, 8)):  # generate "$(cat README.md)" --ctx 2k
        with pytest.raises(ValueError) as info:
            check_fits(n_prompt, 2048, 512, max_ctx=131072)
        assert str(info.value).endswith(f": raise --ctx (e.g. --ctx {need}k) or shorten the "
                                        "input")
        assert "max-new-tokens" not in str(info.value)
    with pytest.raises(ValueError) as info:
        check_fits(2000, 2048, 512, max_ctx=131072)
    assert str(info.value).endswith("raise --ctx (e.g. --ctx 3k) or lower --max-new-tokens to "
                                    "at most 48")


def test_generate_prompt_longer_than_the_context_offers_no_lower_budget(tiny_ckpt):
    result = invoke("generate", tiny_ckpt, "word " * 1500, "--device", "cpu", "--ctx", "1k",
                    "--max-new-tokens", "16")
    assert_one_line_error(result, 2, "longer than the context of 1,024 tokens: raise --ctx "
                          "(e.g. --ctx 2k) or shorten the input")
    assert "max-new-tokens" not in result.stderr



def test_check_fits_offers_to_shorten_the_input_only_when_it_helps():
    """A one-token prompt (or one whose chat template alone fills the context, or whose reply
    budget would not fit beside a one-token input) was told to shorten the input all the same."""
    from infer.fits import check_fits

    for n_prompt, ctx, max_new, fixed, shorten in (
            (1, 1, 0, 0, False),  # one token: nothing to shorten
            (2, 2, 5, 0, False),  # a one-token input and its 5-token reply need 6
            (15, 8, 1, 12, False),  # the template alone (12) fills the context
            (15, 14, 1, 12, True), (3, 2, 0, 0, True)):  # a shorter input fits
        with pytest.raises(ValueError) as info:
            check_fits(n_prompt, ctx, max_new, max_ctx=131072, fixed=fixed)
        msg = str(info.value)
        assert msg.endswith(": raise --ctx (e.g. --ctx 1k)" + " or shorten the input" * shorten)


@pytest.mark.parametrize("argv", [["generate", "{ckpt}", "a", "--raw", "--ctx", "1"],
                                  ["generate", "{ckpt}", "hello there friend", "--ctx", "8"],
                                  ["chat", "{ckpt}", "--system", "be brief", "--ctx", "12"]],
                         ids=["one-token", "template", "chat-one-token-message"])
def test_a_prompt_that_cannot_be_shortened_is_not_told_to_shorten(tiny_ckpt, argv):
    argv = [a.replace("{ckpt}", str(tiny_ckpt)) for a in argv]
    result = invoke(*argv, "--device", "cpu", "--max-new-tokens", "1", input="hi\n")
    assert_one_line_error(result, 2, "the context of ")
    assert result.stderr.rstrip().endswith(": raise --ctx (e.g. --ctx 1k)"), result.stderr


CHAT_DOES_NOT_FIT = re.compile(
    r"the message does not fit: it is (\d+) tokens and its reply up to 100 \(--max-new-tokens\), "
    r"(\d+) in all, but (\d+) of the context's 512 are left \((\d+) hold (.+?)\): (.*)$")


def test_chat_message_that_does_not_fit_beside_the_conversation_is_refused(tiny_ckpt, tok):
    """A message that fits the context with one reply token but not with its --max-new-tokens
    was taken, its reply cut short by the full context (stop "context"), and every later message
    refused; now the turn is refused up front with the counts (the message, its reply, what is
    left), and the chat goes on: the next, shorter message is answered in full."""
    too_long, long = "word " * 600, "word " * 330  # 601 and 331 tokens
    flags = ["--ctx", "512", "--device", "cpu", "--max-new-tokens", "100", "--no-think",
             "--temperature", "1", "--seed", "0", "--presence-penalty", "2", "--json"]
    result = invoke("chat", tiny_ckpt, *flags, input=f"{too_long}\nhi\n{long}\nok\n")
    assert result.exit_code == 2, result.output  # piped: a turn failed on bad input
    assert "Traceback" not in result.output
    first, reply, second, last = (json.loads(line) for line in result.stdout.splitlines())
    errors = [ln.removeprefix("> ") for ln in result.stderr.splitlines() if "error:" in ln]
    assert errors == [f"error: {first['error']}", f"error: {second['error']}"]
    assert first["turn"] == 1 and second["turn"] == 3
    # alone, beside the chat template: no conversation to /reset
    msg, total, left, fixed, held, fixes = CHAT_DOES_NOT_FIT.match(first["error"]).groups()
    # the message alone is longer than the context: a lower --max-new-tokens cannot help
    assert (held, fixes) == ("the chat template", "send a shorter message, or restart with a "
                             "larger --ctx")
    empty = len(tok.chat_ids([{"role": "user", "content": ""}], enable_thinking=False))
    assert int(fixed) == empty and int(left) == 512 - empty
    assert int(msg) == len(tok.chat_ids([{"role": "user", "content": too_long}],
                                        enable_thinking=False)) - empty
    assert int(total) == int(msg) + 100
    # beside the conversation: it fits with one reply token (the old check), not with 100
    assert reply["stop_reason"] == "length" and reply["new_tokens"] == 100
    msg, total, left, fixed, held, fixes = map(
        lambda g: int(g) if g.isdigit() else g, CHAT_DOES_NOT_FIT.match(second["error"]).groups())
    assert held == "the conversation so far" and fixed > reply["prompt_tokens"] + 100
    assert fixes == ("send a shorter message, /reset, or restart with a larger --ctx or a "
                     "lower --max-new-tokens")
    assert left == 512 - fixed and total == msg + 100 > left and fixed + msg + 1 <= 512
    # the refused message was dropped, nothing of it prefilled: "ok" is answered in full
    assert last["stop_reason"] == "length" and last["new_tokens"] == 100
    assert last["reused_tokens"] > 0 and last["prompt_tokens"] < fixed + 10


def test_chat_turn_check_without_a_reply_budget_or_a_larger_context(tok):
    """--max-new-tokens 0 (no limit) needs room for one reply token; at the model's largest
    context a larger --ctx is not offered."""
    from infer.ui.conversation import Conversation
    from infer.ui.repl import check_turn

    conv = Conversation(tok, "Be brief.", enable_thinking=True)
    ids = conv.add_user("word " * 50)
    check_turn(conv, ids, len(ids) + 1, 0, max_ctx=40960)  # one reply token fits: no error
    with pytest.raises(ValueError) as info:
        check_turn(conv, ids, len(ids), 0, max_ctx=len(ids))
    fixed = conv.fixed_tokens()
    assert str(info.value) == (f"the message does not fit: it is {len(ids) - fixed} tokens and "
                               f"its reply at least 1, {len(ids) - fixed + 1} in all, but "
                               f"{len(ids) - fixed} of the context's {len(ids)} are left ({fixed} "
                               "hold the system prompt and the chat template): send a shorter "
                               "message")


def test_chat_after_a_reply_filled_the_context_says_the_conversation_is_longer(tiny_ckpt):
    """A reply cut by the full context, rendered again for the next turn (re-encoded, its turn
    closed, the next one opened), takes more than the context: the refusal said "0 of the
    context's 64 are left (78 hold the conversation so far)"; it says the conversation is longer
    than the context, and offers no lower --max-new-tokens."""
    result = invoke("chat", tiny_ckpt, "--device", "cpu", "--ctx", "64", "--max-new-tokens", "0",
                    "--temperature", "1", "--seed", "0", input="hi\nhi\n")
    assert result.exit_code == 2, result.output
    errors = [ln.removeprefix("> ") for ln in result.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1
    m = re.search(r"but the conversation so far already takes ([\d,]+) tokens as the chat "
                  r"template renders it, more than the context's 64: /reset, or restart with a "
                  r"larger --ctx$", errors[0])
    assert m and int(m.group(1).replace(",", "")) > 64, errors[0]


def test_chat_lower_max_new_tokens_offered_only_when_it_helps(tok):
    from infer.ui.conversation import Conversation
    from infer.ui.repl import check_turn

    conv = Conversation(tok, None, enable_thinking=False)
    ids = conv.add_user("word " * 50)
    with pytest.raises(ValueError, match=r"larger --ctx or a lower --max-new-tokens$"):
        check_turn(conv, ids, len(ids) + 5, 10, max_ctx=40960)  # fits with 5 reply tokens
    with pytest.raises(ValueError, match=r"restart with a larger --ctx$"):
        check_turn(conv, ids, len(ids), 10, max_ctx=40960)  # no budget fits
