"""``models/meta_modules.py``: modules built inside ``meta_modules`` live on the meta device and
skip their initializers; the initializers come back on exit (also after an error); ``to_empty``
gives what ``Module.to_empty`` gives; loading a checkpoint imports neither ``torch._dynamo``
(about 0.9 s of start-up) nor sympy (``torch.fx.experimental.symbolic_shapes``, about 0.3 s)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from models.meta_modules import SKIPPED, empty, meta_modules, to_empty

REPO = Path(__file__).resolve().parents[1]


def test_modules_on_meta_without_init_then_restored():
    before = [cls.reset_parameters for cls in SKIPPED]
    calls = []
    with meta_modules():
        lin = torch.nn.Linear(8, 4)
        emb = torch.nn.Embedding(10, 4)
        lin.reset_parameters()  # a no-op inside
        calls.append(lin.weight.device.type)
    assert calls == ["meta"] and emb.weight.is_meta
    assert [cls.reset_parameters for cls in SKIPPED] == before
    fresh = torch.nn.Linear(8, 4)  # outside: initialized on the CPU again
    assert fresh.weight.device.type == "cpu" and fresh.weight.abs().sum() > 0


def test_restored_after_an_error():
    before = [cls.reset_parameters for cls in SKIPPED]
    with pytest.raises(RuntimeError, match="boom"), meta_modules():
        raise RuntimeError("boom")
    assert [cls.reset_parameters for cls in SKIPPED] == before
    assert torch.empty(1).device.type == "cpu"


def _layout(module: torch.nn.Module) -> list:
    return [(name, type(t), t.shape, t.stride(), t.dtype, t.device, t.requires_grad)
            for name, t in [*module.named_parameters(remove_duplicate=False),
                            *module.named_buffers(remove_duplicate=False)]]


def test_to_empty_is_module_to_empty():
    def build() -> torch.nn.Module:
        with meta_modules():
            m = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 6),
                                    torch.nn.BatchNorm1d(6))  # a buffer too
        m[1].weight.requires_grad_(False)
        return m.to(torch.bfloat16)

    ours, torchs = build(), build()
    assert to_empty(ours, "cpu") is ours
    torchs.to_empty(device="cpu")
    assert _layout(ours) == _layout(torchs)
    assert {device.type for *_, device, _ in _layout(ours)} == {"cpu"}
    t = torch.empty(3, 5, device="meta").t()  # strides kept, as empty_like keeps them
    assert empty(t).stride() == torch.empty_like(t).stride() and empty(t).is_meta


def test_loading_does_not_import_dynamo_or_sympy(tiny_ckpt):
    code = ("import sys; from models.loader import load_model; load_model(sys.argv[1]); "
            "print([m for m in ('torch._dynamo', 'sympy') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code, str(tiny_ckpt)], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
