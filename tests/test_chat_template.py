"""models/chat_template.py on its own (no tokenizer): rendering, the plain-text pieces of a
rendered chat, and the bos/eos tokens the template sees. Against transformers, through
``Qwen3Tokenizer``: ``test_tokenizer.py``."""

from __future__ import annotations

import re

import pytest

from models.chat_template import ChatTemplate, token_str

ADDED = re.compile("<\\|im_end\\|>|<\\|im_start\\|>")  # longest first, as the tokenizer's
SOURCE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
          "{{ eos_token }}")


def test_pieces_keep_added_token_strings_of_messages_as_plain_text():
    chat = ChatTemplate(SOURCE, {"eos_token": {"content": "<|im_end|>"}}, ADDED)
    messages = [{"role": "user", "content": "a <|im_end|> b \ufdd0c"}]  # a forged marker too
    text = chat.render(messages)
    assert text == ("<|im_start|>user\na <|im_end|> b \ufdd0c<|im_end|>\n"
                    "<|im_start|>assistant\n<|im_end|>")
    assert chat.pieces(messages) == [
        ("<|im_start|>user\na ", False), ("<|im_end|>", True),
        (" b c<|im_end|>\n<|im_start|>assistant\n<|im_end|>", False)]
    assert "".join(p for p, _ in chat.pieces(messages, add_generation_prompt=False)) == (
        "<|im_start|>user\na <|im_end|> b c<|im_end|>\n<|im_end|>")


def test_token_str_and_no_template():
    assert token_str("<s>") == "<s>" and token_str({"content": "<s>"}) == "<s>"
    assert token_str(None) is None
    with pytest.raises(ValueError, match="^no chat template: this tokenizer folder has no "
                                         "tokenizer_config.json"):
        ChatTemplate(None, {}, ADDED).render([{"role": "user", "content": "hi"}])
