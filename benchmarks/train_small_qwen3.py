"""Train a small Qwen3 on the public-domain texts, save it in the HF layout, evaluate it.

    PYTHONPATH=. python benchmarks/train_small_qwen3.py --out checkpoints/qwen3-small-trained \\
        [--texts DIR] [--tokenizer DIR] [--steps 2600] [--minutes 4.5] [--seed 0] [--report F]

The model is ``models/qwen3.py``'s Qwen3 (``benchmarks/small_lm.py``): hidden 512, 8 layers, 8
query / 4 KV heads of 64, intermediate 1536, tied embeddings, the real 151936-token vocabulary and
tokenizer (about 103M parameters, 78M of them the embedding). It trains in plain torch on the
training part of ``--texts`` (``benchmarks/heldout_texts.py``: the last ~5 % of each file, from a
chapter heading on, is held out; ``held_out_texts`` is that split), about 1.03M tokens.

The training loop (AdamW, warmup and cosine decay, copying rows, the ``--minutes`` bound) is
``benchmarks/small_lm_train.py``'s ``train``. With ``--grow-hidden H`` the trained model is then
widened to hidden H (and ``--grow-intermediate``) without changing its function
(``benchmarks/small_lm_grow.py``) and trained on for ``--grow-steps`` at that width: a model that
learned to copy at a width where that is quick, made wide enough that its decode is bound by
its weight bytes; the saved checkpoint is the grown one. Seeded: the same ``--seed`` gives the
same initial weights (drawn on the CPU) and the same batches; with ``--deterministic`` (the
default) the GPU kernels are deterministic too, so a run that is not time-bound gives the same
weights again on the same GPU and software.

Afterwards it prints one JSON line per measurement, and writes them to ``--report``: the device,
``train`` (steps, tokens, final loss, seconds, tokens/s), ``saved``, ``heldout_loss``,
``induction``, ``copy`` (``benchmarks/small_lm_eval.py``) and ``load_check`` (the saved folder
through ``models.loader.load_model`` against the training model: max abs logit difference).
About 5 minutes on one H200 with the defaults (2600 steps of 32 x 512 tokens at ~10.4 steps/s,
then ~30 s of evaluation); BENCHMARKS.md has the measured runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.heldout_texts import (  # noqa: E402  (held_out_texts: the split, reused)
    held_out_texts,
    token_stream,
    train_texts,
)
from benchmarks.linear_cross_entropy import DEFAULT_CHUNK  # noqa: E402
from benchmarks.run_info import run_info  # noqa: E402
from benchmarks.small_lm import (  # noqa: E402
    build_model,
    forward_batch,
    save_checkpoint,
    small_config,
)
from benchmarks.small_lm_eval import (  # noqa: E402
    copy_eval,
    copy_samples,
    heldout_loss,
    induction,
    load_check,
    random_induction,
)
from benchmarks.small_lm_grow import grow  # noqa: E402
from benchmarks.small_lm_summaries import summary_rows  # noqa: E402
from benchmarks.small_lm_train import train  # noqa: E402
from models.random_checkpoint import DEFAULT_TOKENIZER_DIR, SHARED  # noqa: E402
from models.tokenizer import Qwen3Tokenizer  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TEXTS = SHARED / "data" / "texts"
DEFAULT_OUT = REPO / "checkpoints" / "qwen3-small-trained"  # git-ignored


@contextlib.contextmanager
def deterministic(on: bool):
    """Deterministic kernels inside the block when ``on`` (``torch.use_deterministic_algorithms``
    with ``warn_only=False``: with warnings only, FlashAttention's backward stays
    non-deterministic); the previous setting is restored after it.

    Raises:
        RuntimeError: an op without a deterministic implementation ran; the message says to pass
            ``--no-deterministic``.
    """
    prev = (torch.are_deterministic_algorithms_enabled(),
            torch.is_deterministic_algorithms_warn_only_enabled())
    if not on:
        yield
        return
    torch.use_deterministic_algorithms(True, warn_only=False)
    try:
        yield
    except RuntimeError as e:
        if "deterministic" in str(e):
            raise RuntimeError(f"{e}\n(train_small_qwen3.py: rerun with --no-deterministic)") \
                from e
        raise
    finally:
        torch.use_deterministic_algorithms(prev[0], warn_only=prev[1])


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a = p.add_argument
    a("--texts", default=str(DEFAULT_TEXTS), help=f"folder of .txt files ({DEFAULT_TEXTS})")
    a("--tokenizer", default=str(DEFAULT_TOKENIZER_DIR), help="folder with tokenizer.json")
    a("--out", default=str(DEFAULT_OUT), help="checkpoint folder to write")
    a("--report", default=None, help="also write the JSON lines to this file")
    a("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a("--seed", type=int, default=0)
    a("--steps", type=int, default=2600)
    a("--minutes", type=float, default=4.5, help="wall-clock cap on the training loop")
    a("--batch", type=int, default=32, help="rows per step")
    a("--seq", type=int, default=512, help="tokens per row")
    a("--long-seq", type=int, default=0,
      help="tokens per row after the --copy-steps, rows per step scaled to keep the tokens "
           "(0: --seq); the summary rows are this long")
    a("--lr", type=float, default=2e-3, help="peak learning rate")
    a("--warmup", type=float, default=0.05, help="warmup, a fraction of the run")
    a("--weight-decay", type=float, default=0.1)
    a("--repeat-frac", type=float, default=0.25,
      help="share of rows that are random tokens repeated (copying)")
    a("--copy-steps", type=int, default=1400, help="first steps with copying rows only")
    a("--copy-chunks", type=float, default=0.5,
      help="share of the copying rows that repeat text chunks of 8-32 tokens, not single tokens")
    a("--summary-frac", type=float, default=0.25,
      help="share of the rows after the copying steps that are summary requests answered by "
           "quoting the text (benchmarks/small_lm_summaries.py)")
    a("--summary-pool", type=int, default=2048, help="distinct summary rows built at start")
    a("--summary-keep", type=float, default=1 / 3,
      help="a summary row's reply quotes the first sentence, then each later one with this "
           "probability (1: the document's opening, verbatim)")
    a("--ce-chunk", type=int, default=DEFAULT_CHUNK, help="rows per cross-entropy chunk")
    a("--compile", action="store_true", help="torch.compile the model's forward")
    a("--deterministic", action=argparse.BooleanOptionalAction, default=True)
    a("--log-every", type=int, default=50)
    a("--eval-every", type=int, default=200, help="held-out loss every N steps (0: off)")
    a("--eval-tokens", type=int, default=16384, help="held-out tokens per progress eval")
    a("--heldout-tokens", type=int, default=0, help="held-out tokens of the final eval (0: all)")
    a("--induction-passages", type=int, default=32)
    a("--induction-length", type=int, default=200)
    a("--copy-samples", type=int, default=16)
    a("--check-tokens", type=int, default=64, help="prompt tokens of the load check")
    for name, default in (("hidden", 512), ("layers", 8), ("heads", 8), ("kv-heads", 4),
                          ("head-dim", 64), ("intermediate", 1536)):
        a(f"--{name}", type=int, default=default)
    a("--grow-hidden", type=int, default=0,
      help="after training, widen the model to this hidden size (benchmarks/small_lm_grow.py) "
           "and train on at that width (0: off)")
    a("--grow-intermediate", type=int, default=0, help="the grown MLP width (0: --intermediate)")
    a("--grow-steps", type=int, default=250, help="training steps after growing")
    a("--grow-minutes", type=float, default=1.0, help="wall-clock cap on those steps")
    a("--grow-lr", type=float, default=3e-4, help="their peak learning rate")
    a("--grow-noise", type=float, default=1e-3, help="std of the grown weights' new entries")
    args = p.parse_args(argv)
    if args.steps < 1 or args.batch < 1 or args.seq < 2 or args.minutes <= 0:
        p.error("--steps, --batch must be >= 1, --seq >= 2 and --minutes > 0")
    if args.long_seq and args.long_seq < args.seq:
        p.error(f"--long-seq must be 0 or >= --seq ({args.seq}), got {args.long_seq}")
    if not 0 <= args.repeat_frac <= 1 or not 0 < args.warmup < 1 or args.copy_steps < 0 \
            or not 0 <= args.copy_chunks <= 1 or not 0 <= args.summary_frac <= 1 \
            or args.summary_pool < 1 or not 0 <= args.summary_keep <= 1:
        p.error("--repeat-frac, --copy-chunks, --summary-frac and --summary-keep must be in "
                "[0, 1], --warmup in (0, 1), --copy-steps >= 0, --summary-pool >= 1")
    if not args.lr > 0 or args.weight_decay < 0:
        p.error("--lr must be > 0 and --weight-decay >= 0")
    if min(args.hidden, args.layers, args.heads, args.kv_heads, args.head_dim,
           args.intermediate) < 1 or args.heads % args.kv_heads:
        p.error("--hidden, --layers, --heads, --kv-heads, --head-dim and --intermediate must be "
                ">= 1, and --heads a multiple of --kv-heads (GQA groups)")
    if args.grow_hidden:
        args.grow_intermediate = args.grow_intermediate or args.intermediate
        if args.grow_hidden < args.hidden or args.grow_intermediate < args.intermediate:
            p.error("--grow-hidden and --grow-intermediate must be >= --hidden and "
                    "--intermediate (a model only grows)")
        if args.grow_steps < 0 or args.grow_minutes <= 0 or not args.grow_lr > 0 \
                or args.grow_noise < 0:
            p.error("--grow-steps must be >= 0, --grow-minutes and --grow-lr > 0, "
                    "--grow-noise >= 0")
    args.log_every = max(1, args.log_every)
    return args


def main(argv=None) -> list[dict]:
    """Run the benchmark; returns the JSON records it printed."""
    args = parse_args(argv)
    dev = torch.device(args.device)
    if args.deterministic:  # read when cuBLAS makes its handle: set before the first matmul
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    records: list[dict] = []
    report = open(args.report, "w") if args.report else None  # noqa: SIM115

    def emit(rec: dict) -> None:
        records.append(rec)
        line = json.dumps(rec)
        print(line, flush=True)
        if report:
            report.write(line + "\n")
            report.flush()

    try:
        run(args, dev, emit)
    finally:
        if report:
            report.close()
    return records


def run(args, dev: torch.device, emit) -> None:
    """Tokenize, train, save, evaluate (``main`` after its setup)."""
    try:
        cfg = small_config(hidden_size=args.hidden, num_hidden_layers=args.layers,
                           num_attention_heads=args.heads, num_key_value_heads=args.kv_heads,
                           head_dim=args.head_dim, intermediate_size=args.intermediate)
        tok = Qwen3Tokenizer.from_folder(args.tokenizer)
        texts = train_texts(args.texts)
        train_ids = token_stream(texts, tok)
        held = held_out_texts(args.texts)
        summaries = (summary_rows(texts, tok, train_ids, args.summary_pool,
                                  (args.long_seq or args.seq) + 1, args.seed,
                                  keep=args.summary_keep) if args.summary_frac > 0 else None)
    except (ValueError, FileNotFoundError) as e:
        sys.exit(f"train_small_qwen3.py: error: {e}")
    held_ids = token_stream(held, tok)
    emit(run_info(dev))
    model = build_model(cfg, args.seed).to(dev)
    assert model.lm_head.weight is model.model.embed_tokens.weight  # still tied
    n_params = sum(p.numel() for p in model.parameters())
    data = torch.tensor(train_ids, dtype=torch.int64, device=dev)
    emit({"what": "config", "params": n_params, "train_tokens": len(train_ids),
          "heldout_tokens": len(held_ids), **{k: cfg[k] for k in (
              "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "head_dim", "intermediate_size", "vocab_size")},
          **{k: getattr(args, k) for k in ("seq", "long_seq", "batch", "steps", "minutes", "lr",
                                           "warmup", "weight_decay", "repeat_frac", "copy_steps",
                                           "copy_chunks", "summary_frac", "summary_keep",
                                           "seed", "compile", "deterministic")},
          "summary_rows": 0 if summaries is None else summaries.shape[0],
          **({k: getattr(args, k) for k in ("grow_hidden", "grow_intermediate", "grow_steps",
                                            "grow_minutes", "grow_lr", "grow_noise")}
             if args.grow_hidden else {})})
    with deterministic(args.deterministic):
        summaries = None if summaries is None else summaries.to(dev)
        emit(train(model, data, args, held_ids, emit, summaries))
        if args.grow_hidden:
            model, cfg = grow_and_train(model, cfg, data, args, held_ids, emit, summaries)
    model.eval().requires_grad_(False)
    out = save_checkpoint(model, cfg, args.out, args.tokenizer)
    emit({"what": "saved", "path": str(out), "bytes": sum(
        f.stat().st_size for f in out.glob("*.safetensors"))})
    amp = torch.autocast("cuda", dtype=torch.bfloat16, enabled=dev.type == "cuda")
    with amp:
        emit(heldout_loss(model, held_ids, args.seq, max_tokens=args.heldout_tokens or None))
        emit(induction(model, held_ids, args.induction_length, args.induction_passages))
        emit(random_induction(model, held_ids, args.seed, args.induction_length,
                                   args.induction_passages))
        emit(copy_eval(model, copy_samples(held, tok, args.copy_samples)))
    emit(load_check(model, out, held_ids[:args.check_tokens]))


def grow_and_train(model, cfg: dict, data: torch.Tensor, args, held_ids: list[int],
                   emit, summaries: torch.Tensor | None = None) -> tuple:
    """Widen the trained ``model`` (``--grow-*``), check what growing changed, train on at the
    new width (no copying-only steps; ``--repeat-frac`` copying rows); returns the grown model
    and its config. Emits ``induction_random`` of the model before growing (what_before_grow),
    a ``grow`` record (shapes, parameters, the largest logit change and argmax agreement on
    held-out tokens) and the second ``train`` record (``phase: grown``)."""
    amp = torch.autocast("cuda", dtype=torch.bfloat16, enabled=data.device.type == "cuda")
    probe = torch.tensor(held_ids[:min(len(held_ids), args.seq)], device=data.device)[None]
    model.eval()
    with amp, torch.no_grad():
        emit(induction(model, held_ids, args.induction_length, args.induction_passages,
                       what="induction_before_grow"))
        emit(random_induction(model, held_ids, args.seed, args.induction_length,
                                   args.induction_passages, what="induction_random_before_grow"))
        before = forward_batch(model, probe).float() @ model.lm_head.weight.float().T
    grown, grown_cfg = grow(model, cfg, args.grow_hidden, args.grow_intermediate,
                            noise_std=args.grow_noise, seed=args.seed)
    grown.eval()
    with amp, torch.no_grad():
        after = forward_batch(grown, probe).float() @ grown.lm_head.weight.float().T
    grown.train()
    emit({"what": "grow", "hidden": [cfg["hidden_size"], args.grow_hidden],
          "intermediate": [cfg["intermediate_size"], args.grow_intermediate],
          "params": sum(p.numel() for p in grown.parameters()), "noise_std": args.grow_noise,
          "max_abs_logit_change": round(float((after - before).abs().max()), 5),
          "max_abs_logit": round(float(before.abs().max()), 4),
          "argmax_agree": round(float((after.argmax(-1) == before.argmax(-1)).float().mean()), 4)})
    del model
    phase = argparse.Namespace(**{**vars(args), "steps": args.grow_steps, "copy_steps": 0,
                                  "lr": args.grow_lr, "minutes": args.grow_minutes,
                                  "warmup": 0.1})
    if args.grow_steps:
        emit({**train(grown, data, phase, held_ids, emit, summaries), "phase": "grown"})
    return grown, grown_cfg


if __name__ == "__main__":
    main()
