"""The command line's shared flags: declared once, collected into one ``Options`` per command.

Owns the typer declarations (``Annotated`` types with their help text and help panel) and the
``Options`` dataclass the rest of ``infer/ui/`` reads. ``shared_options`` is the decorator that adds
the shared flags to a command: the command declares its own arguments and options as usual plus
one keyword-only parameter ``opts: Options``; the decorator splices the shared flags into the
signature typer reads at that parameter's place, orders the options by help panel, and hands the
command one ``Options`` built from them. No tensor math here; nothing here imports
``cli.py``.

Groups (help panels): Engine (``--ctx`` .. ``--device``), Sampling (``--max-new-tokens`` ..
``--seed``), Output (``--think`` .. ``--debug``), after the command's own panel if it has one
(``summarize``'s Summarize, ``bench``'s Bench: flags only it takes). ``bench`` takes the Engine
flags, ``--json`` (with its own help) and ``--debug`` only; the other fields of its ``Options``
keep their defaults (its ``--speculate/--no-speculate`` is a switch of its own, declared in
``cli.py``, not the ``speculate`` field here).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import Enum
from typing import Annotated

import typer


class KVCache(str, Enum):
    bf16 = "bf16"
    int8 = "int8"


class Speculate(str, Enum):
    auto = "auto"
    on = "on"
    off = "off"


SPECULATING_COMMANDS = ("chat", "summarize")  # where --speculate auto turns it on


class Attention(str, Enum):
    auto = "auto"
    reference = "reference"
    triton = "triton"


ENGINE, SAMPLING, OUTPUT = "Engine", "Sampling", "Output"
SUMMARIZE, BENCH = "Summarize", "Bench"  # the flags of one command (cli.py declares them)
_GEN = " (default: from the model's generation_config.json)"
JSON_HELP = "Print the reply and its stats as JSON on stdout; stream the text to stderr."
BENCH_JSON_HELP = "Print the results as one JSON object on stdout."

ModelArg = Annotated[str, typer.Argument(
    help="Local checkpoint folder, or a Hugging Face hub id such as Qwen/Qwen3-8B.",
    metavar="MODEL", show_default=False)]
System = Annotated[str | None, typer.Option(help="System prompt.", show_default=False,
                                            rich_help_panel=OUTPUT)]

# The shared flags, in --help order: (name, type with its typer declaration, default).
_ENGINE_FLAGS = (
    ("ctx", Annotated[str, typer.Option(
        help="Context size in tokens (prompt + replies): 32768, 32k, 128k (k = 1024).",
        rich_help_panel=ENGINE)], "32k"),
    ("kv_cache", Annotated[KVCache, typer.Option(
        "--kv-cache", case_sensitive=False,  # INT8 as int8, as --ctx 32K and --device CPU
        help="KV cache format: bf16, or int8 codes + a float32 scale per token and head.",
        rich_help_panel=ENGINE)], KVCache.bf16),
    ("page_size", Annotated[int, typer.Option(
        help="Positions per KV page: 16, 32, 64 or 128.", rich_help_panel=ENGINE)], 64),
    ("prefill_chunk", Annotated[int | None, typer.Option(
        help="Prompt tokens per prefill step (default: 2048 on CUDA, 512 on CPU).",
        show_default=False, rich_help_panel=ENGINE)], None),
    ("attention", Annotated[Attention, typer.Option(
        case_sensitive=False,  # TRITON as triton, as --kv-cache INT8 and --device CPU
        metavar="<backend>",  # the choices are in the help (the list would wrap mid-word)
        help="Attention backend: reference (PyTorch), triton (kernels), auto (best available).",
        rich_help_panel=ENGINE)], Attention.auto),
    ("cuda_graphs", Annotated[bool | None, typer.Option(
        "--cuda-graphs/--no-cuda-graphs",
        help="Replay each decode step as a CUDA graph (default: on with CUDA and triton "
             "attention).", show_default=False, rich_help_panel=ENGINE)], None),
    ("device", Annotated[str | None, typer.Option(
        help="cuda, cuda:N or cpu (default: cuda when available, else cpu with a warning).",
        show_default=False, rich_help_panel=ENGINE)], None),
)
_SAMPLING_FLAGS = (
    ("max_new_tokens", Annotated[int, typer.Option(
        help="Most tokens per reply; 0 = no limit (until a stop token or a full context).",
        rich_help_panel=SAMPLING)], 512),
    ("temperature", Annotated[float | None, typer.Option(
        help="Sampling temperature, 0 to 100; below 1e-5 = greedy" + _GEN, show_default=False,
        rich_help_panel=SAMPLING)], None),
    ("top_p", Annotated[float | None, typer.Option(
        help="Nucleus sampling mass in (0, 1]" + _GEN, show_default=False,
        rich_help_panel=SAMPLING)], None),
    ("top_k", Annotated[int | None, typer.Option(
        help="Keep the k most likely tokens; 0 = off" + _GEN, show_default=False,
        rich_help_panel=SAMPLING)], None),
    ("min_p", Annotated[float | None, typer.Option(
        help="Drop tokens below min-p x the top probability" + _GEN, show_default=False,
        rich_help_panel=SAMPLING)], None),
    ("presence_penalty", Annotated[float | None, typer.Option(
        help="Subtract from the logits of tokens already in the reply, in [-2, 2]" + _GEN,
        show_default=False, rich_help_panel=SAMPLING)], None),
    ("seed", Annotated[int | None, typer.Option(
        help="Seed for reproducible sampling.", show_default=False,
        rich_help_panel=SAMPLING)], None),
    ("speculate", Annotated[Speculate, typer.Option(
        case_sensitive=False,  # ON as on, as --kv-cache INT8 and --device CPU
        help="Prompt-lookup speculative decoding (drafts copied from the prompt, verified in "
             "one step; greedy replies unchanged): auto = on for chat and summarize. Off with "
             "a presence penalty.", rich_help_panel=SAMPLING)], Speculate.auto),
)
_REPLY_OUTPUT_FLAGS = (
    ("think", Annotated[bool, typer.Option(
        "--think/--no-think", help="Qwen3 thinking mode (the model reasons before it answers).",
        rich_help_panel=OUTPUT)], False),
    ("hide_thinking", Annotated[bool, typer.Option(
        "--hide-thinking", help="Do not show the thinking text (it is shown dimmed otherwise).",
        rich_help_panel=OUTPUT)], False),
)


def _json_flag(help: str):
    return ("json", Annotated[bool, typer.Option("--json", help=help, rich_help_panel=OUTPUT)],
            False)


_DEBUG_FLAG = ("debug", Annotated[bool, typer.Option(
    "--debug", help="Show the traceback of an error.", rich_help_panel=OUTPUT)], False)


@dataclass
class Options:
    """The shared flags of one command (field names equal the flags' parameter names)."""

    ctx: str = "32k"
    kv_cache: KVCache = KVCache.bf16
    page_size: int = 64
    prefill_chunk: int | None = None
    attention: Attention = Attention.auto
    cuda_graphs: bool | None = None
    device: str | None = None
    max_new_tokens: int = 0
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    seed: int | None = None
    speculate: Speculate = Speculate.auto
    think: bool = False
    hide_thinking: bool = False
    json: bool = False
    debug: bool = False

    def sampling_overrides(self) -> dict:
        """Keyword arguments for ``Engine.default_sampling`` (None: the checkpoint's default)."""
        return dict(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                    min_p=self.min_p, presence_penalty=self.presence_penalty, seed=self.seed,
                    max_new_tokens=self.max_new_tokens or None)


    def speculation(self, command: str) -> bool:
        """Whether ``command``'s replies speculate (``--speculate``; auto: chat, summarize)."""
        if self.speculate == Speculate.auto:
            return command in SPECULATING_COMMANDS
        return self.speculate == Speculate.on


_OPTION_NAMES = frozenset(f.name for f in fields(Options))


def flag_set(*, reply: bool = True, max_new_tokens: int = 512, think: bool = False,
             json_help: str = JSON_HELP) -> tuple:
    """The shared flags of one command as ``(name, annotated type, default)`` in --help order.

    ``reply=False`` (bench): the Engine flags, ``--json`` and ``--debug`` only. ``max_new_tokens``
    and ``think`` are the command's defaults for those flags."""
    if not reply:
        return (*_ENGINE_FLAGS, _json_flag(json_help), _DEBUG_FLAG)
    sampling = tuple((n, t, max_new_tokens if n == "max_new_tokens" else d)
                     for n, t, d in _SAMPLING_FLAGS)
    output = tuple((n, t, think if n == "think" else d) for n, t, d in _REPLY_OUTPUT_FLAGS)
    return (*_ENGINE_FLAGS, *sampling, *output, _json_flag(json_help), _DEBUG_FLAG)


_PANELS = (ENGINE, SAMPLING, OUTPUT)


def _panel_rank(param: inspect.Parameter) -> int:
    """Where a parameter goes in --help: -1 for an argument, 0 for the command's own panel (any
    other name), then the panels in ``_PANELS`` order (options without one last)."""
    info = next((m for m in getattr(param.annotation, "__metadata__", ())
                 if isinstance(m, (typer.models.ArgumentInfo, typer.models.OptionInfo))), None)
    if isinstance(info, typer.models.ArgumentInfo):
        return -1
    panel = getattr(info, "rich_help_panel", None)
    if panel is None:
        return len(_PANELS) + 1
    return _PANELS.index(panel) + 1 if panel in _PANELS else 0


def shared_options(**kw) -> Callable[[Callable], Callable]:
    """Decorator: add the shared flags (``flag_set(**kw)``) to a typer command.

    The command must have a keyword-only parameter ``opts: Options``; typer sees the shared flags
    in its place and the command is called with ``opts=Options(...)`` built from their values.
    Arguments come first, then the options grouped by help panel (the command's own panel,
    then Engine, Sampling, Output; in a shared panel the command's own options before the
    shared ones where they stand before ``opts``), so that every command lists its panels in
    the same order. Apply below ``@app.command()``.

    Raises:
        TypeError: the command lacks ``opts`` or declares a parameter named like a shared flag.
    """
    flags = flag_set(**kw)

    def decorate(command: Callable) -> Callable:
        sig = inspect.signature(command)
        own = list(sig.parameters.values())
        names = [p.name for p in own]
        if "opts" not in names:
            raise TypeError(f"{command.__name__} needs a keyword-only parameter opts: Options")
        clash = _OPTION_NAMES.intersection(names)
        if clash:
            raise TypeError(f"{command.__name__} declares shared flags itself: {sorted(clash)}")
        at = names.index("opts")
        shared = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default,
                                    annotation=annotation) for name, annotation, default in flags]
        shared_names = [p.name for p in shared]

        @functools.wraps(command)
        def wrapper(**values):
            opts = Options(**{name: values.pop(name) for name in shared_names})
            return command(**values, opts=opts)

        params = sorted([*own[:at], *shared, *own[at + 1:]], key=_panel_rank)
        wrapper.__signature__ = sig.replace(parameters=[
            p if _panel_rank(p) < 0 else p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
            for p in params])
        return wrapper

    return decorate
