"""``strip_thinking`` (``infer/thinking.py``): the answer of a reply is what follows its leading
thinking block; no other text is dropped (it kept only the text after the last ``</think>``, so
a stray tag late in a reply dropped the answer before it)."""

from __future__ import annotations

import pytest

from infer.thinking import strip_thinking


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
