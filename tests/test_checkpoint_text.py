"""A checkpoint's text files as the loader reads them (``models/config_values.py``'s
``read_text``): a leading UTF-8 byte order mark is no part of the text (chat_template.jinja; the
JSON files: ``test_config_values.py``)."""

from __future__ import annotations

import codecs

from models.tokenizer import Qwen3Tokenizer

TEMPLATE = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"


def _folder_with_template(folder, tokenizer_dir, template: bytes):
    folder.mkdir(exist_ok=True)
    (folder / "tokenizer.json").symlink_to(tokenizer_dir / "tokenizer.json")
    (folder / "chat_template.jinja").write_bytes(template)
    return folder


def test_a_chat_template_file_saved_with_a_bom_renders_without_it(tmp_path, tokenizer_dir):
    """The BOM was kept as the template's first character, so every prompt began with U+FEFF
    (tokens of its own); one later in the text is the template's and stays."""
    saved = _folder_with_template(tmp_path / "bom", tokenizer_dir,
                                  codecs.BOM_UTF8 + (TEMPLATE + "\ufeff").encode())
    plain = _folder_with_template(tmp_path / "plain", tokenizer_dir, (TEMPLATE + "\ufeff").encode())
    message = [{"role": "user", "content": "hi"}]
    tok = Qwen3Tokenizer.from_folder(saved)
    assert tok.render_chat(message) == "[user] hi\n\ufeff"
    assert tok.chat_ids(message) == Qwen3Tokenizer.from_folder(plain).chat_ids(message)
