"""Thinking in replies (``infer/thinking.py``, ``infer/ui/summary_view.py``, ``ReplyView``) through
the CLI, on checkpoints whose greedy reply is scripted (``ckpt_helpers.scripted_ckpt``): part
replies that are only thinking pass nothing into the final summary and are warned about, a reply
that spends its tokens on thinking says so, and a template that opens the thinking in the prompt
(Qwen3's Thinking-2507) splits the reply as one that writes ``<think>`` itself."""

from __future__ import annotations

import json

import pytest
from ckpt_helpers import scripted_ckpt
from cli_helpers import invoke


def _thinking_model(tiny_ckpt, tok, folder, reply: str):
    """A checkpoint whose greedy reply after the prompt's last newline is ``reply``:
    ``ok`` "<think>Hmm</think>Hello", ``forever`` "<think>HmmHmm..." (never closed), ``stops``
    "<think>Hmm" then <|im_end|> (the model ends inside its thinking)."""
    newline, hmm, hello = (tok.encode(t)[0] for t in ("\n", "Hmm", "Hello"))
    think, unthink, end = (tok._tok.token_to_id(t) for t in ("<think>", "</think>", "<|im_end|>"))
    chain = {"ok": {newline: think, think: hmm, hmm: unthink, unthink: hello, hello: end},
             "forever": {newline: think, think: hmm, hmm: hmm},
             "stops": {newline: think, think: hmm, hmm: end}}[reply]
    return scripted_ckpt(tiny_ckpt, folder, chain)


@pytest.mark.parametrize("part_tokens, unfinished", [(2, True), (3, False)])
def test_parts_that_are_only_thinking_pass_nothing_on(tiny_ckpt, tok, book, tmp_path,
                                                      part_tokens, unfinished):
    """With --think and too few tokens a part, a part's reply is only thinking, cut inside it
    (2 tokens: "<think>Hmm") or closed at the last token (3: "<think>Hmm</think>"): its summary
    is empty (the raw ``<think>...`` went into the combining prompt), and a warning says so."""
    model = _thinking_model(tiny_ckpt, tok, tmp_path / "scripted", "ok")
    path, _ = book
    result = invoke("summarize", path, "--model", model, "--ctx", "2k", "--device", "cpu",
                    "--part-tokens", part_tokens, "--max-new-tokens", "8", "--think", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    parts = [p for p in out["parts"] if p["level"] == 0]
    assert len(parts) >= 2
    assert all(p["thinking_unfinished"] is unfinished and p["summary"] == "" for p in parts)
    assert (out["text"], out["thinking"]) == ("Hello", "Hmm")  # the final reply had room
    assert (f"warning: {len(parts)} part replies of {len(out['parts'])} gave no summary, their "
            f"--part-tokens ({part_tokens}) spent on thinking: nothing of them is in the final "
            "summary; raise --part-tokens, or leave out --think") in result.stderr


def test_parts_the_model_ended_inside_their_thinking_blame_no_budget(tiny_ckpt, tok, book,
                                                                    tmp_path):
    model = _thinking_model(tiny_ckpt, tok, tmp_path / "scripted", "stops")
    path, _ = book
    result = invoke("summarize", path, "--model", model, "--ctx", "2k", "--device", "cpu",
                    "--part-tokens", "3", "--max-new-tokens", "8", "--think")
    assert result.exit_code == 0, result.output
    assert "gave no summary, only thinking: nothing of them is in the final summary; leave " \
           "out --think" in result.stderr
    assert "the reply holds only thinking: the model ended it without an answer" in result.stderr
    assert "--part-tokens (" not in result.stderr


@pytest.mark.parametrize("command", ["generate", "summarize", "chat"])
def test_a_reply_that_spends_its_tokens_on_thinking_says_so(tiny_ckpt, tok, tmp_path, command):
    """A reply cut inside its thinking had an empty answer and no word of why."""
    model = _thinking_model(tiny_ckpt, tok, tmp_path / "scripted", "forever")
    text = tmp_path / "short.txt"
    text.write_text("The cat sat on the mat.\n", encoding="utf-8")
    where = {"generate": ["generate", model, "hi"], "chat": ["chat", model],
             "summarize": ["summarize", text, "--model", model]}[command]
    args = [*where, "--ctx", "1k", "--device", "cpu", "--max-new-tokens", "4", "--think",
            "--json"]
    result = invoke(*args, input="hi\n")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["text"], out["thinking"], out["stop_reason"]) == ("", "HmmHmmHmm", "length")
    assert ("warning: the reply spent its --max-new-tokens on thinking and has no answer: raise "
            "--max-new-tokens, or leave out --think") in result.stderr


def _opened_thinking_model(tiny_ckpt, tok, folder):
    """A checkpoint whose chat template opens the reply's thinking (the prompt ends in
    "<think>\\n", as Qwen3's Thinking-2507 templates do) and whose greedy reply is
    "Hmm</think>Hello"."""
    newline, hmm, hello = (tok.encode(t)[0] for t in ("\n", "Hmm", "Hello"))
    unthink, end = (tok._tok.token_to_id(t) for t in ("</think>", "<|im_end|>"))
    model = scripted_ckpt(tiny_ckpt, folder,
                          {newline: hmm, hmm: unthink, unthink: hello, hello: end})
    qwen3 = json.loads((tiny_ckpt / "tokenizer_config.json").read_text())["chat_template"]
    # the generation prompt opens <think>, whatever enable_thinking (as the 2507 templates do)
    opening = qwen3.replace("{{- '<|im_start|>assistant\\n' }}",
                            "{{- '<|im_start|>assistant\\n<think>\\n' }}")
    opened = opening.replace("{{- '<think>\\n\\n</think>\\n\\n' }}", "")
    assert qwen3 != opening != opened
    (model / "chat_template.jinja").write_text(opened, encoding="utf-8")
    return model


def test_a_template_that_opens_the_thinking_splits_the_reply_too(tiny_ckpt, tok, tmp_path):
    """The reply holds only the block's end ("Hmm</think>Hello"): its text was all of it and
    its thinking null."""
    model = _opened_thinking_model(tiny_ckpt, tok, tmp_path / "opened")
    result = invoke("generate", model, "hi", "--ctx", "1k", "--device", "cpu",
                    "--max-new-tokens", "8", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert (out["text"], out["thinking"]) == ("Hello", "Hmm")
    shown = invoke("generate", model, "hi", "--ctx", "1k", "--device", "cpu",
                   "--max-new-tokens", "8", "--hide-thinking")
    assert shown.exit_code == 0 and shown.stdout.strip() == "Hello"


def test_parts_whose_template_opened_the_thinking_are_cut_inside_it(tiny_ckpt, tok, book,
                                                                   tmp_path):
    model = _opened_thinking_model(tiny_ckpt, tok, tmp_path / "opened")
    path, _ = book
    result = invoke("summarize", path, "--model", model, "--ctx", "2k", "--device", "cpu",
                    "--part-tokens", "1", "--max-new-tokens", "8", "--json")
    assert result.exit_code == 0, result.output
    parts = [p for p in json.loads(result.stdout)["parts"] if p["level"] == 0]
    assert all(p["thinking_unfinished"] and p["summary"] == "" for p in parts)  # "Hmm" only
