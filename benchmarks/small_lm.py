"""A small Qwen3 for training: ``models/qwen3.py``'s own module, batched causal SDPA, HF save.

Design: the model trained is ``models.qwen3.Qwen3ForCausalLM`` itself (RMSNorm pre-norm, q_norm /
k_norm per head before RoPE, SwiGLU, GQA, tied embeddings, no biases), on its plain-torch path
(``use_fused_kernels = False``: the Triton norm/RoPE kernels have no backward). A batch of B
sequences of S tokens runs as one flat stream of B*S tokens with positions ``0..S-1`` per row, and
an attention function that views the stream as [B, S] and calls
``F.scaled_dot_product_attention(is_causal=True)`` (FlashAttention on CUDA) with the KV heads
expanded to the query heads (an ``expand``, whose backward is a deterministic sum). So the trained
weights need no conversion: ``save_checkpoint`` writes them under the checkpoint names of
``models.loader.checkpoint_targets`` (the loader's own mapping, fused q/k/v and gate/up split
back into rows), in the Hugging Face layout that ``models/loader.py`` and transformers load.

Initialization (seeded, drawn on the CPU so that every device starts from the same weights):
matrices N(0, 0.02^2), the two residual-output projections (o_proj, down_proj) scaled by
1/sqrt(2 x layers) as in GPT-2, norm weights 1.
"""

from __future__ import annotations

import functools
import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F

from models.config import Qwen3Config
from models.loader import checkpoint_targets
from models.meta_modules import meta_modules
from models.qwen3 import Qwen3ForCausalLM
from models.random_checkpoint import (
    base_config,
    copy_tokenizer,
    tensor_specs,
    write_generation_config,
)
from models.safetensors_writer import write_checkpoint_files

DEFAULT_SHAPE = dict(hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
                     num_key_value_heads=4, head_dim=64, intermediate_size=1536)
INIT_STD = 0.02


def small_config(**shape) -> dict:
    """The config.json dict of a small Qwen3: the published Qwen3 fields (``model_type`` qwen3,
    tied embeddings, rope_theta 1e6, rms_norm_eps 1e-6, 40960 positions, vocabulary 151936,
    torch_dtype bfloat16) with ``DEFAULT_SHAPE`` updated by ``shape`` (config.json field names).

    Raises:
        ValueError: an unknown field, or a shape ``Qwen3Config`` rejects.
    """
    cfg = base_config("tiny")
    unknown = set(shape) - set(cfg)
    if unknown:
        raise ValueError(f"unknown config fields {sorted(unknown)}")
    cfg.update(DEFAULT_SHAPE)
    cfg.update(shape)
    cfg["max_window_layers"] = cfg["num_hidden_layers"]
    cfg["torch_dtype"] = "bfloat16"
    Qwen3Config.from_dict(cfg)  # validates
    return cfg


def build_model(cfg: dict, seed: int = 0, init: bool = True) -> Qwen3ForCausalLM:
    """A float32 ``Qwen3ForCausalLM`` on the CPU, initialized from ``seed`` (module docstring;
    ``init=False``: left uninitialized, for a caller that writes every tensor), in train mode
    with gradients, on the torch path (``use_fused_kernels = False``)."""
    config = Qwen3Config.from_dict(cfg)
    gen = torch.Generator().manual_seed(seed)
    with meta_modules():  # no default init to overwrite
        model = Qwen3ForCausalLM(config)
    model.to_empty(device="cpu")
    if config.tie_word_embeddings:
        model.tie_weights()  # to_empty gave lm_head its own storage
    out_std = INIT_STD / math.sqrt(2 * config.num_hidden_layers)
    with torch.no_grad():
        for name, p in model.named_parameters() if init else ():  # tied lm_head: once
            if p.ndim == 1:
                p.fill_(1.0)
            else:
                std = out_std if name.endswith(("o_proj.weight", "down_proj.weight")) \
                    else INIT_STD
                p.copy_(torch.randn(p.shape, generator=gen) * std)
    model.use_fused_kernels = False
    return model.float().train().requires_grad_(True)


@functools.lru_cache(maxsize=16)  # one function per shape: torch.compile guards on it
def sdpa_attention(batch: int, seq: int):
    """An ``attn(layer_idx, q, k, v, meta)`` for ``Qwen3ForCausalLM.forward`` over a flat stream
    of ``batch`` x ``seq`` tokens: causal attention within each row of ``seq`` tokens.

    q: [B*S, Hq, D]; k, v: [B*S, Hkv, D] -> [B*S, Hq, D] in v's dtype (under autocast, the
    autocast dtype: SDPA is on autocast's lower-precision list).
    """

    def attn(layer_idx, q, k, v, meta):
        n, hq, d = q.shape
        hkv = k.shape[1]
        dt = v.dtype  # q/k leave the float32 norm + RoPE in float32; v is the matmul's dtype
        q = q.to(dt).view(batch, seq, hq, d).transpose(1, 2)  # (B, Hq, S, D)
        k = k.to(dt).view(batch, seq, hkv, d).transpose(1, 2)  # (B, Hkv, S, D)
        v = v.view(batch, seq, hkv, d).transpose(1, 2)
        group = hq // hkv
        if group > 1:  # (B, Hkv, S, D) -> (B, Hkv * group, S, D), head h reads KV head h // group
            k = k[:, :, None].expand(batch, hkv, group, seq, d).reshape(batch, hq, seq, d)
            v = v[:, :, None].expand(batch, hkv, group, seq, d).reshape(batch, hq, seq, d)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, Hq, S, D)
        return o.transpose(1, 2).reshape(n, hq, d)

    return attn


def forward_batch(model: Qwen3ForCausalLM, ids: torch.Tensor, forward=None) -> torch.Tensor:
    """ids: int64 [B, S] (each row one sequence from position 0) -> final-norm hidden states
    [B*S, hidden], row-major (row b's token t is row b*S + t). ``forward`` replaces
    ``model.forward`` (a ``torch.compile``d one)."""
    b, s = ids.shape
    positions = torch.arange(s, device=ids.device).repeat(b)
    return (forward or model.forward)(ids.reshape(-1), positions, sdpa_attention(b, s), None)


def save_checkpoint(model: Qwen3ForCausalLM, cfg: dict, out: str | Path,
                    tokenizer_dir: str | Path) -> Path:
    """Write ``model`` in the Hugging Face layout: config.json (``cfg``), model.safetensors in
    bfloat16 under the HF tensor names (no ``lm_head.weight``: tied), generation_config.json and
    the tokenizer files of ``tokenizer_dir``.

    Raises:
        ValueError: ``tokenizer_dir`` has no tokenizer.json, or ``out`` is a file.
    """
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{out} exists and is not a folder: give a new or an existing folder")
    if not (Path(tokenizer_dir) / "tokenizer.json").is_file():
        raise ValueError(f"no tokenizer.json in {tokenizer_dir}: pass --tokenizer DIR")
    out.mkdir(parents=True, exist_ok=True)
    targets = checkpoint_targets(model)
    specs = [(name, shape) for name, shape, _ in tensor_specs(cfg)]
    assert {n for n, _ in specs} == set(targets), "config and model disagree on the tensors"
    params = dict(model.named_parameters())

    def make(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        pname, lo, hi = targets[name]
        t = params[pname].detach()[lo:hi]
        assert tuple(t.shape) == tuple(shape), (name, tuple(t.shape), shape)
        return t.to(torch.bfloat16).cpu()

    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    write_generation_config(out)
    copy_tokenizer(Path(tokenizer_dir), out)
    write_checkpoint_files(out, specs, torch.bfloat16, make, shards=1)
    return out
