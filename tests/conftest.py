"""Shared test setup: the Triton interpreter on CPU, paths to ../shared data, the gpu marker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

# Kernels run under the Triton interpreter when no GPU is present. This must be set before any
# module decorated with @triton.jit is imported, and conftest.py is imported first.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


if os.environ.get("TRITON_INTERPRET") == "1":
    import kernels  # noqa: E402, F401  (its __init__ patches the interpreter for numpy >= 2.4)

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("INFER_SHARED", REPO.parent / "shared")).resolve()
TOKENIZER_DIR = SHARED / "data" / "qwen3-tokenizer"
CONFIGS_DIR = SHARED / "data" / "qwen3-configs"
TEXTS_DIR = SHARED / "data" / "texts"


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def tokenizer_dir() -> Path:
    if not (TOKENIZER_DIR / "tokenizer.json").is_file():
        pytest.fail(f"Qwen3 tokenizer files not found at {TOKENIZER_DIR} (set INFER_SHARED)")
    return TOKENIZER_DIR


@pytest.fixture(scope="session")
def texts_dir() -> Path:
    if not TEXTS_DIR.is_dir():
        pytest.fail(f"texts not found at {TEXTS_DIR} (set INFER_SHARED)")
    return TEXTS_DIR


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(scope="session", autouse=True)
def _own_cache_dir(tmp_path_factory):
    """Point infer's per-user cache (``infer/bandwidth.py``) at a temporary folder: the tests,
    and the CLI runs they start, never read or write the user's ``~/.cache/infer``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("INFER_CACHE_DIR", str(tmp_path_factory.mktemp("infer_cache")))
        yield


@pytest.fixture(scope="session")
def tiny_ckpt_factory(tmp_path_factory):
    """Factory for random tiny Qwen3 checkpoints: ``tiny_ckpt_factory(**kw) -> Path``.

    Keyword arguments go to ``models.random_checkpoint.write_random_checkpoint`` (size "tiny" and
    dtype "float32" by default; e.g. ``tie=False, shards=3, vocab_size=512, seed=1,
    tokenizer=TOKENIZER_DIR, overrides={"rope_scaling": {...}}``). Folders are cached per argument
    set for the session, so treat them as read-only.
    """
    from models.random_checkpoint import write_random_checkpoint

    cache: dict[str, Path] = {}

    def make(**kw) -> Path:
        kw.setdefault("size", "tiny")
        kw.setdefault("dtype", "float32")
        key = repr(sorted(kw.items(), key=lambda x: x[0]))
        if key not in cache:
            out = tmp_path_factory.mktemp(f"ckpt_{kw['size']}")
            cache[key] = write_random_checkpoint(out, device="cpu", **kw)
        return cache[key]

    return make


@pytest.fixture(scope="module")
def tiny_cpu(tiny_ckpt_factory):
    """The tiny random Qwen3 loaded on the CPU in float32 (one per test module)."""
    from models.loader import load_model

    return load_model(tiny_ckpt_factory(), device="cpu", dtype=torch.float32)


@pytest.fixture(scope="module")
def gpu_qwen3_4l(tiny_ckpt_factory):
    """A 4-layer Qwen3-0.6B-shaped random model in bfloat16 on the GPU (GPU tests only)."""
    from models.loader import load_model

    model = load_model(tiny_ckpt_factory(size="0.6b", num_hidden_layers=4, dtype="bfloat16"),
                       device="cuda", dtype=torch.bfloat16)
    yield model
    del model
    torch.cuda.empty_cache()


@pytest.fixture(scope="module", params=["tiny", "0.6b-4l"])
def gpu_bf16_model(request, tiny_ckpt_factory):
    """The tiny and a 4-layer Qwen3-0.6B-shaped random model in bfloat16 on the GPU, one per
    test module and param (GPU tests only); a test may switch ``use_fused_kernels``, which is
    back on for the next module."""
    from models.loader import load_model

    kw = dict(dtype="bfloat16")
    if request.param != "tiny":
        kw.update(size="0.6b", num_hidden_layers=4)
    model = load_model(tiny_ckpt_factory(**kw), device="cuda", dtype=torch.bfloat16)
    yield model
    model.use_fused_kernels = True
    del model
    torch.cuda.empty_cache()


@pytest.fixture(scope="session")
def tiny_ckpt(tiny_ckpt_factory, tokenizer_dir) -> Path:
    """A tiny tied float32 Qwen3 checkpoint (vocab 151936) with the real tokenizer files."""
    return tiny_ckpt_factory(tokenizer=str(tokenizer_dir))


def nmse(x: torch.Tensor, ref: torch.Tensor) -> float:
    """Normalized mean squared error ``sum((x - ref)^2) / sum(ref^2)`` in float64 (llama.cpp's
    ``nmse``): the INT8 kernels' error measure against full precision."""
    x, ref = x.double(), ref.double()
    return float(((x - ref) ** 2).sum() / (ref ** 2).sum())


@pytest.fixture(scope="session")
def tok(tiny_ckpt):
    from models.tokenizer import Qwen3Tokenizer

    return Qwen3Tokenizer.from_folder(tiny_ckpt)


@pytest.fixture
def cli_tokenizer_once(tok, tiny_ckpt, monkeypatch):
    """For the CLI tests (``pytestmark = pytest.mark.usefixtures("cli_tokenizer_once")``):
    reading tokenizer.json takes about a second, so hand the CLI the session's tokenizer (it is
    immutable once built) instead of reading it again on every invocation."""
    from models.tokenizer import Qwen3Tokenizer

    real = Qwen3Tokenizer.from_folder.__func__

    def from_folder(cls, folder):
        return tok if str(folder) == str(tiny_ckpt) else real(cls, folder)

    monkeypatch.setattr(Qwen3Tokenizer, "from_folder", classmethod(from_folder))


@pytest.fixture(scope="module")
def one_thread():
    """Torch on one thread for the module: tiny matmuls run far faster on one thread than on a
    few contended ones."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def reversed_grid(monkeypatch):
    """``reversed_grid(True)``: the interpreter then runs a launch's programs in reverse grid
    order (the interpreter runs them in grid order; a GPU in no set order), so that a program
    that reads what a later-numbered program writes is caught."""
    import triton.runtime.interpreter as triton_interpreter

    builder = triton_interpreter.interpreter_builder
    dims = [1, 1, 1]
    set_dim, set_idx = builder.set_grid_dim, builder.set_grid_idx

    def record_dim(x, y, z):
        dims[:] = [x, y, z]
        set_dim(x, y, z)

    def switch(on: bool) -> None:
        monkeypatch.setattr(builder, "set_grid_dim", record_dim)
        monkeypatch.setattr(builder, "set_grid_idx", (lambda x, y, z: set_idx(
            dims[0] - 1 - x, dims[1] - 1 - y, dims[2] - 1 - z)) if on else set_idx)

    return switch


@pytest.fixture(scope="module")
def book(texts_dir, tmp_path_factory) -> tuple[Path, str]:
    """A text file longer than a 2k context (War and Peace's first 20,000 characters) and its
    text, for the summarize-in-parts tests."""
    path = tmp_path_factory.mktemp("book") / "book.txt"
    text = (texts_dir / "war_and_peace.txt").read_text(encoding="utf-8")[:20000]
    path.write_text(text, encoding="utf-8")
    return path, text
