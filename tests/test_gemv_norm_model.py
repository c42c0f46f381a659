"""``models.qwen3_fused.NORM_IN_GEMV`` (the RMSNorms folded into the decode GEMVs of
``kernels/gemv_norm.py``) in the tiny Qwen3's fused forward, on the CPU: the torch path's result
at 1 and 5 tokens with two RMSNorm launches a step instead of ``2 * layers + 1``, unused for a
17-token step and where split-K tiles would be picked (the policy ``norm_in_gemv``, also on the
Qwen3-8B's shapes at 132 and 200 SMs). The kernels themselves: ``tests/test_gemv_norm.py``.
"""

from __future__ import annotations

import pytest
import torch

import kernels.gemv
from kernels.tiles import GemvTiles

SPLIT = GemvTiles(16, 16, 1, split_k=2)


@pytest.fixture(scope="module")
def tiny512(tiny_ckpt_factory):
    from models.loader import load_model

    return load_model(tiny_ckpt_factory(vocab_size=512), device="cpu", dtype=torch.float32)


def _fused_with_count(model, ids, pos, monkeypatch):
    """The fused forward's result and how many times it launched ``rmsnorm``."""
    import models.qwen3_fused as fused

    calls = []
    real = fused.rmsnorm

    def counted(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(fused, "rmsnorm", counted)
    with torch.no_grad():
        out = model._forward_fused(model.model.embed_tokens(ids), pos, None, None)
    monkeypatch.setattr(fused, "rmsnorm", real)
    return out, len(calls)


@pytest.mark.parametrize("tokens", [1, 5, 17])
def test_model_norm_in_gemv_matches_torch_path(tiny512, tokens, monkeypatch):
    """The tiny Qwen3's fused forward with ``NORM_IN_GEMV``: the torch path's result; a decode
    step (1 to 16 tokens) launches only the first input norm and the final norm, a longer step
    (cuBLAS) every norm, as with the flag off."""
    import models.qwen3_fused as fused

    model = tiny512
    layers = model.config.num_hidden_layers
    ids, pos = torch.randint(0, 512, (tokens,)), torch.arange(tokens) + 30
    with torch.no_grad():
        plain = model.forward(ids, pos)
    monkeypatch.setattr(fused, "NORM_IN_GEMV", False)
    off, norms_off = _fused_with_count(model, ids, pos, monkeypatch)
    monkeypatch.setattr(fused, "NORM_IN_GEMV", True)
    on, norms_on = _fused_with_count(model, ids, pos, monkeypatch)
    assert norms_off == 2 * layers + 1
    assert norms_on == (2 if tokens <= 16 else 2 * layers + 1)
    torch.testing.assert_close(on, plain, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(off, plain, rtol=1e-4, atol=1e-4)


def test_norm_in_gemv_policy(tiny512, monkeypatch):
    import models.qwen3_fused as fused

    x1, x16, x17 = (torch.randn(t, tiny512.config.hidden_size) for t in (1, 16, 17))
    monkeypatch.setattr(fused, "NORM_IN_GEMV", False)
    assert not fused.norm_in_gemv(tiny512, x1)
    monkeypatch.setattr(fused, "NORM_IN_GEMV", True)
    assert fused.norm_in_gemv(tiny512, x1) and fused.norm_in_gemv(tiny512, x16)
    assert not fused.norm_in_gemv(tiny512, x17)
    assert not fused.norm_in_gemv(tiny512, x1[:0])

    def split_tiles(device, dtype, n, k, swiglu):  # as a GPU gives the small models' o_proj
        return GemvTiles(16, 16, 1) if swiglu else SPLIT

    monkeypatch.setattr(kernels.gemv, "gemv_tiles", split_tiles)
    assert not fused.norm_in_gemv(tiny512, x1)

    qkv_rows = tiny512.model.layers[0].self_attn.qkv_proj.weight.shape[0]

    def split_qkv_only(device, dtype, n, k, swiglu):  # more SMs: qkv splits, o_proj does not
        return SPLIT if n == qkv_rows and not swiglu else GemvTiles(16, 16, 1)

    monkeypatch.setattr(kernels.gemv, "gemv_tiles", split_qkv_only)
    assert not fused.norm_in_gemv(tiny512, x1)


def test_the_8b_keeps_its_norms_apart_on_a_gpu_that_would_split_its_qkv():
    """The real tile policy on the Qwen3-8B's shapes: on 132 SMs (an H100/H200) no weight of the
    pair splits and the norms go into the GEMVs; on 200 SMs the qkv (96 row blocks) would split
    while o_proj (128) would not, and the step keeps the unfused path (``gemv_rstd`` refuses
    split-K tiles)."""
    from types import SimpleNamespace

    from launch_specs import gpu_facts

    import models.qwen3_fused as fused

    def weight(n, k):
        return SimpleNamespace(weight=torch.empty(n, k, dtype=torch.bfloat16, device="meta"))

    layer = SimpleNamespace(self_attn=SimpleNamespace(qkv_proj=weight(6144, 4096),
                                                      o_proj=weight(4096, 4096)),
                            mlp=SimpleNamespace(down_proj=weight(4096, 12288)))
    model = SimpleNamespace(model=SimpleNamespace(layers=[layer]))
    x = torch.empty(1, 4096, dtype=torch.bfloat16, device="meta")
    with gpu_facts(sms=132):
        assert fused.norm_in_gemv(model, x)
    with gpu_facts(sms=200):
        assert kernels.gemv.gemv_tiles(x.device, x.dtype, 6144, 4096, False).split_k == 2
        assert kernels.gemv.gemv_tiles(x.device, x.dtype, 4096, 4096, False).split_k == 1
        assert not fused.norm_in_gemv(model, x)
