"""A checkpoint's text files as the loader reads them (``models/config_values.py``'s
``read_text``): a leading UTF-8 byte order mark is no part of the text (chat_template.jinja; the
JSON files: ``test_config_values.py``), and a file that cannot be read is one error line naming
it, exit 2 (it was a PermissionError, exit 1, or 'not valid JSON' for tokenizer.json)."""

from __future__ import annotations

import codecs
import errno
import os
import re
import shutil
from pathlib import Path

import pytest
from cli_helpers import FAST, assert_one_line_error, invoke

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


READ_FILES = ("config.json", "tokenizer.json", "generation_config.json", "tokenizer_config.json",
              "chat_template.jinja", "model.safetensors")  # the weights: 'not a valid
# safetensors file' before


@pytest.mark.parametrize("how", [
    pytest.param("chmod", marks=pytest.mark.skipif(os.geteuid() == 0,
                                                   reason="root reads a file without permission")),
    "refused",  # the OS's PermissionError, raised where the file is read: runs as root too
])
@pytest.mark.parametrize("name", READ_FILES)
def test_a_file_without_read_permission_is_one_error_naming_it(name, how, tiny_ckpt, tmp_path,
                                                               monkeypatch):
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt, folder)
    (folder / "chat_template.jinja").write_text("{{ messages[0].content }}")
    path = folder / name
    if how == "chmod":
        path.chmod(0)
    else:
        real = Path.open  # read_bytes and read_text open through it

        def open_(self, *args, **kwargs):
            if self == path:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
            return real(self, *args, **kwargs)

        monkeypatch.setattr(Path, "open", open_)
    assert_one_line_error(invoke("generate", folder, "hi", *FAST), 2,
                          f"error: cannot read {path}: permission denied (make the file "
                          "readable by this user, e.g. chmod a+r)")


def test_a_file_that_is_not_utf8_is_named(tmp_path, tokenizer_dir):
    """A chat_template.jinja in Latin-1 was UnicodeDecodeError's message alone, naming no file."""
    folder = _folder_with_template(tmp_path / "latin1", tokenizer_dir, "caf\xe9".encode("latin-1"))
    path = folder / "chat_template.jinja"
    with pytest.raises(ValueError, match=f"^{re.escape(f'cannot read {path}: not UTF-8 text')}"):
        Qwen3Tokenizer.from_folder(folder)


def test_an_unreadable_or_bom_index_of_shards(tiny_ckpt_factory, tmp_path, monkeypatch):
    """model.safetensors.index.json: a leading BOM is skipped (it was 'expected JSON with a
    weight_map'), an index the OS will not open is named as the other files are."""
    from models.checkpoint_folder import INDEX_FILE, checkpoint_files
    folder = tmp_path / "sharded"
    shutil.copytree(tiny_ckpt_factory(shards=2), folder)
    index = folder / INDEX_FILE
    want = checkpoint_files(folder)
    index.write_bytes(codecs.BOM_UTF8 + index.read_bytes())
    assert checkpoint_files(folder) == want and len(want) == 2
    real = Path.open

    def open_(self, *args, **kwargs):
        if self == index:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "open", open_)
    denied = re.escape(f"cannot read {index}: permission denied")
    with pytest.raises(ValueError, match=f"^{denied}"):
        checkpoint_files(folder)
    monkeypatch.setattr(Path, "open", real)
    index.write_text('{"weight_map": ["a.safetensors"]}')
    with pytest.raises(ValueError, match="expected JSON with a 'weight_map' object, got an arr"):
        checkpoint_files(folder)
    # a shard name that is not a string: it was "TypeError: unsupported operand type(s) for /"
    for value, shown in [("3", "3"), ("null", "None"), ("true", "True"), ('""', "''")]:
        index.write_text('{"weight_map": {"a": "model.safetensors", "b": ' + value + "}}")
        with pytest.raises(ValueError, match=re.escape(
                f"cannot read {index}: weight_map['b'] must be the name of a shard file, got "
                f"{shown}")):
            checkpoint_files(folder)
