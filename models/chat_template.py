"""The chat template of a Qwen3 checkpoint: messages -> the prompt text, as transformers renders it.

Design:

- The template is rendered like transformers' ``apply_chat_template``: a jinja2
  ``ImmutableSandboxedEnvironment`` with ``trim_blocks``/``lstrip_blocks``, the ``loopcontrols``
  extension, a ``raise_exception`` global and a ``tojson`` filter that does not escape HTML. It is
  compiled on first use: ``--raw`` and ``bench`` never need it.
- Messages are copied as transformers does: None values dropped, reasoning fields aliased.
- ``pieces`` keeps message contents as text with the marker scheme of transformers'
  ``sanitize_control_tokens``: added-token strings inside the messages are wrapped in two Unicode
  noncharacters before rendering; after rendering, a marked string is a plain-text piece and
  everything else (the template's own text) a piece with control tokens, which the tokenizer
  encodes accordingly (``Qwen3Tokenizer.chat_ids``). Contents without added-token strings render
  unchanged, so their ids equal the tokenization of ``render``. An assistant turn's
  ``<think>...</think>`` is first moved to ``reasoning_content`` exactly as the Qwen3 template
  would do it, so that markers cannot disturb the template's own split on ``</think>``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

# Unicode noncharacters that wrap added-token strings found in messages (removed from messages).
_MARK_START, _MARK_END = "\ufdd0", "\ufdd1"
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")
_TEMPLATE_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                         "cls_token", "mask_token")


def token_str(value) -> str | None:
    """A special-token entry of tokenizer_config.json: a string, {"content": ...} or null."""
    return value.get("content") if isinstance(value, Mapping) else value


def _compile_template(source: str) -> jinja2.Template:
    """Compile a chat template the way transformers does (utils/chat_template_utils.py)."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)


class ChatTemplate:
    """A checkpoint's chat template and the special tokens its text may name.

    Args:
        source: the template's jinja2 text, or None when the folder has none (rendering then
            raises ValueError naming the missing file).
        config: tokenizer_config.json's object (``bos_token``, ``eos_token``, ... are passed to
            the template as transformers passes them).
        added_re: a pattern matching every added-token string, longest first (the tokenizer's).
        folder: the checkpoint folder, for the messages of errors.
    """

    def __init__(self, source: str | None, config: dict, added_re: re.Pattern,
                 folder: Path | None = None):
        self.source, self._folder = source, folder
        self._compiled: jinja2.Template | None = None  # compiled on first use
        self._tokens = {name: token_str(config[name]) for name in _TEMPLATE_TOKEN_NAMES
                        if token_str(config.get(name)) is not None}
        self._added_re = added_re
        self._marked_re = re.compile(f"{_MARK_START}({added_re.pattern}){_MARK_END}"
                                     f"|[{_MARK_START}{_MARK_END}]")

    def render(self, messages, add_generation_prompt: bool = True,
               enable_thinking: bool = True) -> str:
        """The template applied to ``messages`` (``Qwen3Tokenizer.render_chat``). Raises
        ValueError for malformed messages, no template, or an error the template raises."""
        return self._render(_normalize(messages), add_generation_prompt, enable_thinking)

    def pieces(self, messages, add_generation_prompt: bool = True,
               enable_thinking: bool = True) -> list[tuple[str, bool]]:
        """The rendered chat as ``(text, plain)`` pieces in order: ``plain`` for an added-token
        string that stood in a message (encode it as text), else template text (its added-token
        strings are control tokens). Raises ValueError as ``render``."""
        messages = [self._mark(self._split_thinking(m)) for m in _normalize(messages)]
        text = self._render(messages, add_generation_prompt, enable_thinking)
        # Splitting on the markers gives [text, marked, text, marked, ..., text]; a marked entry
        # is None for a lone marker (a template string op cut a marked token), which is dropped.
        return [(piece, bool(i % 2)) for i, piece in enumerate(self._marked_re.split(text))
                if piece]

    def _render(self, messages: list[dict], add_generation_prompt: bool,
                enable_thinking: bool) -> str:
        if not self.source:
            config = (self._folder or Path("this tokenizer folder")) / "tokenizer_config.json"
            where = (f"{config} has no 'chat_template'" if config.is_file() else
                     f"{config.parent} has no tokenizer_config.json")
            raise ValueError(f"no chat template: {where} (nor a chat_template.jinja file): add "
                             "the checkpoint's, or use --raw")
        if self._compiled is None:  # compiled on first use: --raw and bench never need it
            try:
                self._compiled = _compile_template(self.source)
            except jinja2.exceptions.TemplateError as e:
                raise ValueError(f"the checkpoint's chat template does not parse: {e} (fix "
                                 f"'chat_template' in tokenizer_config.json or "
                                 f"chat_template.jinja, or use --raw)") from e
        try:
            return self._compiled.render(
                messages=messages, tools=None, documents=None,
                add_generation_prompt=add_generation_prompt, enable_thinking=enable_thinking,
                **self._tokens)
        except (jinja2.exceptions.TemplateError, TypeError, ValueError, LookupError,
                AttributeError, ArithmeticError) as e:  # the template's own expressions too
            raise ValueError(f"the chat template failed: {e}") from e

    def _split_thinking(self, m: dict) -> dict:
        """Move an assistant turn's ``<think>...</think>`` into reasoning_content, with the Qwen3
        template's own expressions, so it renders the same before and after marking."""
        content = m.get("content")
        if (m["role"] != "assistant" or not isinstance(content, str) or "</think>" not in content
                or isinstance(m.get("reasoning_content"), str)
                or "reasoning_content" not in (self.source or "")):
            return m
        reasoning = content.split("</think>")[0].rstrip("\n").split("<think>")[-1].lstrip("\n")
        return {**m, "reasoning_content": reasoning,
                "content": content.split("</think>")[-1].lstrip("\n")}

    def _mark(self, obj):
        """Wrap added-token strings in the string values of ``obj`` with the markers (after
        removing any markers already there, so that a message cannot forge one)."""
        if isinstance(obj, str):
            obj = obj.replace(_MARK_START, "").replace(_MARK_END, "")
            return self._added_re.sub(f"{_MARK_START}\\g<0>{_MARK_END}", obj)
        if isinstance(obj, Mapping):
            return {k: self._mark(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self._mark(v) for v in obj]
        return obj


def _normalize(messages) -> list[dict]:
    """Copy messages as transformers does: drop None values, alias reasoning fields."""
    if isinstance(messages, (str, Mapping)) or not messages:
        raise ValueError("messages must be a non-empty list of {'role': ..., 'content': ...}")
    out = []
    for m in messages:
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise ValueError(f"each message must be a dict with a string 'role', got {m!r}")
        m = {k: v for k, v in m.items() if v is not None}
        reasoning = next((m[k] for k in _REASONING_FIELDS if k in m), None)
        if reasoning is not None:
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out
