"""Incremental detokenizing of one generated sequence: ``StreamDecoder``, built by
``Qwen3Tokenizer.stream_decoder`` (``models/tokenizer.py``). It decodes a small window of recent
ids and emits the new text only when it does not end in U+FFFD (an incomplete UTF-8 character).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from models.tokenizer import Qwen3Tokenizer


class StreamDecoder:
    """Incremental detokenizer: ``push(id)`` returns the text that id completes, ``flush()`` the
    rest. The concatenated output equals ``tokenizer.decode(all ids)``; a character split across
    tokens (emoji, CJK) is held back until its last byte arrives, so no U+FFFD is emitted for it.

    Source: the prefix_offset/read_offset scheme of HF text-generation-inference and vLLM
    (``detokenize_incrementally``): only the window ``ids[prefix_offset:]`` is decoded per step.
    """

    def __init__(self, tokenizer: Qwen3Tokenizer, skip_special_tokens: bool = False):
        self._tok = tokenizer
        self._skip = skip_special_tokens
        self._ids: list[int] = []
        self._prefix_offset = 0  # start of the window: a character boundary
        self._read_offset = 0  # ids before this are emitted

    def push(self, token_id: int) -> str:
        """Add one id; return the newly completed text ('' while a character is unfinished).
        Raises ValueError for an id outside the vocabulary."""
        self._ids.append(int(token_id))
        return self._advance(final=False)

    def flush(self) -> str:
        """Return the held-back text (U+FFFD only if the sequence ends inside a character)."""
        return self._advance(final=True)

    def _advance(self, final: bool) -> str:
        ids = self._ids
        prefix = self._tok.decode(ids[self._prefix_offset:self._read_offset], self._skip)
        text = self._tok.decode(ids[self._prefix_offset:], self._skip)
        if len(text) > len(prefix) and (final or not text.endswith("\ufffd")):
            self._prefix_offset, self._read_offset = self._read_offset, len(ids)
            return text[len(prefix):]
        return ""
