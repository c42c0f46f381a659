"""``infer``: the command line. Chat with, summarize with, prompt, or benchmark a Qwen3 model.

Design: this file parses flags, resolves the model (``models/hub.py``), reads input
(``infer/textio.py``), builds an ``EngineConfig`` and hands the engine's token stream to
``infer/render.py``, which shows it with rich; the chat loop is ``infer/repl.py``, the consoles
and the error/exit plumbing ``infer/console.py``. No tensor math here. Streams, so that output
stays scriptable:

- the reply text goes to stdout; warnings, errors, the live status line and the stats line after
  each reply go to stderr;
- with ``--json``, stdout holds only JSON (one object; in ``chat`` one object per reply, one per
  line) and the reply text is streamed to stderr instead, so ``infer generate M P --json | jq``
  always parses. The object includes the reply text. An error prints
  ``{"error": "<the one-line message>", "exit_code": N}`` on stdout too (in ``chat``, a failed turn
  prints ``{"error": ..., "turn": k}`` as its line).

On a terminal the reply is shown live (its last lines plus tokens/s), then printed in full; when
the output is piped, the text is written as it comes, verbatim (``<think>`` tags included).
Errors are one line on stderr: exit code 2 for bad input (ValueError, NotImplementedError, a
missing file, typer's usage errors: ``main`` runs the app outside typer's standalone mode to print
them as one line), 1 for runtime failures (a stdout that cannot be written, such as ``/dev/full``,
among them), 130 for Ctrl-C outside the chat prompt; ``--debug`` adds the traceback. A chat with
piped input exits 2 (or 1) at its end if a turn failed. A closed stdout (``infer generate M P |
head -c 10``) ends the command quietly with exit code 0, as the reader chose to stop reading.
"""

import contextlib
import os
import signal
import sys
import threading


def _exit_on_ctrl_c(signum, frame) -> None:
    """SIGINT during the start-up imports: one line and exit code 130 (SIGINT's), at once.

    ``os._exit`` rather than a KeyboardInterrupt, which the module being imported may swallow or
    turn into another error (a pybind11 module such as triton's raises ImportError
    "initialization failed"); nothing is written or open yet that would need closing."""
    with contextlib.suppress(OSError):  # no stderr: exit all the same
        os.write(2, b"interrupted\n")
    os._exit(130)


# NOTE: the `infer` script runs `from cli import main` before `main`, so these imports (about 2 s:
# torch and triton, through the infer package) are under no handler of main's or typer's: a Ctrl-C
# in them would print a KeyboardInterrupt traceback. They run under `_exit_on_ctrl_c` instead,
# unless SIGINT is ignored (a background job) or handled by whoever imports cli, or cli is imported
# outside the main thread (where no handler can be set).
_sigint = signal.getsignal(signal.SIGINT)
if _sigint is signal.default_int_handler and threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGINT, _exit_on_ctrl_c)
try:
    import time
    from dataclasses import dataclass, fields
    from dataclasses import replace as dc_replace
    from enum import Enum
    from typing import Annotated

    import typer

    from infer.console import (
        UI,
        OutputError,
        checked_stdout,
        click_exceptions,
        errors,
        print_error,
        quiet_stdout,
    )
    from infer.render import ReplyView, format_stats
    from infer.repl import run_repl
finally:
    if signal.getsignal(signal.SIGINT) is _exit_on_ctrl_c:
        signal.signal(signal.SIGINT, _sigint)

DEFAULT_SUMMARY_MODEL = "Qwen/Qwen3-0.6B"
SUMMARY_PROMPT = (
    "Summarize the following text. Give its main points, the key people or ideas, and how it "
    "ends or what it concludes, in a few short paragraphs.\n\n---\n{text}\n---\n\n"
    "Write the summary of the text above.")
# Qwen3's largest context: 32768 trained positions x YaRN factor 4 (the Qwen3 model cards).
QWEN3_MAX_CTX = 131072

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Run Qwen3 models on one GPU at long context (32k-128k tokens).")


class KVCache(str, Enum):
    bf16 = "bf16"
    int8 = "int8"


class Attention(str, Enum):
    auto = "auto"
    reference = "reference"
    triton = "triton"


_E, _S, _O = "Engine", "Sampling", "Output"
ModelArg = Annotated[str, typer.Argument(
    help="Local checkpoint folder, or a Hugging Face hub id such as Qwen/Qwen3-8B.",
    metavar="MODEL", show_default=False)]
Ctx = Annotated[str, typer.Option(
    help="Context size in tokens (prompt + replies): 32768, 32k, 128k (k = 1024).",
    rich_help_panel=_E)]
KvCacheOpt = Annotated[KVCache, typer.Option(
    "--kv-cache", help="KV cache format: bf16, or int8 codes + a float32 scale per token and head.",
    rich_help_panel=_E)]
PageSize = Annotated[int, typer.Option(help="Positions per KV page: 16, 32, 64 or 128.",
                                       rich_help_panel=_E)]
PrefillChunk = Annotated[int | None, typer.Option(
    help="Prompt tokens per prefill step (default: 2048 on CUDA, 512 on CPU).",
    show_default=False, rich_help_panel=_E)]
AttentionOpt = Annotated[Attention, typer.Option(
    help="Attention backend: reference (PyTorch), triton (kernels), auto (best available).",
    rich_help_panel=_E)]
CudaGraphs = Annotated[bool | None, typer.Option(
    "--cuda-graphs/--no-cuda-graphs",
    help="Replay each decode step as a CUDA graph (default: on with CUDA and triton attention).",
    show_default=False, rich_help_panel=_E)]
Device = Annotated[str | None, typer.Option(
    help="cuda, cuda:N or cpu (default: cuda when available, else cpu with a warning).",
    show_default=False, rich_help_panel=_E)]
_GEN = " (default: from the model's generation_config.json)"
MaxNew = Annotated[int, typer.Option(
    help="Most tokens per reply; 0 = no limit (until a stop token or a full context).",
    rich_help_panel=_S)]
Temperature = Annotated[float | None, typer.Option(
    help="Sampling temperature; 0 = greedy" + _GEN, show_default=False, rich_help_panel=_S)]
TopP = Annotated[float | None, typer.Option(
    help="Nucleus sampling mass in (0, 1]" + _GEN, show_default=False, rich_help_panel=_S)]
TopK = Annotated[int | None, typer.Option(
    help="Keep the k most likely tokens; 0 = off" + _GEN, show_default=False,
    rich_help_panel=_S)]
MinP = Annotated[float | None, typer.Option(
    help="Drop tokens below min-p x the top probability" + _GEN, show_default=False,
    rich_help_panel=_S)]
Presence = Annotated[float | None, typer.Option(
    help="Subtract from the logits of tokens already in the reply, in [-2, 2]" + _GEN,
    show_default=False, rich_help_panel=_S)]
Seed = Annotated[int | None, typer.Option(help="Seed for reproducible sampling.",
                                          show_default=False, rich_help_panel=_S)]
Think = Annotated[bool, typer.Option(
    "--think/--no-think", help="Qwen3 thinking mode (the model reasons before it answers).",
    rich_help_panel=_O)]
HideThinking = Annotated[bool, typer.Option(
    "--hide-thinking", help="Do not show the thinking text (it is shown dimmed otherwise).",
    rich_help_panel=_O)]
System = Annotated[str | None, typer.Option(help="System prompt.", show_default=False,
                                            rich_help_panel=_O)]
Json = Annotated[bool, typer.Option(
    "--json", help="Print the reply and its stats as JSON on stdout; stream the text to stderr.",
    rich_help_panel=_O)]
Debug = Annotated[bool, typer.Option("--debug", help="Show the traceback of an error.",
                                     rich_help_panel=_O)]


@dataclass
class Options:
    """The flags every command shares (names equal the command parameters)."""

    ctx: str
    kv_cache: KVCache
    page_size: int
    prefill_chunk: int | None
    attention: Attention
    cuda_graphs: bool | None
    device: str | None
    max_new_tokens: int
    temperature: float | None
    top_p: float | None
    top_k: int | None
    min_p: float | None
    presence_penalty: float | None
    seed: int | None
    think: bool
    hide_thinking: bool
    json: bool
    debug: bool

    @classmethod
    def pick(cls, params: dict) -> "Options":
        """Build from a command's ``locals()`` (the parameters named like the fields)."""
        return cls(**{f.name: params[f.name] for f in fields(cls)})

    def sampling_overrides(self) -> dict:
        return dict(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                    min_p=self.min_p, presence_penalty=self.presence_penalty, seed=self.seed,
                    max_new_tokens=self.max_new_tokens or None)


# ---------------------------------------------------------------------------- loading


def _prepare(ui: UI, model: str):
    """Validate the flags, resolve the model folder and load its tokenizer (not the weights).

    Returns ``(EngineConfig, Qwen3Tokenizer)``. Raises ValueError on a bad flag or model.
    """
    import torch

    from infer.config import EngineConfig, SamplingParams, check_device_available, parse_ctx
    from models.config import Qwen3Config
    from models.hub import resolve_model
    from models.tokenizer import Qwen3Tokenizer

    o = ui.opts
    if o.max_new_tokens < 0:
        raise ValueError(f"--max-new-tokens must be an integer >= 0 (0 = no limit), "
                         f"got {o.max_new_tokens}")
    cfg = EngineConfig(model="", ctx=parse_ctx(o.ctx), kv_cache=o.kv_cache.value,
                       page_size=o.page_size, device=o.device, prefill_chunk=o.prefill_chunk,
                       attention=o.attention.value, cuda_graphs=o.cuda_graphs)
    SamplingParams().replace(**o.sampling_overrides())  # range checks before any slow work
    check_device_available(cfg.torch_device)
    if (cfg.attention == "triton" and cfg.torch_device.type == "cpu"
            and os.environ.get("TRITON_INTERPRET") != "1"):
        raise ValueError("--attention triton needs a CUDA GPU (or TRITON_INTERPRET=1, very slow): "
                         "use --attention reference or auto on the CPU")
    if o.device is None and not torch.cuda.is_available():
        ui.warn("no CUDA GPU found: running on the CPU, which is slow (--device cpu hides this)")
    folder = resolve_model(model)
    _warn_past_trained_length(ui, cfg.ctx, Qwen3Config.from_json(folder))
    return dc_replace(cfg, model=str(folder)), Qwen3Tokenizer.from_folder(folder)


YARN_SNIPPET = ('"rope_scaling": {"rope_type": "yarn", "factor": 4.0, '
                '"original_max_position_embeddings": 32768}')


def _warn_past_trained_length(ui: UI, ctx: int, mc) -> None:
    """Warn when ``ctx`` exceeds the positions the checkpoint supports: ``max_position_embeddings``
    (40960 for Qwen3), or ``factor x original_max_position_embeddings`` with YaRN."""
    if mc.rope_scaling is not None:
        limit = int(mc.rope_scaling.factor * mc.rope_scaling.original_max_position_embeddings)
        if ctx > limit:
            ui.warn(f"--ctx {ctx} is past the {limit} positions of this checkpoint's YaRN "
                    "rope_scaling in config.json: raise its factor, or quality degrades")
    elif ctx > mc.max_position_embeddings:
        ui.warn(f"--ctx {ctx} is past the model's max_position_embeddings "
                f"({mc.max_position_embeddings}): Qwen3 needs YaRN rope_scaling in config.json "
                f"past that length, e.g. {YARN_SNIPPET}")


def _check_fits(n_prompt: int, ctx: int, max_new: int = 0) -> None:
    """Raise ValueError when the prompt and a reply of ``max_new`` tokens (0: no limit, so at
    least one token) do not fit in the context; the message gives both counts and a --ctx, or,
    past ``QWEN3_MAX_CTX`` (131072, the most Qwen3 supports, with YaRN), says to shorten the text.
    """
    n_reply = max(max_new, 1)
    if n_prompt + n_reply <= ctx:
        return
    need = -(-(n_prompt + n_reply) // 1024)
    beyond = f"beyond the largest context Qwen3 supports ({QWEN3_MAX_CTX} tokens, with YaRN)"
    if n_prompt + 1 > QWEN3_MAX_CTX:
        raise ValueError(f"the prompt is {n_prompt} tokens, {beyond}: shorten the text or split "
                         "it into parts (summarizing longer files is planned)")
    if n_prompt + n_reply > QWEN3_MAX_CTX:
        raise ValueError(f"the prompt is {n_prompt} tokens and the reply up to {max_new} "
                         f"(--max-new-tokens): {n_prompt + max_new} tokens, {beyond}: lower "
                         f"--max-new-tokens to at most {QWEN3_MAX_CTX - n_prompt}, or shorten "
                         "the text")
    if max_new <= 0:
        size = ("which leaves no room for a reply in" if n_prompt == ctx else "longer than")
        raise ValueError(f"the prompt is {n_prompt} tokens, {size} the context of {ctx} "
                         f"tokens: raise --ctx (e.g. --ctx {need}k) or shorten the input")
    raise ValueError(f"the prompt is {n_prompt} tokens and the reply up to {max_new} "
                     f"(--max-new-tokens): {n_prompt + max_new} tokens, more than the context of "
                     f"{ctx} tokens: raise --ctx (e.g. --ctx {need}k) or lower --max-new-tokens")


def _load_engine(ui: UI, cfg, tokenizer):
    """Load the weights and allocate the KV pool. Returns ``(engine, seconds)``."""
    from infer.engine import Engine

    t0 = time.perf_counter()
    with ui.status(f"loading {cfg.model} ..."):
        engine = Engine(cfg, tokenizer=tokenizer)
    return engine, time.perf_counter() - t0


def _read_input(ui: UI, path: str) -> tuple[str, int]:
    """Read a text file or ``-`` (stdin) with ``infer.textio``; warn about replaced bytes.
    Returns ``(text, replaced byte sequences)``."""
    from infer.textio import read_text_input

    text, n_bad = read_text_input(path)
    if n_bad:
        name = "<stdin>" if path == "-" else path
        ui.warn(f"{n_bad} invalid byte sequences in {name} were replaced with U+FFFD")
    return text, n_bad


def _messages(system: str | None, user: str) -> list[dict]:
    return ([{"role": "system", "content": system}] if system else []) + \
        [{"role": "user", "content": user}]


def _result(command: str, engine, reply, load_s: float, **extra) -> dict:
    from infer.bench import cache_dtype

    cfg = engine.config
    return {"command": command, "model": str(cfg.model), "device": str(engine.device),
            "ctx": cfg.ctx, "kv_cache": cfg.kv_cache, "cache_dtype": cache_dtype(engine),
            "attention": engine.attention_kind, "cuda_graphs": engine.cuda_graphs,
            "page_size": cfg.page_size, "load_s": round(load_s, 3), **extra,
            **reply.to_dict()}


def _one_shot(command: str, ui: UI, cfg, tokenizer, ids: list[int], **extra) -> None:
    """Load, reply once, print the stats (or the JSON); exit 130 if Ctrl-C cut the reply."""
    _check_fits(len(ids), cfg.ctx, ui.opts.max_new_tokens)
    engine, load_s = _load_engine(ui, cfg, tokenizer)
    session = engine.new_session()
    sampling = engine.default_sampling(**ui.opts.sampling_overrides())
    reply = ReplyView(ui.text, ui.err, engine, session,
                      hide_thinking=ui.opts.hide_thinking).run(ids, sampling)
    if ui.opts.json:
        ui.emit_json(_result(command, engine, reply, load_s, **extra))
    else:
        ui.err.print(format_stats(reply.stats, ceiling=reply.ceiling), style="dim")
    if reply.interrupted:
        raise typer.Exit(130)


# ---------------------------------------------------------------------------- commands


@app.command()
def generate(
    model: ModelArg,
    prompt: Annotated[str, typer.Argument(help="The prompt text, or - to read standard input.",
                                          metavar="PROMPT", show_default=False)],
    raw: Annotated[bool, typer.Option(
        "--raw", help="Feed the prompt as it is, without the chat template.",
        rich_help_panel=_O)] = False,
    system: System = None,
    ctx: Ctx = "32k", kv_cache: KvCacheOpt = KVCache.bf16, page_size: PageSize = 64,
    prefill_chunk: PrefillChunk = None, attention: AttentionOpt = Attention.auto,
    cuda_graphs: CudaGraphs = None, device: Device = None, max_new_tokens: MaxNew = 512,
    temperature: Temperature = None, top_p: TopP = None, top_k: TopK = None,
    min_p: MinP = None, presence_penalty: Presence = None, seed: Seed = None,
    think: Think = False, hide_thinking: HideThinking = False, json: Json = False,
    debug: Debug = False,
):
    """Reply once to PROMPT (through the chat template; thinking off unless --think)."""
    ui = UI(Options.pick(locals()))
    with errors(debug, json):
        if prompt == "-":
            prompt, _ = _read_input(ui, "-")
        elif not prompt.strip():
            raise ValueError("the prompt is empty: give some text, or - to read standard input")
        cfg, tok = _prepare(ui, model)
        ids = tok.encode(prompt) if raw else tok.chat_ids(_messages(system, prompt),
                                                          enable_thinking=think)
        _one_shot("generate", ui, cfg, tok, ids)


@app.command()
def summarize(
    file: Annotated[str, typer.Argument(
        help="Text file (UTF-8, or UTF-16 or UTF-32 with a BOM), or - to read standard input.",
        metavar="FILE", show_default=False)],
    model: Annotated[str, typer.Option(
        "--model", "-m", help="Local checkpoint folder or Hugging Face hub id.",
        rich_help_panel=_E)] = DEFAULT_SUMMARY_MODEL,
    ctx: Ctx = "32k", kv_cache: KvCacheOpt = KVCache.bf16, page_size: PageSize = 64,
    prefill_chunk: PrefillChunk = None, attention: AttentionOpt = Attention.auto,
    cuda_graphs: CudaGraphs = None, device: Device = None, max_new_tokens: MaxNew = 1024,
    temperature: Temperature = None, top_p: TopP = None, top_k: TopK = None,
    min_p: MinP = None, presence_penalty: Presence = None, seed: Seed = None,
    think: Think = False, hide_thinking: HideThinking = False, json: Json = False,
    debug: Debug = False,
):
    """Summarize a text FILE that fits in the context (thinking off unless --think)."""
    ui = UI(Options.pick(locals()))
    with errors(debug, json):
        text, n_bad = _read_input(ui, file)
        cfg, tok = _prepare(ui, model)
        ids = tok.chat_ids(_messages(None, SUMMARY_PROMPT.format(text=text)),
                           enable_thinking=think)
        _one_shot("summarize", ui, cfg, tok, ids, input_chars=len(text), replaced_bytes=n_bad)


@app.command()
def chat(
    model: ModelArg,
    system: System = None,
    ctx: Ctx = "32k", kv_cache: KvCacheOpt = KVCache.bf16, page_size: PageSize = 64,
    prefill_chunk: PrefillChunk = None, attention: AttentionOpt = Attention.auto,
    cuda_graphs: CudaGraphs = None, device: Device = None, max_new_tokens: MaxNew = 0,
    temperature: Temperature = None, top_p: TopP = None, top_k: TopK = None,
    min_p: MinP = None, presence_penalty: Presence = None, seed: Seed = None,
    think: Think = True, hide_thinking: HideThinking = False, json: Json = False,
    debug: Debug = False,
):
    """Talk with MODEL. /reset clears the conversation, /stats shows numbers, /exit or /quit
    quits, //text sends /text.

    Ctrl-C during a reply stops that reply; Ctrl-C or Ctrl-D at the prompt quits. With piped
    input the exit code is 2 if a turn failed on bad input (1 on a runtime failure).
    """
    ui = UI(Options.pick(locals()))
    with errors(debug, json):
        cfg, tok = _prepare(ui, model)
        engine, load_s = _load_engine(ui, cfg, tok)
        code = run_repl(ui, engine, system, load_s, check_fits=_check_fits, result=_result)
        if code and not sys.stdin.isatty():
            raise typer.Exit(code)


@app.command()
def bench(
    model: ModelArg,
    ctx: Ctx = "32k", kv_cache: KvCacheOpt = KVCache.bf16, page_size: PageSize = 64,
    prefill_chunk: PrefillChunk = None, attention: AttentionOpt = Attention.auto,
    cuda_graphs: CudaGraphs = None, device: Device = None,
    tokens: Annotated[int, typer.Option(
        help="Tokens decoded per length (greedy, past stop tokens).", rich_help_panel=_E)] = 128,
    lengths: Annotated[str | None, typer.Option(
        help="Prompt lengths, comma-separated: 4k,32k (default: 4k and the longest that fits "
             "in --ctx with --tokens).", show_default=False, rich_help_panel=_E)] = None,
    json: Annotated[bool, typer.Option(
        "--json", help="Print the results as one JSON object on stdout.",
        rich_help_panel=_O)] = False,
    debug: Debug = False,
):
    """Measure prefill and decode speed of MODEL at long context against the decode ceiling
    (the GPU's read bandwidth over the bytes each token must read)."""
    from infer.bench import cache_dtype, cache_label, parse_lengths, results_table, run_bench

    ui = UI(Options(ctx=ctx, kv_cache=kv_cache, page_size=page_size, prefill_chunk=prefill_chunk,
                    attention=attention, cuda_graphs=cuda_graphs, device=device,
                    max_new_tokens=0, temperature=None, top_p=None, top_k=None, min_p=None,
                    presence_penalty=None, seed=None, think=False, hide_thinking=False,
                    json=json, debug=debug))
    with errors(debug, json):
        cfg, tok = _prepare(ui, model)
        lens = parse_lengths(lengths, cfg.ctx, tokens, max_ctx=QWEN3_MAX_CTX)
        engine, load_s = _load_engine(ui, cfg, tok)
        results, runs, interrupted = [], run_bench(engine, lens, tokens), False
        try:
            for n in lens:
                with ui.status(f"{n:,} tokens: prefill, then {tokens} decode steps ..."):
                    results.append(next(runs))
        except KeyboardInterrupt:  # keep the lengths already measured
            interrupted = True
            ui.err.print("[yellow]interrupted[/]")
        if json:
            ui.emit_json({"command": "bench", "model": str(cfg.model),
                          "device": str(engine.device), "ctx": cfg.ctx,
                          "kv_cache": cfg.kv_cache, "cache_dtype": cache_dtype(engine),
                          "attention": engine.attention_kind,
                          "cuda_graphs": engine.cuda_graphs, "page_size": cfg.page_size,
                          "load_s": round(load_s, 3), "interrupted": interrupted,
                          "results": [r.to_dict() for r in results]})
        elif results:
            ui.out.print(results_table(results, f"{cfg.model}: {cache_label(engine)}, "
                                                f"{engine.attention_kind} attention on "
                                                f"{engine.device}"))
        if interrupted:
            raise typer.Exit(130)


def main(argv: list[str] | None = None) -> None:
    """The ``infer`` entry point: typer's app, with its usage errors as one line on stderr.

    Bad flags, unknown options and missing arguments print ``error: <message> (see ... --help)``
    and exit 2 (with ``--json`` among the arguments, also ``{"error", "exit_code"}`` on stdout);
    help, ``typer.Exit`` codes and Ctrl-C (130) behave as typer's standalone mode. A closed stdout
    (``| head``) exits 0 quietly; one that cannot be written (``> /dev/full``) prints
    ``error: cannot write output: <reason>`` and exits 1 (the commands do the same through
    ``errors``; here for typer's own output, such as ``--help``).
    """
    exc = click_exceptions()
    args = sys.argv[1:] if argv is None else argv
    stdout = sys.stdout
    try:
        sys.stdout = checked_stdout()  # typer and click write to sys.stdout
        rv = app(args=argv, standalone_mode=False)
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        quiet_stdout()
        sys.exit(0)
    except OutputError as e:
        print_error(str(e), 1, as_json=False)
        quiet_stdout()
        sys.exit(1)
    except exc.ClickException as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # `infer` alone: the help is shown already
            sys.exit(e.exit_code)
        ctx = getattr(e, "ctx", None)
        where = ctx.command_path if ctx is not None else "infer"
        # click 8.2+ words a bad enum choice "Value error, 'x' is not one of ...": drop the prefix
        text = " ".join(e.format_message().split()).replace("Value error, ", "")
        msg = text + f" (see {where} --help)"
        as_json = "--json" in args[:args.index("--")] if "--" in args else "--json" in args
        print_error(msg, e.exit_code, as_json)
        sys.exit(e.exit_code)
    except typer.Abort:
        print("Aborted!", file=sys.stderr)
        sys.exit(1)
    finally:
        sys.stdout = stdout
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
