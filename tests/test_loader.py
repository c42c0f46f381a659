"""models/loader.py (strict streaming load, fusion map, ties, errors); the random writer is in
``test_random_checkpoint.py``."""

from __future__ import annotations

import json

import pytest
import torch
from ckpt_helpers import SMALL, copy_ckpt, edit_config, stored_tensors
from safetensors.torch import load_file, save_file

from models.loader import load_model

# ------------------------------------------------------------------ loading


@pytest.mark.parametrize("kw", [dict(tie=False), dict(tie=False, shards=3), dict(tie=True)])
def test_every_parameter_holds_its_stored_tensor(tiny_ckpt_factory, kw):
    folder = tiny_ckpt_factory(**SMALL, **kw)
    model = load_model(folder, dtype=torch.float32)
    stored = stored_tensors(folder)
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
    assert "lm_head.weight" not in stored_tensors(folder)
    model = load_model(folder, dtype=torch.float32)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


def test_untied_lm_head_is_its_own_tensor(tiny_ckpt_factory):
    folder = tiny_ckpt_factory(**SMALL, tie=False)
    model = load_model(folder, dtype=torch.float32)
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    assert torch.equal(model.lm_head.weight, stored_tensors(folder)["lm_head.weight"])


def test_stored_lm_head_is_used_even_when_tied(tiny_ckpt_factory, tmp_path):
    folder = copy_ckpt(tiny_ckpt_factory(**SMALL, tie=True), tmp_path)
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
    emb = stored_tensors(folder)["model.embed_tokens.weight"]
    assert torch.equal(model.model.embed_tokens.weight, emb.to(want))
    with torch.no_grad():
        logits = model.compute_logits(model(torch.arange(5), torch.arange(5)))
    assert logits.dtype == torch.float32 and torch.isfinite(logits).all()


# ------------------------------------------------------------------ errors


def test_missing_shard_names_the_file(tiny_ckpt_factory, tmp_path):
    folder = copy_ckpt(tiny_ckpt_factory(**SMALL, tie=False, shards=3), tmp_path)
    (folder / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(ValueError, match=r"missing checkpoint shard model-00002-of-00003"):
        load_model(folder)


def test_missing_tensor_is_named(tiny_ckpt_factory, tmp_path):
    folder = copy_ckpt(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    tensors = load_file(folder / "model.safetensors")
    del tensors["model.layers.1.self_attn.k_proj.weight"]
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ValueError, match=r"missing 1 tensor.*model\.layers\.1\.self_attn\.k_proj"):
        load_model(folder)


def test_missing_untied_lm_head_is_named(tiny_ckpt_factory, tmp_path):
    folder = copy_ckpt(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    tensors = load_file(folder / "model.safetensors")
    del tensors["lm_head.weight"]
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ValueError, match=r"missing 1 tensor.*lm_head\.weight"):
        load_model(folder)


def test_unexpected_tensor_is_named(tiny_ckpt_factory, tmp_path):
    folder = copy_ckpt(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(128)
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ValueError, match=r"unexpected tensor.*layers\.0\.self_attn\.q_proj\.bias"):
        load_model(folder)


def test_wrong_shape_is_named(tiny_ckpt_factory, tmp_path):
    folder = copy_ckpt(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    edit_config(folder, intermediate_size=96)
    with pytest.raises(ValueError, match=r"mlp\.\w+_proj\.weight.*has shape"):
        load_model(folder)


def test_tensor_listed_in_index_but_absent_is_named(tiny_ckpt_factory, tmp_path):
    folder = copy_ckpt(tiny_ckpt_factory(**SMALL, tie=False, shards=3), tmp_path)
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
    folder = copy_ckpt(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    edit_config(folder, architectures=[arch])
    with pytest.raises(ValueError, match=rf"unsupported architecture {arch}.*Qwen3ForCausalLM"):
        load_model(folder)


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_a_model_type_that_contradicts_the_architecture_is_refused(tiny_ckpt_factory, tmp_path,
                                                                   model_type):
    # Qwen3ForCausalLM with model_type llama was loaded as Qwen3 without a word
    folder = copy_ckpt(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    edit_config(folder, model_type=model_type)
    with pytest.raises(ValueError, match=rf"unsupported model_type '{model_type}'"):
        load_model(folder)


def test_unreadable_config(tiny_ckpt_factory, tmp_path):
    folder = copy_ckpt(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
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
    folder = copy_ckpt(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    cfg = json.loads((folder / "config.json").read_text())
    del cfg["hidden_size"]
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"missing the field 'hidden_size'"):
        load_model(folder)


def test_no_weights_file(tiny_ckpt_factory, tmp_path):
    folder = copy_ckpt(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    (folder / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"no model\.safetensors or model\.safetensors\.index"):
        load_model(folder)
    with pytest.raises(ValueError, match=r"does not exist"):
        load_model(tmp_path / "nowhere")


def test_shards_without_their_index_name_the_index(tiny_ckpt_factory, tmp_path):
    """Shards but no index said "no model.safetensors or model.safetensors.index.json ...
    (.bin/.pth/GGUF are not supported)", as if there were no safetensors at all."""
    folder = copy_ckpt(tiny_ckpt_factory(**SMALL, tie=False, shards=3), tmp_path)
    (folder / "model.safetensors.index.json").unlink()
    with pytest.raises(ValueError, match=r"^model\.safetensors\.index\.json is missing in .*, "
                                         r"which holds 3 safetensors files \(model-00001-of-"
                                         r"00003\.safetensors, model-00002"):
        load_model(folder)


def test_corrupt_weights_file_is_named(tiny_ckpt_factory, tmp_path):
    folder = copy_ckpt(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    (folder / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{garbage")
    with pytest.raises(ValueError, match=r"model\.safetensors: not a valid safetensors file"):
        load_model(folder)


def test_unsupported_stored_dtype_is_named(tiny_ckpt_factory, tmp_path):
    folder = copy_ckpt(tiny_ckpt_factory(**SMALL, tie=False), tmp_path)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.norm.weight"] = tensors["model.norm.weight"].to(torch.int8)
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ValueError, match=r"model\.norm\.weight.*stored as I8"):
        load_model(folder)


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_non_finite_weight_is_named(tiny_ckpt_factory, tmp_path, bad):
    """A float16 checkpoint whose model.norm.weight holds inf used to print '!!!!' (exit 0)."""
    folder = copy_ckpt(tiny_ckpt_factory(**SMALL, tie=False, dtype="float16", shards=2), tmp_path)
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
    folder = copy_ckpt(tiny_ckpt_factory(**SMALL, tie=False, dtype="float32"), tmp_path)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.layers.1.self_attn.v_proj.weight"][0, 0] = 1e6
    save_file(tensors, folder / "model.safetensors")
    load_model(folder, dtype=torch.float32)  # finite in its own dtype
    load_model(folder, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"tensor model\.layers\.1\.self_attn\.v_proj\.weight in "
                                         r"model\.safetensors has values beyond the range of "
                                         r"float16 \(largest 65504\).*bfloat16 or float32"):
        load_model(folder, dtype=torch.float16)
