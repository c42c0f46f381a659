"""Engine configuration: ``EngineConfig``, a frozen dataclass validated on construction.

``EngineConfig`` says what to load and how much KV cache to allocate (how to pick each next token
is ``SamplingParams``, in ``infer/sampling_params.py``). It (and ``parse_ctx``) raise
``infer.errors.OptionError`` for a bad value, a ``ValueError`` that names the parameter
(``page_size must be one of ...``) and says how to fix it; the CLI names the flag instead
(``--page-size must be ...``). Style after mini-sglang's ``engine/config.py``: frozen, validated
in ``__post_init__``, derived values as methods/properties.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from infer.errors import OptionError
from infer.kv_pool import KV_DTYPES as KV_CACHES
from infer.kv_pool import PAGE_SIZES, pages_for
from models.dtypes import TORCH_DTYPES as DTYPES

ATTENTION_KINDS = ("auto", "reference", "triton")

MAX_BATCH = 16  # sequences in one decode step: the projections' GEMM is row-invariant up to 16

_CTX_RE = re.compile(r"^\s*([0-9]+)([kK]?)\s*$")  # ASCII digits; "32k", not "32 k"


def parse_ctx(text: str | int) -> int:
    """Parse a context size: ``"32768"``, ``"32k"``/``"32K"`` (k = 1024), ``"128k"`` or an int.

    Returns:
        The size in tokens (> 0).

    Raises:
        OptionError: if the text is not a positive token count.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        n = text
    else:
        m = _CTX_RE.match(str(text))
        if not m and _CTX_RE.match(str(text).strip().removeprefix("-")):  # "-5", "-4k"
            raise OptionError("ctx", f"must be at least 1 token, got {text!r}")
        if not m:
            raise OptionError("ctx", f"must be a token count such as 32768 or 32k (k = 1024 "
                                     f"tokens), got {text!r}")
        n = int(m.group(1)) * (1024 if m.group(2) else 1)
    if n <= 0:
        raise OptionError("ctx", f"must be at least 1 token, got {text!r}")
    return n


def parse_device(text: str) -> torch.device:
    """Parse a device: ``"cuda"``, ``"cuda:N"`` or ``"cpu"``, in any case (``"CPU"``,
    ``"CUDA:0"``), as a ``torch.device``.

    Raises:
        OptionError: any other text (the message names the accepted forms).
    """
    try:
        dev = torch.device(text.strip().lower())
    except (RuntimeError, TypeError, AttributeError):
        dev = None
    if dev is None or dev.type not in ("cuda", "cpu"):
        raise OptionError("device", f"must be cuda, cuda:N or cpu, got {text!r}")
    return dev


def pool_pages(ctx: int, page_size: int, max_batch: int = 1) -> int:
    """KV pages an engine allocates: ``max_batch`` contexts of ``ctx`` positions plus one page of
    slack (the one home of the pool-size rule)."""
    return max_batch * pages_for(ctx, page_size) + 1


def default_device() -> str:
    """``"cuda"`` when a CUDA GPU is visible, else ``"cpu"``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device_available(device: torch.device) -> None:
    """Raise ``ValueError`` naming ``device`` when it is a CUDA device that is not visible."""
    if device.type != "cuda":
        return
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ValueError(f"device {device} requested but no CUDA GPU is available: "
                         "use --device cpu")
    if device.index is not None and device.index >= count:
        raise ValueError(f"device {device} requested but only {count} CUDA GPU(s) are visible "
                         f"(cuda:0 to cuda:{count - 1}): pick one of those")


def _not_one_of(name: str, value, choices) -> OptionError:
    """The error for ``value`` outside ``choices`` (lower-case names), naming the lower-case
    choice where ``value`` differs from one only in case (``'INT8'``: lower case ``'int8'``):
    the frozen config keeps its fields as given, and the engine compares them lower-case."""
    hint = (f" (lower case: {value.lower()!r})"
            if isinstance(value, str) and value.lower() in choices else "")
    return OptionError(name, f"must be one of {', '.join(choices)}, got {value!r}{hint}")


def check_graph_backend(attention: str) -> None:
    """Raise ``ValueError`` unless CUDA graphs can capture decode with ``attention`` (a backend
    name: the reference attention syncs the host, so it cannot be captured)."""
    if attention == "reference":
        raise ValueError("CUDA graphs need the triton attention backend, not reference: use "
                         "--attention triton (or auto), or --no-cuda-graphs")


@dataclass(frozen=True)
class EngineConfig:
    """What the engine loads and allocates.

    Attributes:
        model: folder holding ``config.json``, ``*.safetensors`` and the tokenizer files (the CLI
            resolves hub ids to a folder before building this).
        ctx: context size in tokens that one session can hold (prompt + reply, all turns).
            Use ``parse_ctx`` for user text.
        kv_cache: ``"bf16"``: K/V unquantized in the activation dtype (bfloat16 on CUDA, float32
            on the CPU); ``"int8"``: INT8 codes plus one float32 scale per (token, KV head),
            the keys balanced first (``models/key_balance.py``). Lower case only (the CLI's
            ``--kv-cache`` takes any case and passes it lower-cased); ``"INT8"`` is refused
            with the lower-case name in the message, as are ``attention`` and ``dtype``.
        page_size: positions per KV page, one of 16, 32, 64, 128.
        device: ``"cuda"``, ``"cuda:1"``, ``"cpu"`` in any case (``parse_device``); None picks
            ``default_device()``.
        dtype: activation/weight dtype name (``"bfloat16"``, ``"float16"``, ``"float32"``);
            None picks bfloat16 on CUDA and float32 on the CPU (CPU float32 matmuls are faster
            than bfloat16 ones and make the CPU path an exact reference).
        prefill_chunk: prompt tokens per prefill step; each chunk attends to everything cached
            before it. None picks 2048 on CUDA and 512 on the CPU.
        attention: ``"reference"`` (plain PyTorch over the paged pool), ``"triton"`` (the
            kernels), or ``"auto"`` (the best available on the device).
        cuda_graphs: replay the decode step as a CUDA graph (``infer/graphs.py``); None turns it
            on for CUDA with the Triton backend (see ``use_cuda_graphs``). Prefill stays eager.
        max_batch: the most sequences decoded together (1..16); the KV pool holds ``max_batch``
            full contexts.

    Raises:
        OptionError: on any invalid value (the message names the option and the allowed values).
        ValueError: ``cuda_graphs`` with a CPU device or the reference attention.
    """

    model: str | Path
    ctx: int = 32768
    kv_cache: str = "bf16"
    page_size: int = 64
    device: str | None = None
    dtype: str | None = None
    prefill_chunk: int | None = None
    attention: str = "auto"
    cuda_graphs: bool | None = None
    max_batch: int = 1

    def __post_init__(self):
        if not isinstance(self.ctx, int) or isinstance(self.ctx, bool) or self.ctx < 1:
            raise OptionError("ctx", f"must be a positive number of tokens, got {self.ctx!r}")
        if self.kv_cache not in KV_CACHES:
            raise _not_one_of("kv_cache", self.kv_cache, KV_CACHES)
        if self.page_size not in PAGE_SIZES:
            raise OptionError("page_size", f"must be one of {', '.join(map(str, PAGE_SIZES))}, "
                                           f"got {self.page_size!r}")
        if self.dtype is not None and self.dtype not in DTYPES:
            raise _not_one_of("dtype", self.dtype, DTYPES)
        if self.prefill_chunk is not None and (not isinstance(self.prefill_chunk, int)
                                               or self.prefill_chunk < 1):
            raise OptionError("prefill_chunk", f"must be a positive number of tokens, "
                                               f"got {self.prefill_chunk!r}")
        if self.attention not in ATTENTION_KINDS:
            raise _not_one_of("attention", self.attention, ATTENTION_KINDS)
        if self.device is not None:
            parse_device(self.device)
        if self.cuda_graphs not in (None, True, False):
            raise OptionError("cuda_graphs", f"must be True, False or None (auto), "
                                             f"got {self.cuda_graphs!r}")
        if self.cuda_graphs:
            if self.torch_device.type != "cuda":
                raise ValueError(f"CUDA graphs need a CUDA device, but the device is "
                                 f"{self.torch_device}: drop --cuda-graphs or use --device cuda")
            check_graph_backend(self.attention)
        if not isinstance(self.max_batch, int) or isinstance(self.max_batch, bool) or \
                not 1 <= self.max_batch <= MAX_BATCH:
            raise OptionError("max_batch", f"must be 1 to {MAX_BATCH} sequences, "
                                           f"got {self.max_batch!r}")

    # ------------------------------------------------------------------ resolved values

    @property
    def torch_device(self) -> torch.device:
        """The device to run on (``default_device()`` when ``device`` is None)."""
        return parse_device(self.device) if self.device is not None else torch.device(
            default_device())

    @property
    def torch_dtype(self) -> torch.dtype:
        """The activation dtype: ``dtype``, else bfloat16 on CUDA and float32 on the CPU."""
        if self.dtype is not None:
            return DTYPES[self.dtype]
        return torch.bfloat16 if self.torch_device.type == "cuda" else torch.float32

    @property
    def use_cuda_graphs(self) -> bool:
        """``cuda_graphs``, else True on CUDA unless the reference attention is asked for."""
        if self.cuda_graphs is not None:
            return self.cuda_graphs
        return self.torch_device.type == "cuda" and self.attention != "reference"

    @property
    def chunk(self) -> int:
        """Prefill chunk in tokens: ``prefill_chunk``, else 2048 on CUDA and 512 on the CPU."""
        if self.prefill_chunk is not None:
            return self.prefill_chunk
        return 2048 if self.torch_device.type == "cuda" else 512

    @property
    def num_pages(self) -> int:
        """KV pages to allocate: ``max_batch`` contexts of ``ctx`` positions plus one page of
        slack."""
        return pool_pages(self.ctx, self.page_size, self.max_batch)
