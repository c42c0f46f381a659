"""Qwen3 tokenizer: byte-level BPE from ``tokenizer.json``, chat ids, stop ids, streaming.

Design:

- One ``tokenizers.Tokenizer`` does all the BPE work. Every added token (the 26 ids 151643-151668,
  ``<|im_start|>`` ... ``</think>``) is re-registered as special and ``encode_special_tokens`` is
  switched on, so the Rust encoder never matches an added token: ``encode`` is plain text, always.
  Control tokens are produced only by ``_encode_control``, which splits text at added-token strings
  itself (longest first, as the tokenizers library does) and encodes the pieces in between as plain
  text, so its ids equal ``tokenizer.encode(text, add_special_tokens=False)``.
- The chat template (rendering as transformers does, and the pieces of a rendered chat that are
  plain text: added-token strings that stood in the messages) is ``models/chat_template.py``'s
  ``ChatTemplate``; ``chat_ids`` encodes its pieces, plain text or with control tokens.
- Streaming (``stream_decoder``) is ``models/stream_decoder.py``'s ``StreamDecoder``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tokenizers import AddedToken, Tokenizer

from models.chat_template import ChatTemplate, token_str
from models.config_values import optional_file, optional_json_object, read_text, shown
from models.stream_decoder import StreamDecoder


def _tokenizer_json_error(text: str, error: Exception) -> str:
    """Why ``tokenizers`` refused tokenizer.json's ``text``, worded for the user: its own error
    comes from the parse of the file's struct, so valid JSON of another shape reads as a syntax
    error ("expected `,` or `}` at line 1 column 5")."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as e:
        return f"not valid JSON ({e})"
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        return ("valid JSON but not a Hugging Face tokenizers file (no 'model' object): save "
                "the tokenizer with transformers' save_pretrained to write tokenizer.json")
    return str(error)


def _eos_ids(generation_config: dict, path: Path, vocab_limit: int) -> list[int]:
    """The ``eos_token_id`` of a generation_config.json (an id or a non-empty list of ids, each
    in [0, ``vocab_limit``)); ``[]`` when it is absent or null.

    NOTE: an empty list is refused, not read as "no stop token" (transformers' reading): a reply
    still ends at the tokenizer's own stop tokens (``<|im_end|>``, ``<|endoftext|>``), so it would
    change nothing while looking as if it did. An id outside the vocabulary could never be
    sampled, so it would never stop a reply.

    Raises:
        ValueError: any other value (the message names ``path`` and says how to fix it).
    """
    eos = generation_config.get("eos_token_id")
    eos = [] if eos is None else [eos] if isinstance(eos, int) else eos
    if not isinstance(eos, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                            for i in eos):
        raise ValueError(f"cannot read {path}: eos_token_id must be an integer or a list of "
                         f"integers, got {shown(eos)}")
    if generation_config.get("eos_token_id") == []:
        raise ValueError(f"cannot read {path}: eos_token_id is an empty list, but a reply still "
                         f"ends at the tokenizer's own stop tokens (<|im_end|>, <|endoftext|>): "
                         f"remove the field or set it to null")
    bad = [i for i in eos if not 0 <= i < vocab_limit]
    if bad:
        raise ValueError(f"cannot read {path}: eos_token_id {shown(bad[0])} is outside the "
                         f"tokenizer's vocabulary (ids 0 to {vocab_limit - 1:,}), so it could "
                         f"never end a reply")
    return eos


class Qwen3Tokenizer:
    """Tokenizer + chat template of a Qwen3 checkpoint folder. Build it with ``from_folder``.

    Attributes:
        stop_ids: set[int], ids that end generation: ``eos_token_id`` of generation_config.json
            (int or non-empty list of ids in the vocabulary: ``_eos_ids``; the file is
            optional), ``<|im_end|>``, tokenizer_config's ``eos_token`` and ``<|endoftext|>``
            (the document end every Qwen3 generation_config lists).
        vocab_limit: int, number of ids the tokenizer defines (151669 for Qwen3). The model's
            embedding is padded to 151936; ids >= vocab_limit must never be sampled.
        added_tokens: dict[str, int], every added token (``<think>``, ``<|im_end|>``, ...) -> id.
    """

    def __init__(self, tokenizer: Tokenizer, config: dict, chat_template: str | None,
                 generation_eos: list[int], folder: Path | None = None):
        decoder = tokenizer.get_added_tokens_decoder()  # id -> AddedToken
        self.added_tokens = {t.content: i for i, t in decoder.items()}
        self._special_ids = frozenset(i for i, t in decoder.items() if t.special)
        # NOTE: make every added token special so encode_special_tokens disables all of them.
        tokenizer.add_special_tokens([
            AddedToken(t.content, single_word=t.single_word, lstrip=t.lstrip, rstrip=t.rstrip,
                       normalized=t.normalized, special=True) for t in decoder.values()])
        tokenizer.encode_special_tokens = True
        self._tok = tokenizer
        self.vocab_limit = tokenizer.get_vocab_size(with_added_tokens=True)
        by_length = sorted(self.added_tokens, key=len, reverse=True)
        self._added_re = re.compile("|".join(map(re.escape, by_length)) or "(?!)")
        self._chat = ChatTemplate(chat_template, config, self._added_re, folder)
        stop = set(generation_eos)
        for name in ("<|im_end|>", token_str(config.get("eos_token")), "<|endoftext|>"):
            if name in self.added_tokens:
                stop.add(self.added_tokens[name])
        self.stop_ids = stop

    @classmethod
    def from_folder(cls, folder: str | Path) -> Qwen3Tokenizer:
        """Load ``tokenizer.json``, ``tokenizer_config.json`` (chat template, eos), an optional
        ``chat_template.jinja`` (takes precedence, as in transformers 5) and an optional
        ``generation_config.json`` (eos ids) from a checkpoint folder.

        Raises FileNotFoundError when tokenizer.json is missing (a folder with only vocab.json +
        merges.txt is not supported), ValueError for a file that cannot be read (no read
        permission, not UTF-8, a folder or a broken link in its place) or parsed, or an empty
        ``chat_template.jinja``, naming it.
        """
        folder = Path(folder)
        path = folder / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} not found: the tokenizer is read from tokenizer.json (a folder with only "
                "vocab.json + merges.txt is not supported; save the tokenizer with transformers' "
                "save_pretrained to write tokenizer.json)")
        text = read_text(path)  # BOM skipped
        try:
            tokenizer = Tokenizer.from_str(text)
        except Exception as e:  # the Rust error says what is wrong in the file
            raise ValueError(f"cannot read {path}: {_tokenizer_json_error(text, e)}") from e
        config = optional_json_object(folder / "tokenizer_config.json")
        template = config.get("chat_template")
        if isinstance(template, list):  # [{"name": ..., "template": ...}, ...]
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        if template is not None and not isinstance(template, str):
            raise ValueError(f"cannot read {folder / 'tokenizer_config.json'}: chat_template must "
                             f"be a string, got {type(template).__name__}")
        if optional_file(folder / "chat_template.jinja"):
            template = read_text(folder / "chat_template.jinja")  # a BOM is no part of it
            if not template.strip():
                raise ValueError(f"{folder / 'chat_template.jinja'} is empty: put the "
                                 "checkpoint's chat template in it, or remove it")
        eos = _eos_ids(optional_json_object(folder / "generation_config.json"),
                       folder / "generation_config.json",
                       tokenizer.get_vocab_size(with_added_tokens=True))
        return cls(tokenizer, config, template, eos, folder)

    # --- ids <-> text -------------------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Plain-text ids for ``text``: added-token strings such as ``<|im_start|>`` or ``<think>``
        are encoded as ordinary text, never as control ids (all ids < 151643). No BOS is added."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def count_tokens(self, texts: list[str]) -> list[int]:
        """``len(self.encode(t))`` for each of ``texts``, encoded in parallel (the tokenizers
        library's ``encode_batch`` runs on all cores)."""
        return [len(e.ids) for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        """``self.encode(t)`` for each of ``texts``, encoded in parallel (as ``count_tokens``)."""
        return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

    def _encode_control(self, text: str) -> list[int]:
        """Ids of template text: added-token strings become their control ids."""
        ids: list[int] = []
        start = 0
        for m in self._added_re.finditer(text):
            if m.start() > start:
                ids += self.encode(text[start:m.start()])
            ids.append(self.added_tokens[m.group()])
            start = m.end()
        if start < len(text):
            ids += self.encode(text[start:])
        return ids

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        """Text of ``ids`` (ints in [0, vocab_limit)). ``skip_special_tokens`` drops the tokens
        marked special in tokenizer.json (``<|im_end|>``...) but keeps ``<think>``/``</think>``,
        as transformers does. Invalid UTF-8 (an unfinished character) decodes to U+FFFD.
        Raises ValueError for an id outside the vocabulary."""
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_limit]
        if bad:
            raise ValueError(f"token ids {bad[:5]} are outside the tokenizer's vocabulary "
                             f"[0, {self.vocab_limit}); mask ids >= vocab_limit when sampling")
        if skip_special_tokens:
            ids = [i for i in ids if i not in self._special_ids]
        return self._tok.decode(ids, skip_special_tokens=False)

    def stream_decoder(self, skip_special_tokens: bool = False) -> StreamDecoder:
        """A fresh ``StreamDecoder`` for one generated sequence."""
        return StreamDecoder(self, skip_special_tokens)

    # --- chat template ------------------------------------------------------------------------

    def render_chat(self, messages, add_generation_prompt: bool = True,
                    enable_thinking: bool = True) -> str:
        """The chat template applied to ``messages`` (a list of {"role", "content", optional
        "reasoning_content"} dicts), equal to transformers' ``apply_chat_template(messages,
        tokenize=False, add_generation_prompt=..., enable_thinking=...)``.
        Raises ValueError for malformed messages, a folder without a chat template, or an error
        the template raises."""
        return self._chat.render(messages, add_generation_prompt, enable_thinking)

    def chat_ids(self, messages, add_generation_prompt: bool = True,
                 enable_thinking: bool = True) -> list[int]:
        """Ids of the rendered chat: the template's control tokens (``<|im_start|>``...) are
        control ids; added-token strings inside message fields stay plain text. When no message
        contains an added-token string this equals the tokenization of ``render_chat``.
        Raises ValueError as ``render_chat``."""
        ids: list[int] = []
        for piece, plain in self._chat.pieces(messages, add_generation_prompt, enable_thinking):
            ids += self.encode(piece) if plain else self._encode_control(piece)
        return ids
