"""128k positions on the GPU (``-m gpu``): a scaled-down Qwen3 (2 layers, the tiny shapes) with
YaRN factor 4 prefills 131040 tokens and decodes through the Triton kernels, against the same
model on the reference attention (``kernels/reference.py``, float32 scores): the last prefill
row's logits and each decode step's logits agree, and nothing anywhere is NaN or infinite. BF16
and INT8 caches."""

from __future__ import annotations

import pytest
import torch
from mock_engine import NO_STOP

from infer import Engine, EngineConfig
from infer.meta import build_meta, grow_pages

CTX = 131072
YARN = {"rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                         "original_max_position_embeddings": 32768},
        "max_position_embeddings": CTX}


@pytest.fixture(scope="module")
def yarn_model(tiny_ckpt_factory):
    from models.loader import load_model

    folder = tiny_ckpt_factory(dtype="bfloat16", overrides=YARN)
    model = load_model(folder, device="cuda", dtype=torch.bfloat16)
    yield model
    del model
    torch.cuda.empty_cache()


def run(model, attention: str, kv_cache: str, prompt: list[int], steps: list[int]):
    """The last prompt row's logits, then each fed token's logits (float32 [1 + len(steps), V])."""
    cfg = EngineConfig("unused", ctx=CTX, kv_cache=kv_cache, device="cuda", attention=attention,
                       cuda_graphs=False)
    eng = Engine(cfg, model=model, tokenizer=NO_STOP)
    s = eng.new_session()
    hidden, _ = s._prefill(prompt, None)
    with torch.inference_mode():
        rows = [model.compute_logits(hidden)]
        for tok in steps:  # one-token decode steps through the attention backend
            pos = s.num_cached
            grow_pages(eng.pool, s._pages, pos + 1)
            meta = build_meta([(s._pages, pos, 1)], eng.config.page_size, "cuda")
            h = model.forward(torch.tensor([tok], device="cuda"), meta.positions, eng.attn, meta)
            s._ids.append(tok)
            rows.append(model.compute_logits(h))
    out = torch.cat(rows)
    del s, eng
    torch.cuda.empty_cache()
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_gpu_prefill_and_decode_at_128k_match_the_reference(yarn_model, kv_cache):
    g = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, 151669, (CTX - 32,), generator=g).tolist()
    steps = torch.randint(0, 151669, (8,), generator=g).tolist()
    got = run(yarn_model, "triton", kv_cache, prompt, steps)
    want = run(yarn_model, "reference", kv_cache, prompt, steps)
    assert torch.isfinite(got).all() and torch.isfinite(want).all()
    err = (got - want).norm(dim=-1) / want.norm(dim=-1)
    assert err.max() < 2e-2, err.tolist()  # bf16 activations; identical math otherwise
