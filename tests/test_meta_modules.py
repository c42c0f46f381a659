"""``models/meta_modules.py``: modules built inside ``meta_modules`` live on the meta device and
skip their initializers; the initializers come back on exit (also after an error); loading a
checkpoint no longer imports ``torch._dynamo`` (about 0.9 s of start-up)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from models.meta_modules import SKIPPED, meta_modules

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


def test_loading_does_not_import_dynamo(tiny_ckpt):
    code = ("import sys; from models.loader import load_model; load_model(sys.argv[1]); "
            "print('torch._dynamo' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(tiny_ckpt)], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
