"""What stands in a checkpoint folder's entries, beyond a file's contents: a folder or a broken
link where a file belongs, a folder that may not be listed or searched, an empty chat template,
a path safetensors cannot open, a config with attention biases. Each was skipped as absent,
called empty, or reached the user as a raw Python error (``PermissionError: [Errno 13]``, exit 1;
``[Errno 2]``; "not a valid safetensors file" for a valid file); each is now one line naming the
entry, exit 2."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
from cli_helpers import FAST, assert_one_line_error, invoke

from infer.capacity import weight_bytes
from infer.generation_config import read_sampling_defaults
from infer.ui.console import error_message
from infer.ui.textio import read_text_input
from models.checkpoint_folder import SINGLE_FILE, checkpoint_files
from models.config import Qwen3Config
from models.config_values import optional_file
from models.hub import check_model_folder
from models.tokenizer import Qwen3Tokenizer


def _denied(path) -> PermissionError:
    return PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))


def test_optional_file_tells_a_file_nothing_and_anything_else(tmp_path):
    (tmp_path / "f.json").write_text("{}")
    (tmp_path / "d.json").mkdir()
    (tmp_path / "dangling.json").symlink_to(tmp_path / "nowhere")
    (tmp_path / "link.json").symlink_to(tmp_path / "f.json")
    assert optional_file(tmp_path / "f.json") is True
    assert optional_file(tmp_path / "link.json") is True
    assert optional_file(tmp_path / "absent.json") is False
    with pytest.raises(ValueError, match=r"d\.json: it is a folder, not a file$"):
        optional_file(tmp_path / "d.json")
    with pytest.raises(ValueError, match=r"dangling\.json: it links to .*nowhere, which does "):
        optional_file(tmp_path / "dangling.json")
    if Path("/dev/null").exists():
        with pytest.raises(ValueError, match=r"null: it is a special file \(a device, a pipe "):
            optional_file(Path("/dev/null"))


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "generation_config.json",
                                  "chat_template.jinja", "tokenizer_config.json", SINGLE_FILE])
@pytest.mark.parametrize("what", ["folder", "broken link", "loop"])
def test_a_folder_or_a_broken_link_in_a_files_place_is_named(name, what, tiny_ckpt, tmp_path):
    """generation_config.json as a folder was skipped (the model's sampling settings dropped
    without a word); model.safetensors as one read 'the index is missing ... a single file must
    be named model.safetensors'; a broken link was '[Errno 2] No such file or directory';
    config.json and tokenizer.json were called missing ('has no config.json')."""
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt, folder)
    path = folder / name
    path.unlink(missing_ok=True)
    if what == "folder":
        path.mkdir()
        why = "it is a folder, not a file"
    elif what == "loop":
        path.symlink_to(path)
        why = "it is a loop of symbolic links"
    else:
        path.symlink_to(tmp_path / "gone")
        why = f"it links to {tmp_path / 'gone'}, which does not exist"
    assert_one_line_error(invoke("generate", folder, "hi", *FAST), 2,
                          f"error: cannot read {path}: {why}")


def test_the_readers_refuse_a_folder_in_a_files_place(tmp_path, tokenizer_dir):
    (tmp_path / "generation_config.json").mkdir()
    with pytest.raises(ValueError, match="generation_config.json: it is a folder"):
        read_sampling_defaults(tmp_path / "generation_config.json")
    assert read_sampling_defaults(tmp_path / "absent.json") == {}
    (tmp_path / "tokenizer.json").symlink_to(tokenizer_dir / "tokenizer.json")
    with pytest.raises(ValueError, match="generation_config.json: it is a folder"):
        Qwen3Tokenizer.from_folder(tmp_path)


@pytest.mark.parametrize("text", ["", " \n\t\n"])
def test_an_empty_chat_template_file_is_named_as_empty(text, tmp_path, tokenizer_dir):
    """It read "tokenizer_config.json has no 'chat_template' (nor a chat_template.jinja file)",
    though the file was there."""
    (tmp_path / "tokenizer.json").symlink_to(tokenizer_dir / "tokenizer.json")
    (tmp_path / "chat_template.jinja").write_text(text)
    with pytest.raises(ValueError, match=r"chat_template\.jinja is empty: put the checkpoint's"):
        Qwen3Tokenizer.from_folder(tmp_path)


def test_a_folder_that_may_not_be_listed_is_not_called_empty(tiny_ckpt, tmp_path, monkeypatch):
    """Path.glob skips a folder it may not list (chmod a-r, a+x), so it read 'has no
    *.safetensors'."""
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt, folder)
    (folder / SINGLE_FILE).rename(folder / "weights.safetensors")  # listing is needed
    real = os.listdir

    def listdir(path="."):
        if Path(path) == folder:
            raise _denied(path)
        return real(path)

    monkeypatch.setattr(os, "listdir", listdir)
    with pytest.raises(ValueError, match=f"^cannot list the model folder {folder}: permission "):
        check_model_folder(folder)
    with pytest.raises(ValueError, match=f"^cannot list the folder {folder}: permission denied "
                                         r"\(make it readable"):
        checkpoint_files(folder)
    monkeypatch.setattr(os, "listdir", real)
    with pytest.raises(ValueError, match=r"model\.safetensors\.index\.json is missing"):
        checkpoint_files(folder)


def test_a_folder_that_may_not_be_searched_is_one_line_exit_2(tiny_ckpt, tmp_path, monkeypatch):
    """chmod 000 on the model folder (or the text's folder) raised PermissionError from
    Path.is_file: 'PermissionError: [Errno 13] ... (run with --debug ...)', exit 1."""
    msg, bad_input = error_message(_denied("/x/y/config.json"), debug=False)
    assert bad_input
    assert msg == ("cannot access /x/y/config.json: permission denied (check the permissions of "
                   "it and of the folders above it)")
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt, folder)
    real = Path.is_file

    def is_file(self):
        if self.parent == folder:
            raise _denied(self)
        return real(self)

    monkeypatch.setattr(Path, "is_file", is_file)
    assert_one_line_error(invoke("generate", folder, "hi", *FAST), 2,
                          f"error: cannot access {folder}/", ": permission denied (check the")
    # a text FILE that is such a folder is "a folder", not a model folder's config.json
    with pytest.raises(ValueError, match=f"^{folder} is a folder: give a text file$"):
        read_text_input(folder)


def test_a_path_that_is_not_utf8_is_refused_for_what_it_is(tiny_ckpt, tmp_path):
    """safetensors takes only UTF-8 paths: a valid file in a folder named in Latin-1 was 'not a
    valid safetensors file (Path ... is not valid UTF-8)'."""
    folder = Path(os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9"))
    shutil.copytree(tiny_ckpt, folder)
    with pytest.raises(ValueError, match="the safetensors library opens only UTF-8 paths; "
                                         "rename the folder"):
        checkpoint_files(folder)
    assert checkpoint_files(tiny_ckpt) == [tiny_ckpt / SINGLE_FILE]


def test_weight_bytes_counts_only_files(tiny_ckpt, tmp_path):
    """A broken link named *.safetensors raised FileNotFoundError from stat() before the
    loader's checks could name it."""
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt, folder)
    mc = Qwen3Config.from_json(folder)
    import torch
    want = weight_bytes(folder, mc, torch.float32)
    (folder / "extra.safetensors").symlink_to(tmp_path / "gone")
    (folder / "dir.safetensors").mkdir()
    assert weight_bytes(folder, mc, torch.float32) == want == (folder / SINGLE_FILE).stat().st_size


@pytest.mark.parametrize("value", [True, 1, "yes"])
def test_a_config_with_attention_biases_is_refused(value, tiny_ckpt):
    """Qwen2-style q/k/v biases: with the tensors it read 'unexpected tensor'; without them it
    ran as if they were zero."""
    d = json.loads((tiny_ckpt / "config.json").read_text())
    for fine in (False, None, 0):
        Qwen3Config.from_dict({**d, "attention_bias": fine})
    with pytest.raises(ValueError, match="attention_bias must be false .Qwen3 has no attention "):
        Qwen3Config.from_dict({**d, "attention_bias": value})
