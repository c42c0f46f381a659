"""GPU tests on the small Qwen3 trained by ``benchmarks/train_small_qwen3.py``.

Random weights copy nothing, so prompt lookup's drafts are rarely accepted there; the trained
model accepts them on real text, which is where a verify step that differs from the one-row step
by one rounding would change the reply. With the trained checkpoint's folder in
``$INFER_TRAINED_MODEL`` (``benchmarks/gpu_check.sh`` sets it after its ``train`` step): greedy
decoding with speculation equals decoding without over 1000 tokens of a held-out chapter, BF16
and INT8, and drafts were accepted (so the check compared verify steps, not plain steps).
Without the variable the tests skip and say why: the weights are made on the GPU, never stored
in git.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from infer import Engine, EngineConfig, SamplingParams
from models.tokenizer import Qwen3Tokenizer

TRAINED = os.environ.get("INFER_TRAINED_MODEL")

needs_trained = pytest.mark.skipif(
    not TRAINED, reason="set INFER_TRAINED_MODEL to a checkpoint of "
    "benchmarks/train_small_qwen3.py (trained on the GPU, not in git)")


def _held_out_prompt(tok: Qwen3Tokenizer, texts_dir: Path, tokens: int) -> list[int]:
    """The first ``tokens`` tokens of the first held-out chapter (never trained on)."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.heldout_texts import held_out_texts

    ids = tok.encode(held_out_texts(texts_dir)[0])
    assert len(ids) >= tokens, f"held-out text has only {len(ids)} tokens"
    return ids[:tokens]


@pytest.mark.gpu
@needs_trained
@pytest.mark.parametrize("kv_cache", ["bf16", "int8"])
def test_gpu_trained_speculation_equals_plain_over_1000_tokens(texts_dir, kv_cache):
    tok = Qwen3Tokenizer.from_folder(TRAINED)
    prompt = _held_out_prompt(tok, texts_dir, 3000)
    eng = Engine(EngineConfig(TRAINED, ctx=8192, kv_cache=kv_cache, device="cuda",
                              attention="triton", cuda_graphs=True))
    sp = SamplingParams(temperature=0.0, max_new_tokens=1000, ignore_eos=True)
    plain_session = eng.new_session()
    plain = list(plain_session.generate(prompt, sp))
    s = eng.new_session()
    spec = list(s.generate(prompt, sp, speculate=True))
    assert len(plain) == 1000
    first_diff = next((i for i, (a, b) in enumerate(zip(plain, spec, strict=False))
                       if a != b), None)
    assert spec == plain, f"first difference at token {first_diff}"
    assert s.stats.accepted > 0 and s.stats.verify_steps > 0
