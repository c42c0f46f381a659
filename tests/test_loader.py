"""models/loader.py (strict streaming load, fusion map, ties, errors) and the random writer."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from conftest import CONFIGS_DIR
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from models.loader import checkpoint_files, load_model
from models.random_checkpoint import base_config, main, tensor_specs, write_random_checkpoint

SMALL = dict(vocab_size=512)  # mutation tests copy folders: keep them small


def _stored(folder) -> dict[str, torch.Tensor]:
    out = {}
    for path in checkpoint_files(folder):
        out.update(load_file(path))
    return out


def _copy(src, tmp_path):
    dst = tmp_path / "ckpt"
    shutil.copytree(src, dst)
    return dst


def _edit_config(folder, **changes):
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(changes)
    (folder / "config.json").write_text(json.dumps(cfg))


# ------------------------------------------------------------------ loading


@pytest.mark.parametrize("kw", [dict(tie=False), dict(tie=False, shards=3), dict(tie=True)])
def test_every_parameter_holds_its_stored_tensor(tiny_ckpt_factory, kw):
    folder = tiny_ckpt_factory(**SMALL, **kw)
    model = load_model(folder, dtype=torch.float32)
    stored = _stored(folder)
    c = model.config
    attn = model.model.layers[1].self_attn
    q, k, v = attn.qkv_proj.weight.split([c.q_size, c.kv_size, c.kv_size])
    p = "model.layers.1."
    assert torch.equal(q, stored[p + "self_attn.q_proj.weight"])
    assert torch.equal(k, stored[p + "self_attn.k_proj.weight"])
    assert torch.equal(v, stored[p + "self_attn.v_proj.weight"])
    gate, up = model.model.layers[1].mlp.gate_up_proj.weight.chunk(2)
    assert torch.equal(gate, stored[p + "mlp.gate_proj.weight"])
    assert torch.equal(up, stored[p + "mlp.up_proj.weight"])
    params = dict(model.named_parameters())
    for name, t in stored.items():
        if name in params:
            assert torch.equal(params[name], t), name
    assert not any(p.requires_grad for p in model.parameters())
    assert not model.training


def test_tied_lm_head_shares_the_embedding(tiny_ckpt_factory):
    folder = tiny_ckpt_factory(**SMALL, tie=True)
    assert "lm_head.weight" not in _stored(folder)
    model = load_model(folder, dtype=torch.float32)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_untied_lm_head_is_its_own_tensor(tiny_ckpt_factory):
    folder = tiny_ckpt_factory(**SMALL, tie=False)
    model = load_model(folder, dtype=torch.float32)
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    assert torch.equal(model.lm_head.weight, _stored(folder)["lm_head.weight"])


def test_stored_lm_head_is_used_even_when_tied(tiny_ckpt_factory, tmp_path):
    folder = _copy(tiny_ckpt_factory(**SMALL, tie=True), tmp_path)
    tensors = load_file(folder / "model.safetensors")
    head = torch.randn_like(tensors["model.embed_tokens.weight"])
    save_file({**tensors, "lm_head.weight": head}, folder / "model.safetensors")
    model = load_model(folder, dtype=torch.float32)
    assert torch.equal(model.lm_head.weight, head)
    assert torch.equal(model.model.embed_tokens.weight, tensors["model.embed_tokens.weight"])


@pytest.mark.parametrize("stored", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("run", [torch.bfloat16, torch.float32, "float16"])
def test_stored_dtype_is_cast_to_run_dtype(tiny_ckpt_factory, stored, run):
    folder = tiny_ckpt_factory(**SMALL, tie=False, dtype=stored)
    model = load_model(folder, dtype=run)
    want = run if isinstance(run, torch.dtype) else getattr(torch, run)
    assert {p.dtype for p in model.parameters()} == {want}
    emb = _stored(folder)["model.embed_tokens.weight"]
    assert torch.equal(model.model.embed_tokens.weight, emb.to(want))
    with torch.no_grad():
        logits = model.compute_logits(model(torch.arange(5), torch.arange(5)))
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()


# ------------------------------------------------------------------ errors


def test_missing_shard_names_the_file(tiny_ckpt_factory, tmp_path):
    folder = _copy(tiny_ckpt_factory(**SMALL, tie=False, shards=3), tmp_path)
    (folder / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(ValueError, match=r"missing checkpoint shard model-00002-of-00003"):
        load_model(folder)


def test_missing_tensor_is_named(tiny_ckpt_factory, tmp_path):
    folder = _copy(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    tensors = load_file(folder / "model.safetensors")
    del tensors["model.layers.1.self_attn.k_proj.weight"]
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ValueError, match=r"missing 1 tensor.*model\.layers\.1\.self_attn\.k_proj"):
        load_model(folder)


def test_missing_untied_lm_head_is_named(tiny_ckpt_factory, tmp_path):
    folder = _copy(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    tensors = load_file(folder / "model.safetensors")
    del tensors["lm_head.weight"]
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ValueError, match=r"missing 1 tensor.*lm_head\.weight"):
        load_model(folder)


def test_unexpected_tensor_is_named(tiny_ckpt_factory, tmp_path):
    folder = _copy(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(128)
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ValueError, match=r"unexpected tensor.*layers\.0\.self_attn\.q_proj\.bias"):
        load_model(folder)


def test_wrong_shape_is_named(tiny_ckpt_factory, tmp_path):
    folder = _copy(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    _edit_config(folder, intermediate_size=96)
    with pytest.raises(ValueError, match=r"mlp\.\w+_proj\.weight.*has shape"):
        load_model(folder)


def test_tensor_listed_in_index_but_absent_is_named(tiny_ckpt_factory, tmp_path):
    folder = _copy(tiny_ckpt_factory(**SMALL, tie=False, shards=3), tmp_path)
    index = json.loads((folder / "model.safetensors.index.json").read_text())
    name = "model.layers.0.mlp.up_proj.weight"
    path = folder / index["weight_map"][name]
    tensors = load_file(path)
    del tensors[name]
    save_file(tensors, path)
    with pytest.raises(ValueError, match=r"missing 1 tensor.*up_proj"):
        load_model(folder)


@pytest.mark.parametrize("arch", ["Qwen3MoeForCausalLM", "LlamaForCausalLM"])
def test_wrong_architecture_names_what_is_supported(tiny_ckpt_factory, tmp_path, arch):
    folder = _copy(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    _edit_config(folder, architectures=[arch])
    with pytest.raises(ValueError, match=rf"unsupported architecture {arch}.*Qwen3ForCausalLM"):
        load_model(folder)


def test_unreadable_config(tiny_ckpt_factory, tmp_path):
    folder = _copy(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    (folder / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"cannot read .*config\.json: not valid JSON"):
        load_model(folder)
    (folder / "config.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"config\.json.*expected a JSON object"):
        load_model(folder)
    (folder / "config.json").unlink()
    with pytest.raises(ValueError, match=r"no config\.json in"):
        load_model(folder)


def test_config_missing_a_field_is_named(tiny_ckpt_factory, tmp_path):
    folder = _copy(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["hidden_size"]
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"missing the field 'hidden_size'"):
        load_model(folder)


def test_no_weights_file(tiny_ckpt_factory, tmp_path):
    folder = _copy(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    (folder / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"no model\.safetensors or model\.safetensors\.index"):
        load_model(folder)
    with pytest.raises(ValueError, match=r"does not exist"):
        load_model(tmp_path / "nowhere")


def test_corrupt_weights_file_is_named(tiny_ckpt_factory, tmp_path):
    folder = _copy(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    (folder / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{garbage")
    with pytest.raises(ValueError, match=r"model\.safetensors: not a valid safetensors file"):
        load_model(folder)


def test_unsupported_stored_dtype_is_named(tiny_ckpt_factory, tmp_path):
    folder = _copy(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.norm.weight"] = tensors["model.norm.weight"].to(torch.int8)
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ValueError, match=r"model\.norm\.weight.*stored as I8"):
        load_model(folder)


# ------------------------------------------------------------------ random checkpoints


@pytest.mark.parametrize("size", ["tiny", "0.6b", "1.7b", "4b", "8b", "14b", "4b-2507"])
def test_random_checkpoint_layout_matches_transformers(size):
    """The writer's tensor list equals the names and shapes of transformers' model (on meta)."""
    transformers = pytest.importorskip("transformers")
    cfg = base_config(size)
    with torch.device("meta"):
        hf = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(**cfg))
    want = {n: tuple(p.shape) for n, p in hf.state_dict().items()}
    if cfg["tie_word_embeddings"]:
        want.pop("lm_head.weight")
    assert {n: s for n, s, _ in tensor_specs(cfg)} == want


def test_random_checkpoint_sharding_and_files(tmp_path, tokenizer_dir):
    out = write_random_checkpoint(tmp_path / "c", "tiny", shards=3, tie=False, vocab_size=512,
                                  tokenizer=tokenizer_dir, device="cpu")
    index = json.loads((out / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert files == [f"model-0000{k}-of-00003.safetensors" for k in (1, 2, 3)]
    seen = {}
    for f in files:
        with safe_open(out / f, "pt") as g:
            seen.update({k: f for k in g.keys()})  # noqa: SIM118
    assert seen == index["weight_map"]
    specs = tensor_specs(json.loads((out / "config.json").read_text()))
    assert set(seen) == {n for n, _, _ in specs}
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt"):
        if (tokenizer_dir / name).is_file():
            assert (out / name).read_bytes() == (tokenizer_dir / name).read_bytes()
    gen = json.loads((out / "generation_config.json").read_text())
    assert 151645 in gen["eos_token_id"]
    norm = load_file(out / seen["model.norm.weight"])["model.norm.weight"]
    assert (norm - 1).abs().max() < 0.2 and norm.std() > 0  # near 1, not constant


def test_random_checkpoint_cli_and_seed(tmp_path):
    main(["--size", "tiny", "--out", str(tmp_path / "a"), "--vocab-size", "256", "--seed", "5",
          "--dtype", "float16", "--no-tie", "--layers", "1", "--device", "cpu"])
    main(["--size", "tiny", "--out", str(tmp_path / "b"), "--vocab-size", "256", "--seed", "5",
          "--dtype", "float16", "--no-tie", "--layers", "1", "--device", "cpu"])
    write_random_checkpoint(tmp_path / "c", "tiny", vocab_size=256, seed=6, dtype="float16",
                            tie=False, num_hidden_layers=1, device="cpu")
    a, b, c = (load_file(tmp_path / x / "model.safetensors") for x in "abc")
    cfg = json.loads((tmp_path / "a" / "config.json").read_text())
    assert cfg["num_hidden_layers"] == 1 and cfg["torch_dtype"] == "float16"
    assert not cfg["tie_word_embeddings"] and "lm_head.weight" in a
    assert a.keys() == b.keys() == c.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["lm_head.weight"], c["lm_head.weight"])
    assert a["lm_head.weight"].dtype == torch.float16


def test_random_checkpoint_bad_tokenizer_is_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "ckpt"
    with pytest.raises(SystemExit) as e:
        main(["--out", str(out), "--tokenizer", str(tmp_path / "nowhere"), "--device", "cpu"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith(f"no tokenizer.json in {tmp_path / 'nowhere'}: pass the folder "
                            "holding the tokenizer files")
    assert not out.exists()


@pytest.mark.parametrize("flag", [["--layers", "0"], ["--shards", "0"], ["--vocab-size", "-1"]])
def test_random_checkpoint_counts_below_one_are_refused(tmp_path, capsys, tokenizer_dir, flag):
    out = tmp_path / "ckpt"
    with pytest.raises(SystemExit) as e:
        main(["--out", str(out), "--tokenizer", str(tokenizer_dir), "--device", "cpu", *flag])
    assert e.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        f"{flag[0]} must be at least 1, got {flag[1]}")
    assert not out.exists()


@pytest.mark.parametrize("where,needle", [
    ("file", "exists and is not a folder"), ("file/sub", "cannot create the folder"),
    ("/proc/x4", "cannot create the folder /proc/x4")])
def test_random_checkpoint_bad_out_is_one_line_exit_2(tmp_path, capsys, tokenizer_dir, where,
                                                       needle):
    import os

    if where.startswith("/proc") and not os.path.isdir("/proc/self"):
        pytest.skip("needs /proc (Linux)")
    (tmp_path / "file").write_text("not a folder\n")
    out = where if where.startswith("/") else str(tmp_path / where)
    with pytest.raises(SystemExit) as e:
        main(["--out", out, "--tokenizer", str(tokenizer_dir), "--device", "cpu"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert needle in err.strip().splitlines()[-1] and "Traceback" not in err
    assert (tmp_path / "file").read_text() == "not a folder\n"


def test_random_checkpoint_write_failure_is_one_line_exit_1(tmp_path, capsys, tokenizer_dir,
                                                            monkeypatch):
    import errno
    import os

    import models.random_checkpoint as rc

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(rc, "write_checkpoint_files", full)
    with pytest.raises(SystemExit) as e:
        main(["--out", str(tmp_path / "ckpt"), "--tokenizer", str(tokenizer_dir), "--vocab-size",
              "256", "--layers", "1", "--device", "cpu"])
    assert e.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if ": note: " not in line]  # the small-vocab note
    assert len(errors) == 1 and errors[0].endswith("No space left on device"), err


def test_real_size_config_is_the_published_one():
    cfg = base_config("0.6b", CONFIGS_DIR)
    published = json.loads((CONFIGS_DIR / "Qwen3-0.6B" / "config.json").read_text())
    assert cfg == published
    assert base_config("0.6b") == published  # the default folder resolves to the same data
    with pytest.raises(ValueError, match="unknown size"):
        base_config("70b")
    with pytest.raises(ValueError, match="no config for size 8b"):
        base_config("8b", CONFIGS_DIR / "nowhere")


@pytest.mark.parametrize("fail_in", ["writer", "draw"])
def test_random_checkpoint_crash_leaves_no_weights_file(tmp_path, monkeypatch, fail_in):
    """A crash midway (e.g. torch without numpy) leaves no *.safetensors, not a truncated one."""
    import models.random_checkpoint as rc
    import models.safetensors_writer as sw

    calls = []

    def boom(*args, **kw):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("Numpy is not available")
        return real(*args, **kw)

    real = sw.StreamingWriter.write if fail_in == "writer" else rc._draw
    if fail_in == "writer":
        monkeypatch.setattr(sw.StreamingWriter, "write", lambda self, t: boom(self, t))
    else:
        monkeypatch.setattr(rc, "_draw", boom)
    with pytest.raises(RuntimeError, match="Numpy"):
        write_random_checkpoint(tmp_path / "c", "tiny", shards=2, vocab_size=256,
                                num_hidden_layers=1, device="cpu")
    assert len(calls) == 3
    left = sorted(p.name for p in (tmp_path / "c").iterdir())
    assert not [n for n in left if "safetensors" in n], left
    monkeypatch.undo()
    out = write_random_checkpoint(tmp_path / "c", "tiny", vocab_size=256, num_hidden_layers=1,
                                  device="cpu")
    assert sorted(p.name for p in out.glob("*safetensors*")) == ["model.safetensors"]


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_non_finite_weight_is_named(tiny_ckpt_factory, tmp_path, bad):
    """A float16 checkpoint whose model.norm.weight holds inf used to print '!!!!' (exit 0)."""
    folder = _copy(tiny_ckpt_factory(**SMALL, tie=False, dtype="float16", shards=2), tmp_path)
    name = "model.norm.weight"
    shard = json.loads((folder / "model.safetensors.index.json").read_text())["weight_map"][name]
    tensors = load_file(folder / shard)
    tensors[name][3] = bad
    save_file(tensors, folder / shard)
    for run in (torch.float16, torch.float32):
        with pytest.raises(ValueError, match=rf"^tensor model\.norm\.weight in {shard} holds "
                                             r"non-finite values \(inf or NaN\): the checkpoint "
                                             "is corrupt"):
            load_model(folder, dtype=run)


def test_fused_part_out_of_float16_range_is_named(tiny_ckpt_factory, tmp_path):
    folder = _copy(tiny_ckpt_factory(**SMALL, tie=False, dtype="float32"), tmp_path)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.layers.1.self_attn.v_proj.weight"][0, 0] = 1e6
    save_file(tensors, folder / "model.safetensors")
    load_model(folder, dtype=torch.float32)  # finite in its own dtype
    load_model(folder, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"tensor model\.layers\.1\.self_attn\.v_proj\.weight in "
                                         r"model\.safetensors has values beyond the range of "
                                         r"float16 \(largest 65504\).*bfloat16 or float32"):
        load_model(folder, dtype=torch.float16)


def test_random_checkpoint_cli_writes_a_folder_infer_accepts(tmp_path, tokenizer_dir,
                                                             monkeypatch, capsys):
    """Without --tokenizer the CLI copies the shared tokenizer (the folder used to be rejected
    by infer with a hint to run the same command), or says which flag to pass."""
    import models.random_checkpoint as rc
    from models.hub import resolve_model

    out = tmp_path / "ckpt"
    monkeypatch.setattr(rc, "DEFAULT_TOKENIZER_DIR", tokenizer_dir)
    main(["--out", str(out), "--vocab-size", "256", "--layers", "1", "--device", "cpu"])
    assert (out / "tokenizer.json").read_bytes() == (tokenizer_dir / "tokenizer.json").read_bytes()
    assert resolve_model(out) == out.resolve()
    monkeypatch.setattr(rc, "DEFAULT_TOKENIZER_DIR", tmp_path / "nowhere")
    with pytest.raises(SystemExit) as e:
        main(["--out", str(tmp_path / "other"), "--device", "cpu"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"no tokenizer.json in {tmp_path / 'nowhere'} (the default): pass --tokenizer DIR" in err
    assert not (tmp_path / "other").exists()
