"""From a command's flags to a loaded engine: the checks that run before any slow work.

Owns the flag validation and model resolution (``prepare``: an ``EngineConfig``, the tokenizer
and the context plan, not the weights; the note when ``--ctx`` turns YaRN on), reading a text
input (``read_input``; ``user_text`` for an argument or a chat line, ``system_text`` for
``--system``) and loading the engine (``load_engine``, under a status spinner). The context check
of a prompt and its reply is ``infer.fits.check_fits``. ``warm_engine`` pays the first reply's
start-up costs before it (``infer/warm_up.py``). Each records how far the command got in
``ui.startup`` (``infer.ui.startup``: what a Ctrl-C there reports). Every user mistake raises
ValueError with a message that says how to fix it, naming the flag (``flag_message``: the library
names the parameter); ``infer.ui.console.errors`` turns it into one line and exit code 2.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from dataclasses import replace

from infer.errors import OptionError
from infer.ui.console import UI
from infer.ui.startup import LOADING, WARMING_UP, sigint_deferred
from infer.wording import counted


def prepare(ui: UI, model: str):
    """Validate the flags, resolve the model folder and load its tokenizer (not the weights);
    say so when ``--ctx`` turns static YaRN on.

    Returns ``(EngineConfig, Qwen3Tokenizer, ContextPlan)`` (``models.context``: the largest
    context the checkpoint supports, ``max_ctx``). Raises ValueError on a bad flag or model, or a
    ``--ctx`` beyond what the checkpoint supports.
    """
    torch = import_torch()
    from infer.config import EngineConfig, check_device_available, parse_ctx
    from infer.sampling_params import SamplingParams
    from models.config import Qwen3Config
    from models.context import plan_context
    from models.hub import resolve_model
    from models.tokenizer import Qwen3Tokenizer

    o = ui.opts
    if o.max_new_tokens < 0:
        raise ValueError(f"--max-new-tokens must be an integer >= 0 (0 = no limit), "
                         f"got {o.max_new_tokens}")
    try:  # the flags' values: a bad one is named by its flag (each option is its flag's field)
        cfg = EngineConfig(model="", ctx=parse_ctx(o.ctx), kv_cache=o.kv_cache.value,
                           page_size=o.page_size, device=o.device, prefill_chunk=o.prefill_chunk,
                           attention=o.attention.value, cuda_graphs=o.cuda_graphs)
        SamplingParams().replace(**o.sampling_overrides())  # range checks before any slow work
    except OptionError as e:
        raise ValueError(flag_message(e)) from None
    if o.speculate == "on" and o.presence_penalty:  # Speculate is a str enum
        ui.note("--speculate on does nothing with --presence-penalty (speculative decoding is "
                "always off with a presence penalty): the reply decodes plainly")
    check_device_available(cfg.torch_device)
    if (cfg.attention == "triton" and cfg.torch_device.type == "cpu"
            and os.environ.get("TRITON_INTERPRET") != "1"):
        raise ValueError("--attention triton needs a CUDA GPU (or TRITON_INTERPRET=1, very slow): "
                         "use --attention reference or auto on the CPU")
    if o.device is None and not torch.cuda.is_available():
        ui.warn("no CUDA GPU found: running on the CPU, which is slow (--device cpu hides this)")
    folder = resolve_model(model)
    cfg = ui.startup.cfg = replace(cfg, model=str(folder))  # a Ctrl-C from here: its header
    # the file's sampling defaults: a bad value is refused before the weights load
    sampling = SamplingParams.from_generation_config(folder, **o.sampling_overrides())
    unused = [f"--{name.replace('_', '-')}" for name in ("seed", "top_k", "top_p", "min_p")
              if getattr(o, name) is not None]
    if unused and sampling.greedy:  # greedy from --temperature 0 or the checkpoint's defaults
        why = ("" if o.temperature is not None else
               f", from {folder / 'generation_config.json'}; --temperature samples")
        ui.note(f"{' and '.join(unused)} {'does' if len(unused) == 1 else 'do'} nothing with "
                f"greedy sampling (temperature 0{why}): the reply is the same without "
                f"{'it' if len(unused) == 1 else 'them'}")
    if o.speculate == "on" and sampling.presence_penalty and not o.presence_penalty:
        ui.note(f"--speculate on does nothing with the presence penalty of "
                f"{folder / 'generation_config.json'} ({sampling.presence_penalty:g}; speculative "
                f"decoding is always off with one): the reply decodes plainly "
                f"(--presence-penalty 0 drops it)")
    _note_unapplied(ui, folder / "generation_config.json")
    config = Qwen3Config.from_json(folder)
    plan = plan_context(config, cfg.ctx)
    tokenizer = Qwen3Tokenizer.from_folder(folder)
    if tokenizer.vocab_limit > config.vocab_size:
        raise ValueError(f"{folder}: the tokenizer defines {tokenizer.vocab_limit} tokens but "
                         f"config.json's vocab_size is {config.vocab_size}: the tokenizer and the "
                         f"weights do not belong together")
    if plan.note:
        ui.note(plan.note)
    return cfg, tokenizer, plan


def _note_unapplied(ui: UI, path) -> None:
    """One note on stderr naming the settings of ``path`` that the replies go without
    (``infer.generation_config.unapplied_settings``); none for bench, which decodes greedily."""
    from infer.generation_config import unapplied_settings

    found = unapplied_settings(path) if ui.startup.command != "bench" else {}
    if found:
        said = " and ".join(f"{k} {v:g}" if type(v) in (int, float) else f"{k} {v!r}"
                            for k, v in found.items())
        ui.note(f"{path} sets {said}, which infer does not apply: the replies are sampled "
                f"without {'them' if len(found) > 1 else 'it'}")


def flag_message(e: OptionError) -> str:
    """An ``infer.errors.OptionError`` of a flag's value, worded with the flag the user typed:
    ``--page-size must be ...`` for ``page_size must be ...``."""
    return f"--{e.option.replace('_', '-')} {e.rule}"


def import_torch():
    """``import torch``; the first one of a process with the cyclic garbage collector paused,
    and what it built frozen after (``gc.freeze``: later collections skip those objects).

    The import builds ~170k long-lived objects; the collector's passes over them took ~0.2 s
    of every start-up on a 2-core CPU (three full collections during the import) and ~0.5 s of
    its exit (the interpreter's last collections, which skip frozen objects). Nothing else
    changes but that the few garbage cycles the import leaves (~7k small objects, ~0.7 MB) are
    kept instead of freed. A process that already imported torch (a test run) is left alone.
    A Ctrl-C during the import is raised as KeyboardInterrupt after it (``sigint_deferred``)."""
    if "torch" in sys.modules or not gc.isenabled():
        import torch

        return torch
    gc.disable()
    try:
        with sigint_deferred():  # a Ctrl-C in the import: KeyboardInterrupt once it is done
            import torch
    finally:
        gc.freeze()
        gc.enable()
    return torch


def load_engine(ui: UI, cfg, tokenizer):
    """Load the weights and allocate the KV pool (a Ctrl-C in it: ``ui.startup``'s stage
    ``LOADING``). Returns ``(engine, seconds)``.

    The engine's modules import triton (~1 s), with a Ctrl-C in it held back until it is done
    (``sigint_deferred``): raised inside, it left triton half-imported (a package whose finished
    submodules stay in ``sys.modules``), so that the next import of it, by the interrupted
    command's ``--json`` object (``infer.ui.records.engine_header``), failed with an
    AttributeError (exit 1) instead of the object."""
    ui.startup.stage, ui.startup.cfg = LOADING, cfg
    with sigint_deferred():  # triton's import: see above
        from infer.engine import Engine

    t0 = time.perf_counter()
    with ui.status(f"loading {cfg.model} ..."):
        engine = Engine(cfg, tokenizer=tokenizer)
    ui.startup.engine, ui.startup.load_s = engine, time.perf_counter() - t0
    return engine, ui.startup.load_s


def warm_engine(ui: UI, engine, sampling, *, batch: int = 1, prompt_tokens: int = 0) -> None:
    """On a CUDA device, ``infer.warm_up.warm_up`` under a status line: the first reply's
    kernel loading and decode capture, paid at start-up instead of in its time to first token
    (``engine.warm_up_s`` adds the seconds). Elsewhere nothing: the CPU has no graphs to capture
    and no kernel binaries to load."""
    if engine.device.type != "cuda":
        return
    ui.startup.stage, ui.startup.warming = WARMING_UP, True  # until warm_up returns
    from infer.warm_up import warm_up

    with ui.status("warming up (kernels, CUDA graph) ..."):
        warm_up(engine, sampling, batch=batch, prompt_tokens=prompt_tokens)
    ui.startup.warming = False


def read_input(ui: UI, path: str) -> tuple[str, int]:
    """Read a text file or ``-`` (stdin) with ``infer.ui.textio``; warn about replaced bytes.
    Returns ``(text, replaced byte sequences)``."""
    from infer.ui.textio import read_text_input

    if path == "-" and stdin_is_terminal():
        ui.note("reading the text from the terminal: end it with Ctrl-D on a line of its own")
    text, n_bad = read_text_input(path)
    warn_replaced(ui, n_bad, "<stdin>" if path == "-" else path)
    return text, n_bad


def stdin_is_terminal() -> bool:
    """Whether standard input is a terminal (someone types the text)."""
    return sys.stdin is not None and sys.stdin.isatty()


def user_text(ui: UI, text: str, where: str) -> str:
    """Text given as a ``str`` (an argument such as the prompt or ``--system``, a chat line) with
    the invalid bytes Python escaped in it (surrogateescape) replaced with U+FFFD, warning with the
    count as ``read_input`` does for files; ``where`` names it in the warning."""
    from infer.ui.textio import replace_surrogates

    text, n_bad = replace_surrogates(text)
    warn_replaced(ui, n_bad, where)
    return text


def system_text(ui: UI, system: str) -> str:
    """``--system``'s text, as ``user_text`` gives it; refused when it is empty or only
    whitespace, as an empty prompt is (the template would send a blank system message).

    Raises:
        ValueError: ``system`` is empty or only whitespace.
    """
    if not system.strip():
        raise ValueError("--system is empty: give some text, or leave --system out")
    return user_text(ui, system, "--system")


def warn_replaced(ui: UI, n: int, where: str) -> None:
    """Warn that ``n`` invalid byte sequences in ``where`` were replaced with U+FFFD (nothing
    for 0; singular for one)."""
    if n:
        ui.warn(f"{counted(n, 'invalid byte sequence')} in {where} "
                f"{'was' if n == 1 else 'were'} replaced with U+FFFD")
