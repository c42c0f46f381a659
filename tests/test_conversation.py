"""infer/ui/conversation.py: each turn's prompt ids, and the tokens an interrupted reply pins."""

from __future__ import annotations

import pytest

from infer.ui.conversation import Conversation


@pytest.fixture(scope="module")
def tok(tokenizer_dir):
    from models.tokenizer import Qwen3Tokenizer

    return Qwen3Tokenizer.from_folder(tokenizer_dir)


def test_turns_are_the_template_of_the_messages(tok):
    conv = Conversation(tok, "Be brief.", enable_thinking=False)
    ids = conv.add_user("hello")
    assert ids == tok.chat_ids(conv.messages, enable_thinking=False)
    conv.add_reply("Hi there.", ids, ids + tok.encode("Hi there."), interrupted=False)
    again = conv.add_user("again")
    assert again == tok.chat_ids(conv.messages, enable_thinking=False)


def test_an_interrupted_reply_is_pinned_as_written(tok):
    conv = Conversation(tok, None, enable_thinking=True)
    ids = conv.add_user("hello")
    partial = [tok.added_tokens["<think>"], *tok.encode("\nLet me thi")]  # as the model wrote it
    conv.add_reply(tok.decode(partial), ids, ids + partial, interrupted=True)
    nxt = conv.add_user("go on")
    assert nxt[:len(ids) + len(partial)] == ids + partial
    assert tok.decode(nxt[len(ids) + len(partial):]) == (
        "<|im_end|>\n<|im_start|>user\ngo on<|im_end|>\n<|im_start|>assistant\n")
    conv.add_reply("Sure.", nxt, nxt + tok.encode("Sure."), interrupted=False)
    third = conv.add_user("thanks")
    assert third[:len(nxt)] == nxt  # the pin holds; the template renders from "go on" on
    assert third == conv._pinned + tok.chat_ids(conv.messages[2:])
    conv.reset()
    assert conv.add_user("hello") == ids


def test_a_reply_interrupted_in_prefill_pins_nothing(tok):
    conv = Conversation(tok, None, enable_thinking=False)
    ids = conv.add_user("hello")
    conv.add_reply("", ids, ids[:3], interrupted=True)  # Ctrl-C during prefill
    assert conv.add_user("again") == tok.chat_ids(conv.messages, enable_thinking=False)


def test_drop_user_takes_back_a_failed_turn(tok):
    conv = Conversation(tok, None, enable_thinking=False)
    conv.add_user("hello")
    conv.drop_user()
    assert conv.messages == []


def test_fixed_tokens_are_the_prompt_without_the_message(tok):
    """``fixed_tokens``: the prompt's tokens apart from the message's own (the chat's turn check
    counts the message as the rest), the pinned tokens of an interrupted reply included."""
    conv = Conversation(tok, "Be brief.", enable_thinking=False)
    words = " ".join(["word"] * 20)  # 20 tokens
    ids = conv.add_user(words)
    alone = tok.chat_ids([{"role": "system", "content": "Be brief."},
                          {"role": "user", "content": ""}], enable_thinking=False)
    assert conv.fixed_tokens() == len(alone) and len(ids) - len(alone) == 20
    assert not conv.has_history
    partial = tok.encode("Half a rep")
    conv.add_reply("Half a rep", ids, ids + partial, interrupted=True)  # pins ids + partial
    nxt = conv.add_user(words)
    assert conv.has_history and nxt[:len(ids) + len(partial)] == ids + partial
    assert len(nxt) - conv.fixed_tokens() == 20
    conv.drop_user()
    conv.reset()
    conv.add_user("hi")
    assert not conv.has_history and conv.fixed_tokens() == len(alone)
