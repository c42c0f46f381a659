"""A mock model and engine for the engine's CPU tests (``test_engine``, ``test_graphs``,
``test_batch``): ``SumModel``'s next token is a known function of everything in its KV cache, so
any stale, missing or misplaced K/V shows up as a wrong token. Also what the runner's tests on
random tiny Qwen3 models share (``test_graphs``, ``test_graphs_gpu``): a tokenizer stand-in
without stop ids, sampling parameters that use every filter, random prompts."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from infer import Engine, EngineConfig, SamplingParams
from models.config import Qwen3Config

V = 50  # SumModel vocabulary
GREEDY = SamplingParams(temperature=0.0)


class SumModel(torch.nn.Module):
    """Next token = (sum of all ids at positions 0..p + 1) % V, computed through the KV pool.

    Each token stores v = [id, 1] and k = 0; with q = 0 attention is a uniform average over the
    cached positions, so ``o[0] * (p + 1)`` is the sum of the cached ids.
    """

    def __init__(self, fail_on_call: int | None = None):
        super().__init__()
        self.config = Qwen3Config(vocab_size=V, hidden_size=2, intermediate_size=2,
                                  num_hidden_layers=1, num_attention_heads=1,
                                  num_key_value_heads=1, head_dim=2)
        self.calls: list[int] = []  # tokens per forward
        self.logit_rows: list[int] = []
        self.fail_on_call = fail_on_call

    def forward(self, input_ids, positions, attn, meta):
        t = input_ids.shape[0]
        v = torch.stack([input_ids.float(), torch.ones(t)], dim=-1)[:, None, :]  # [T, 1, 2]
        o = attn(0, torch.zeros(t, 1, 2), torch.zeros(t, 1, 2), v, meta)
        self.calls.append(t)
        if self.fail_on_call is not None and len(self.calls) == self.fail_on_call:
            raise KeyboardInterrupt  # after K/V were stored: a Ctrl-C mid-step
        return o[:, 0, :1] * (positions.float() + 1)[:, None]  # [T, 1]

    def compute_logits(self, hidden):
        self.logit_rows.append(hidden.shape[0])
        target = (hidden[:, 0].round().long() + 1) % V
        return torch.nn.functional.one_hot(target, V).float() * 10.0


def expected(prompt: list[int], n: int, stop: set[int] = frozenset()) -> list[int]:
    ids, out = list(prompt), []
    for _ in range(n):
        tok = (sum(ids) + 1) % V
        if tok in stop:
            break
        out.append(tok)
        ids.append(tok)
    return out


def mock_engine(ctx=256, page_size=16, chunk=512, stop=(), model=None, max_batch=1):
    tok = SimpleNamespace(stop_ids=set(stop), vocab_limit=V)
    cfg = EngineConfig("unused", ctx=ctx, page_size=page_size, prefill_chunk=chunk,
                       device="cpu", attention="reference", max_batch=max_batch)
    return Engine(cfg, model=model or SumModel(), tokenizer=tok)


def prompt_of(n: int, seed: int = 0) -> list[int]:
    return torch.randint(0, V, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


VOCAB_LIMIT = 151669
NO_STOP = SimpleNamespace(stop_ids=set(), vocab_limit=VOCAB_LIMIT)  # random models: no early stop
SAMPLED = SamplingParams(temperature=0.8, top_k=50, top_p=0.9, min_p=0.01, presence_penalty=0.5)


def random_ids(n: int, seed: int = 0, high: int = VOCAB_LIMIT) -> list[int]:
    return torch.randint(0, high, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def greedy_by_flag(model, kv_cache: str, monkeypatch, module, flag: str, tokens: int = 40,
                   device: str = "cuda", sp: SamplingParams | None = None
                   ) -> dict[tuple[bool, bool], list[int]]:
    """Greedy tokens (or ``sp``'s: a seeded sampling) of a 100-token random prompt through the
    engine (Triton attention, a ``model`` on ``device``) for each value of ``module.flag`` and
    with CUDA graphs and eagerly: ``{(flag value, graphs): tokens}``, for a flag that must not
    change a token."""
    prompt = random_ids(100)
    sp = sp or SamplingParams(temperature=0.0, max_new_tokens=tokens)
    out = {}
    for value in (False, True):
        monkeypatch.setattr(module, flag, value)
        for graphs in (False, True):
            cfg = EngineConfig("unused", ctx=512, kv_cache=kv_cache, page_size=16,
                               device=device, attention="triton", cuda_graphs=graphs)
            eng = Engine(cfg, model=model, tokenizer=NO_STOP)
            out[value, graphs] = list(eng.new_session().generate(prompt, sp))
    return out
