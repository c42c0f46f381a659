"""``strip_thinking`` (``infer/thinking.py``): the answer of a reply is what follows its leading
thinking block; no other text is dropped (it kept only the text after the last ``</think>``, so
a stray tag late in a reply dropped the answer before it)."""

from __future__ import annotations

import pytest

from infer.stats import GenerationStats
from infer.summarize import Summarizer
from infer.thinking import strip_thinking, thinking_unfinished


@pytest.mark.parametrize("reply,answer", [
    pytest.param(" plain ", "plain", id="no-tags"),
    pytest.param("\n<think>\nhmm\n</think>\n\nThe summary.", "The summary.", id="leading-block"),
    pytest.param("<think>\n</think>\n\nThe summary.", "The summary.", id="empty-block"),
    pytest.param("hmm, the text is\n</think>\n\nThe summary.", "The summary.",
                 id="prompt-opened-block"),
    pytest.param("</think>The summary.", "The summary.", id="prompt-opened-empty-block"),
    pytest.param("hmm</think>The summary. Use </think> to close.",
                 "The summary. Use </think> to close.", id="prompt-opened-then-stray-close"),
    pytest.param("hmm</think>The summary: <think>x</think> y", "The summary: <think>x</think> y",
                 id="prompt-opened-then-a-block"),
    pytest.param("<think>hmm</think>The summary. A stray </think> tag, more.",
                 "The summary. A stray </think> tag, more.", id="stray-close-after-block"),
    pytest.param("The summary. <think>more</think> The end.",
                 "The summary. <think>more</think> The end.", id="block-after-visible-text"),
    pytest.param("<think>a <think> b</think>The summary.", "The summary.",
                 id="block-ends-at-its-first-close"),
    pytest.param("<think>cut while thinking", "<think>cut while thinking", id="never-closed"),
])
def test_only_a_leading_thinking_block_is_dropped(reply, answer):
    assert strip_thinking(reply) == answer


@pytest.mark.parametrize("reply, cut", [
    pytest.param("<think>still thinking", True, id="never-closed"),
    pytest.param("\n <think>", True, id="only-the-tag"),
    pytest.param("<think>done</think>answer", False, id="closed"),
    pytest.param("answer <think>aside", False, id="after-text"),
    pytest.param("", False, id="empty"),
])
def test_a_reply_cut_inside_its_thinking(reply, cut):
    assert thinking_unfinished(reply) is cut


class _Decoder:
    def __init__(self, text: str):
        self.text = text

    def decode(self, ids, skip_special_tokens=True) -> str:
        return self.text


@pytest.mark.parametrize("reply, summary, cut", [
    ("<think>Hmm, the part is about", "", True),
    ("<think>Hmm</think>\n\nThe part is about tea.", "The part is about tea.", False),
])
def test_a_part_cut_inside_its_thinking_passes_nothing_on(reply, summary, cut):
    """A part's reply that ran out of tokens inside ``<think>`` is no summary: the combining
    prompt gets an empty one and the part says why (it passed the raw thinking on)."""
    sm = Summarizer(engine=None, tokenizer=_Decoder(reply), split=None, sampling=None)
    out, seen = [None], []
    stats = GenerationStats(prompt_tokens=5, new_tokens=7, stop_reason="length")
    sm._done(0, 0, 1, [((0, 10), (0, 3))], [[1, 2, 3, 4, 5]], [9] * 7, stats, out, seen.append)
    assert out == [summary] and seen == sm.parts
    assert sm.parts[0].summary == summary and sm.parts[0].thinking_unfinished is cut
    assert sm.parts[0].to_dict()["thinking_unfinished"] is cut


def test_a_reply_whose_prompt_opened_the_thinking():
    """A template that ends the prompt in "<think>\\n" (Qwen3's Thinking-2507): the reply holds
    only the block's end; its split and its "cut inside" check start inside the block."""
    from infer.thinking import prompt_opens_thinking
    from infer.ui.render import ThinkSplitter

    class Tail:
        def __init__(self, text):
            self.text = text

        def decode(self, ids, skip_special_tokens=False):
            assert not skip_special_tokens and len(ids) <= 8
            return self.text

    assert prompt_opens_thinking(Tail("<|im_start|>assistant\n<think>\n"), list(range(20)))
    assert not prompt_opens_thinking(Tail("assistant\n<think>\n\n</think>\n\n"), [1, 2])
    assert not prompt_opens_thinking(Tail("<|im_start|>assistant\n"), [1])
    split = ThinkSplitter(thinking=True)
    assert split.push("Hmm</thi") + split.push("nk>Hello") + split.flush() == [
        (True, "Hmm"), (False, "Hello")]
    assert thinking_unfinished("Hmm, still", opened=True)
    assert not thinking_unfinished("Hmm</think>Hello", opened=True)
