"""A checkpoint folder whose files parse but hold the wrong thing: JSON of the wrong type, a
chat template that does not parse, a vocabulary smaller than its tokenizer. Each is bad input:
one error line and exit 2 through the CLI (they used to surface as AttributeError,
TemplateSyntaxError or IndexError, exit 1), before any weight is loaded. Also the random
checkpoint writer's ``--device`` check and its note on a small ``--vocab-size``."""

from __future__ import annotations

import json
import shutil

import pytest
from cli_helpers import FAST, assert_one_line_error, invoke

pytestmark = pytest.mark.usefixtures("cli_tokenizer_once")


@pytest.fixture
def folder(tiny_ckpt, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt, dst)
    return dst


def _edit(path, change):
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("name,content,needle", [
    ("generation_config.json", [1, 2], "expected a JSON object, got an array"),
    ("tokenizer_config.json", [], "expected a JSON object, got an array"),
    ("config.json", None, "expected a JSON object, got null"),
    ("config.json", "Qwen3", "expected a JSON object, got a string"),
    ("generation_config.json", 0.5, "expected a JSON object, got a number"),
    ("tokenizer_config.json", True, "expected a JSON object, got true"),
    ("generation_config.json", {"eos_token_id": "x"}, "eos_token_id must be an integer"),
    ("generation_config.json", {"eos_token_id": [151645, True]}, "eos_token_id must be an integer"),
    ("generation_config.json", {"eos_token_id": 999999999},
     "eos_token_id 999999999 is outside the tokenizer's vocabulary (ids 0 to 151,668), so it "
     "could never end a reply"),
    ("generation_config.json", {"eos_token_id": -1}, "eos_token_id -1 is outside"),
    ("generation_config.json", {"eos_token_id": [151645, 151669]}, "eos_token_id 151669 is "),
    ("generation_config.json", {"eos_token_id": []},
     "eos_token_id is an empty list, but a reply still ends at the tokenizer's own stop tokens "
     "(<|im_end|>, <|endoftext|>): remove the field or set it to null"),
])
def test_json_of_the_wrong_type_is_bad_input(folder, name, content, needle):
    """Also eos ids that could never end a reply (outside the vocabulary) or an empty list,
    which reads as "no stop token" but the tokenizer's own stop tokens still end a reply."""
    (folder / name).write_text(json.dumps(content))
    assert_one_line_error(invoke("generate", folder, "Hi", *FAST), 2, name, needle)


@pytest.mark.parametrize("field,value", [("rope_scaling", "x"), ("rope_parameters", [1])])
def test_rope_fields_of_the_wrong_type_are_bad_input(folder, field, value):
    _edit(folder / "config.json", lambda d: d.update({field: value}))
    assert_one_line_error(invoke("generate", folder, "Hi", *FAST), 2,
                          f"{field} must be an object")


def test_a_chat_template_that_does_not_parse(folder):
    _edit(folder / "tokenizer_config.json", lambda d: d.update(chat_template="{% if %}"))
    assert_one_line_error(invoke("generate", folder, "Hi", *FAST), 2,
                          "chat template does not parse", "--raw")
    raw = invoke("generate", folder, "Hi", "--raw", *FAST)  # --raw never renders it
    assert raw.exit_code == 0, raw.output


def test_a_chat_template_whose_expression_fails_at_render_is_bad_input(folder):
    # parses, but dividing a message's text by 2 raises TypeError inside jinja2 (was exit 1)
    _edit(folder / "tokenizer_config.json", lambda d: d.update(
        chat_template="{% for m in messages %}{{ m.content / 2 }}{% endfor %}"))
    assert_one_line_error(invoke("generate", folder, "Hi", *FAST), 2,
                          "the chat template failed", "unsupported operand")


def test_a_vocabulary_smaller_than_the_tokenizer_is_bad_input(folder):
    _edit(folder / "config.json", lambda d: d.update(vocab_size=1000))
    assert_one_line_error(invoke("generate", folder, "Hi", *FAST), 2,
                          "the tokenizer defines 151669 tokens but config.json's vocab_size is "
                          "1000")


def test_random_checkpoint_device_and_small_vocab(tmp_path, tokenizer_dir, capsys, monkeypatch):
    import torch

    from models.random_checkpoint import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as e:
        main(["--out", str(tmp_path / "a"), "--tokenizer", str(tokenizer_dir), "--device",
              "cuda"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("--device cuda: no CUDA GPU here (use --device cpu, the default "
                            "without one)") and not (tmp_path / "a").exists()
    main(["--out", str(tmp_path / "b"), "--tokenizer", str(tokenizer_dir), "--vocab-size", "256",
          "--layers", "1", "--device", "cpu"])
    err = capsys.readouterr().err
    assert "--vocab-size 256 is smaller than the tokenizer's 151669 tokens" in err
    assert (tmp_path / "b" / "model.safetensors").is_file()
