"""The thinking text of a Qwen3 reply: ``strip_thinking`` keeps the answer after a leading
``<think>...</think>`` block, ``thinking_unfinished`` tells a reply cut inside that block,
``prompt_opens_thinking`` a prompt that opened the block for the reply. The
tags are plain text here (a decoded reply), as the model wrote them; the streaming split of a
reply shown live is ``infer/ui/render.py``'s ``ThinkSplitter``."""

from __future__ import annotations

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"


def strip_thinking(text: str) -> str:
    """The answer of a reply: ``text`` without its leading thinking block, whitespace stripped.

    The leading thinking block ends at the first ``</think>`` and is either

    - written out: the text starts (after whitespace) with ``<think>``; or
    - opened by the prompt (a thinking template may end the prompt with ``<think>\\n``, so the
      reply starts inside the block and holds only its closing tag): no ``<think>`` comes before
      the first ``</think>``.

    Only that block is dropped. Any other tag stays in the answer as written: a stray
    ``</think>`` after the block closed, or a ``<think>...</think>`` after visible text (the text
    before it is answer, not thinking). A text without a ``</think>`` is returned whole, a
    ``<think>`` never closed included (a reply cut while thinking has no answer apart from it).
    """
    body = text.lstrip()
    end = body.find(THINK_CLOSE)
    if end >= 0 and (body.startswith(THINK_OPEN) or THINK_OPEN not in body[:end]):
        body = body[end + len(THINK_CLOSE):]
    return body.strip()


def thinking_unfinished(text: str, opened: bool = False) -> bool:
    """Whether the reply ``text`` is inside a thinking block at its end, so it holds no answer:
    it opens one (``<think>`` after leading whitespace), or its prompt did (``opened``), and no
    ``</think>`` closes it (cut by its token limit while thinking, or ended there)."""
    body = text.lstrip()
    return (opened or body.startswith(THINK_OPEN)) and THINK_CLOSE not in body


def prompt_opens_thinking(tokenizer, prompt_ids: list[int]) -> bool:
    """Whether the prompt ``prompt_ids`` ends inside an open ``<think>`` (a template that starts
    the reply's thinking itself, as Qwen3's Thinking-2507 models' does): the reply then holds
    only the block's end, ``...</think>answer``. ``tokenizer``: ``decode(ids,
    skip_special_tokens)``; the prompt's last 8 tokens are read."""
    tail = tokenizer.decode(prompt_ids[-8:], skip_special_tokens=False).rstrip()
    return tail.endswith(THINK_OPEN)
