"""INT8 KV-cache quality on real activations: KL(bf16 || int8) of next-token distributions.

    PYTHONPATH=. python benchmarks/int8_kl.py --model checkpoints/qwen3-small-trained \\
        [--positions 4096,32768] [--window 512] [--chunk 2048] [--texts DIR] [--report F]

The checkpoint (a trained one: ``benchmarks/train_small_qwen3.py``) is loaded once and two
``Engine``s are built on it, ``kv_cache="bf16"`` and ``"int8"``, each with its own pool of
``ctx`` = the largest target (attention ``--attention``, default auto: the Triton kernels on
CUDA, the reference on the CPU; prefill only, so no CUDA graphs). The tokens are the held-out texts
(``benchmarks/heldout_texts.held_out_texts``, never trained on) as one stream, repeated until it
is long enough. Both engines prefill the same chunks of ``--chunk`` tokens (cut at every target
too) through the model's forward with the engine's attention over its own pool, as
``Session._forward`` does, but keeping every row's hidden state. For each target T the rows at
positions ``T - window .. T - 1`` get float32 logits (``compute_logits``, the tokenizer's
``vocab_limit`` ids) from both caches; per row, KL(p_bf16 || p_int8) in float64 and whether the
two argmaxes agree; per cache, the mean NLL of the actual next tokens.

One JSON line per target (after the device line): ``mean_kl``, ``p99_kl``, ``max_kl`` (nats),
``top1_agree`` (fraction), ``flips`` (rows whose argmaxes differ), ``flip_margin_median`` and
``margin_median`` (the reference's top-1 minus top-2 probability, median over the flipped rows and
over all rows: a flip at a near-tie costs little), ``nll_bf16``, ``nll_int8``; that set once
per ``--balance`` mode (``models/key_balance.py``). With ``--noise-floor``, the same set for
BF16 against BF16 through the torch reference attention (``bf16_noise_floor``: ``run_kl``).
Then one ``kv_channels`` line: the last
mode's BF16 pool's keys and values over all prefilled positions, per layer, outlier-channel
ratios and the INT8 rounding error (``benchmarks/kv_outliers.py``). NOTE: a model trained on
rows of 512 or 2048 tokens has never seen positions near 32k; its NLL says how well it still
predicts there.
Seconds on a GPU for the small model; runs on the CPU with tiny sizes (the tests).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.heldout_texts import held_out_texts, token_stream  # noqa: E402
from benchmarks.kv_outliers import channel_stats  # noqa: E402
from benchmarks.run_info import run_info  # noqa: E402
from infer import Engine, EngineConfig  # noqa: E402
from infer.meta import build_meta, grow_pages  # noqa: E402
from models.checkpoint_folder import read_config  # noqa: E402
from models.key_balance import MODES as BALANCE_MODES  # noqa: E402
from models.key_balance import balance_keys  # noqa: E402
from models.loader import load_model  # noqa: E402
from models.random_checkpoint import SHARED  # noqa: E402
from models.tokenizer import Qwen3Tokenizer  # noqa: E402

DEFAULT_TEXTS = SHARED / "data" / "texts"
_KL_ROWS = 128  # rows per float64 KL block


class ChunkRunner:
    """One sequence prefilled chunk by chunk into an engine's pool, all rows' hidden states kept.

    ``run(ids)`` is ``Session._forward`` without the cut to the last row: grow the sequence's
    pages, ``build_meta`` for the chunk after the cached positions, the model's forward with the
    engine's attention backend (which stores the chunk's K/V, quantized for an INT8 pool)."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.pages: list[int] = []
        self.cached = 0

    @torch.inference_mode()
    def run(self, ids: list[int]) -> torch.Tensor:
        """ids: the next chunk's tokens -> hidden states [len(ids), hidden] (model dtype)."""
        eng = self.engine
        grow_pages(eng.pool, self.pages, self.cached + len(ids))
        meta = build_meta([(self.pages, self.cached, len(ids))], eng.config.page_size,
                          eng.device)
        x = torch.tensor(ids, dtype=torch.int64, device=eng.device)
        hidden = eng.model.forward(x, meta.positions, eng.attn, meta)
        self.cached += len(ids)
        return hidden


def make_engine(model, tokenizer, folder, kv_cache: str, ctx: int, device: torch.device,
                attention: str = "auto", chunk: int = 2048, page_size: int = 64) -> Engine:
    """An ``Engine`` over the loaded ``model`` with a ``kv_cache`` pool of ``ctx`` positions."""
    cfg = EngineConfig(str(folder), ctx=ctx, kv_cache=kv_cache, page_size=page_size,
                       device=str(device), attention=attention, cuda_graphs=False,
                       prefill_chunk=chunk)
    return Engine(cfg, model=model, tokenizer=tokenizer)


def chunk_bounds(end: int, chunk: int, cuts: list[int]) -> list[tuple[int, int]]:
    """[start, stop) pairs covering ``0..end``: every ``chunk`` tokens and at each of ``cuts``."""
    edges = sorted({0, end, *range(0, end, chunk), *(c for c in cuts if 0 < c < end)})
    return list(zip(edges[:-1], edges[1:], strict=True))


def _kl_rows(ref: torch.Tensor, test: torch.Tensor) -> torch.Tensor:
    """Per row KL(softmax(ref) || softmax(test)) in float64, clamped at 0 (rounding)."""
    out = []
    for s in range(0, ref.shape[0], _KL_ROWS):
        lp = torch.log_softmax(ref[s:s + _KL_ROWS].double(), dim=-1)
        lq = torch.log_softmax(test[s:s + _KL_ROWS].double(), dim=-1)
        out.append((lp.exp() * (lp - lq)).sum(-1).clamp_min(0.0))
    return torch.cat(out)


def compare(model, ref: ChunkRunner, test: ChunkRunner, ids: list[int], targets: list[int],
            window: int, chunk: int, vocab_limit: int) -> list[dict]:
    """Prefill ``ids`` through both runners and compare at each target (module docstring).

    ``ids`` must hold at least ``max(targets) + 1`` tokens (the last row's next token)."""
    targets = sorted(targets)
    assert len(ids) > targets[-1] and all(t >= window for t in targets)
    stats = {t: {"kl": [], "agree": [], "margin": [], "nll_ref": [], "nll_test": []}
             for t in targets}
    cuts = targets + [t - window for t in targets]
    for s, e in chunk_bounds(targets[-1], chunk, cuts):
        h_ref, h_test = ref.run(ids[s:e]), test.run(ids[s:e])
        for t in targets:
            lo, hi = max(s, t - window), min(e, t)
            if lo >= hi:
                continue
            with torch.inference_mode():
                a = model.compute_logits(h_ref[lo - s:hi - s])[:, :vocab_limit]
                b = model.compute_logits(h_test[lo - s:hi - s])[:, :vocab_limit]
            nxt = torch.tensor(ids[lo + 1:hi + 1], device=a.device)
            st = stats[t]
            st["kl"].append(_kl_rows(a, b))
            st["agree"].append(a.argmax(-1) == b.argmax(-1))
            top2 = torch.softmax(a.float(), -1).topk(2, dim=-1).values
            st["margin"].append(top2[:, 0] - top2[:, 1])
            st["nll_ref"].append(torch.nn.functional.cross_entropy(a, nxt, reduction="none"))
            st["nll_test"].append(torch.nn.functional.cross_entropy(b, nxt, reduction="none"))
    records = []
    for t in targets:
        st = {k: torch.cat(v) for k, v in stats[t].items()}
        kl = st["kl"]
        records.append({"positions": t, "window": window, "rows": kl.numel(),
                        "mean_kl": _sig(kl.mean()), "p99_kl": _sig(kl.quantile(0.99)),
                        "max_kl": _sig(kl.max()),
                        "top1_agree": round(float(st["agree"].float().mean()), 5),
                        "flips": int((~st["agree"]).sum()),
                        "flip_margin_median": _sig(st["margin"][~st["agree"]].median())
                        if not bool(st["agree"].all()) else None,
                        "margin_median": _sig(st["margin"].median()),
                        "nll_ref": round(float(st["nll_ref"].double().mean()), 4),
                        "nll_test": round(float(st["nll_test"].double().mean()), 4)})
    return records


def _sig(x) -> float:
    return float(f"{float(x):.6g}")


def heldout_ids(texts: str | Path, tokenizer, n: int) -> tuple[list[int], int]:
    """The held-out token stream repeated to at least ``n`` tokens, and the stream's length."""
    stream = token_stream(held_out_texts(texts), tokenizer)
    reps = -(-n // len(stream))
    return (stream * reps)[:max(n, len(stream))], len(stream)


def run_kl(folder, positions: list[int], *, texts=DEFAULT_TEXTS, window: int = 512,
           chunk: int = 2048, device: str | None = None, attention: str = "auto",
           page_size: int = 64, caches: tuple[str, str] = ("bf16", "int8"),
           balance: tuple[str, ...] = ("off",), test_attention: str | None = None,
           what: str = "int8_kl", channels: bool = True) -> list[dict]:
    """Load ``folder``, build the two engines (``caches``: reference first; the second with
    ``test_attention`` if given, else ``attention``) and return one record per target of
    ``positions`` (``compare``), each tagged ``"what": what``; once per key-balance mode of
    ``balance`` (``models.key_balance``: the model loaded again and its key-channel scales folded
    into ``q_norm``/``k_norm``; ``"off"`` leaves it as stored). ``channels``: then the
    ``kv_channels`` record of a BF16 reference pool.

    The noise floor (``--noise-floor``): ``caches=("bf16", "bf16")`` with the Triton kernels
    against ``test_attention="reference"`` (torch over the same pool): how often two correct BF16
    attentions, differing only in their rounding, disagree on the top-1 token. INT8's flips are
    read against that.

    Raises:
        ValueError: a target shorter than ``window`` or past the model's native positions, or an
            unknown balance mode.
    """
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    config = read_config(folder)
    limit = config.max_position_embeddings
    if min(positions) < window or max(positions) > limit:
        raise ValueError(f"--positions must be in [{window} (--window), {limit} (the model's "
                         f"max_position_embeddings)], got {positions}")
    for mode in balance:
        if mode not in BALANCE_MODES:
            raise ValueError(f"--balance modes are {', '.join(BALANCE_MODES)}, got {mode!r}")
    tok = Qwen3Tokenizer.from_folder(folder)
    ids, stream_len = heldout_ids(texts, tok, max(positions) + 1)
    ctx = max(positions)
    out = []
    for mode in balance:
        model = load_model(folder, device=dev, dtype=dtype)
        scales = balance_keys(model, mode)
        ref, test = (ChunkRunner(make_engine(model, tok, folder, kv, ctx, dev, att, chunk,
                                             page_size))
                     for kv, att in zip(caches, (attention, test_attention or attention),
                                        strict=True))
        records = compare(model, ref, test, ids, positions, window, chunk, tok.vocab_limit)
        extra = {"what": what, "ref": caches[0], "test": caches[1], "balance": mode,
                 "max_key_scale": max(float(s.max()) for s in scales), "chunk": chunk,
                 "attention": ref.engine.attention_kind,
                 "test_attention": test.engine.attention_kind,
                 "dtype": str(dtype).removeprefix("torch."), "heldout_tokens": stream_len,
                 "model": str(folder)}
        for r in records:
            if caches[0] != caches[1]:  # else nll_ref and nll_test
                r["nll_" + caches[0]], r["nll_" + caches[1]] = r.pop("nll_ref"), r.pop("nll_test")
            out.append({**extra, **r})
        if mode != balance[-1]:
            del model, ref, test
    if channels and ref.engine.pool.kv_dtype == "bf16":
        layers = channel_stats(ref.engine.pool, ref.pages, ref.cached)
        out.append({"what": "kv_channels", "positions": ref.cached, "model": str(folder),
                    "balance": balance[-1],
                    "max_k_outlier": max(x["k_outlier"] for x in layers),
                    "max_v_outlier": max(x["v_outlier"] for x in layers),
                    "layers": layers})
    return out


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="checkpoint folder (HF layout)")
    p.add_argument("--positions", default="4096,32768", help="target lengths, comma-separated")
    p.add_argument("--window", type=int, default=512, help="rows compared before each target")
    p.add_argument("--chunk", type=int, default=2048, help="prefill chunk (tokens)")
    p.add_argument("--texts", default=str(DEFAULT_TEXTS))
    p.add_argument("--device", default=None, help="default: cuda if available")
    p.add_argument("--attention", default="auto", choices=("auto", "reference", "triton"))
    p.add_argument("--page-size", type=int, default=64)
    p.add_argument("--balance", default="off",
                   help="key-balance modes, comma-separated (models/key_balance.py): "
                   "off, norm, proj")
    p.add_argument("--noise-floor", action="store_true",
                   help="also BF16 with --attention against BF16 with the torch reference "
                   "attention (bf16_noise_floor records: run_kl)")
    p.add_argument("--report", default=None, help="also write the JSON lines to this file")
    args = p.parse_args(argv)
    try:
        positions = sorted({int(x) for x in args.positions.split(",") if x.strip()})
    except ValueError:
        p.error(f"--positions must be comma-separated integers, got {args.positions!r}")
    if not positions or args.window < 1 or args.chunk < 1:
        p.error("give at least one --positions, --window >= 1 and --chunk >= 1")
    try:
        dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    except RuntimeError as e:
        p.error(f"--device: {e}")
    if dev.type not in ("cpu", "cuda") or (dev.type == "cuda" and not torch.cuda.is_available()):
        p.error(f"--device {dev}: this machine runs on cpu"
                + (" or cuda" if torch.cuda.is_available() else " only (no CUDA GPU)"))
    if args.attention == "triton" and dev.type != "cuda":
        p.error("--attention triton needs --device cuda (the reference runs on the CPU)")
    if args.report and not Path(args.report).resolve().parent.is_dir():
        p.error(f"--report {args.report}: its folder does not exist")
    records = [run_info(dev)]
    print(json.dumps(records[0]), flush=True)
    try:
        results = run_kl(args.model, positions, texts=args.texts, window=args.window,
                         chunk=args.chunk, device=str(dev), attention=args.attention,
                         page_size=args.page_size,
                         balance=tuple(x.strip() for x in args.balance.split(",") if x.strip()))
        if args.noise_floor:
            results += run_kl(args.model, positions, texts=args.texts, window=args.window,
                              chunk=args.chunk, device=str(dev), attention=args.attention,
                              page_size=args.page_size, caches=("bf16", "bf16"),
                              test_attention="reference", what="bf16_noise_floor",
                              channels=False)
    except (ValueError, FileNotFoundError) as e:
        p.error(str(e))
    for r in results:
        print(json.dumps(r), flush=True)
    records += results
    if args.report:
        Path(args.report).write_text("".join(json.dumps(r) + "\n" for r in records))
    return records


if __name__ == "__main__":
    main()
