"""models/weight_stream.py: the loader's staged copy (pinned buffers, reader threads) run on the
CPU with plain buffers and small chunks: the same parameters bit for bit as the plain path, the
same errors, and a plan that covers every byte exactly once."""

from __future__ import annotations

import json
import random
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from models import loader, weight_stream
from models.loader import load_model
from models.weight_stream import TensorCopy, copy_tensors, plan_batches, tensor_offsets

SMALL = dict(vocab_size=512)


@pytest.fixture
def staged(monkeypatch):
    """Route load_model through the staged copy on the CPU, with ``chunk`` bytes per buffer."""
    def use(chunk: int = 4096, buffers: int = 3):
        monkeypatch.setattr(loader, "_staged", lambda device: True)
        monkeypatch.setattr(weight_stream, "CHUNK_BYTES", chunk)
        monkeypatch.setattr(weight_stream, "BUFFERS", buffers)
    return use


def _same_parameters(a, b) -> None:
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert pa.keys() == pb.keys()
    for name in pa:
        assert pa[name].dtype == pb[name].dtype, name
        # bit for bit: compare the bytes (NaN-safe, and -0.0 differs from 0.0)
        assert torch.equal(pa[name].view(-1).view(torch.uint8),
                           pb[name].view(-1).view(torch.uint8)), name


@pytest.mark.parametrize("chunk,buffers", [(4096, 1), (4096, 2), (4104, 3), (1 << 20, 4),
                                           (8, 2)])
@pytest.mark.parametrize("kw", [dict(tie=False), dict(tie=True, shards=3)])
def test_staged_copy_is_bit_identical_to_the_plain_path(tiny_ckpt_factory, staged, chunk,
                                                        buffers, kw):
    """Small chunks split the embedding and the fused parts across buffers; 8 bytes is the
    smallest (every tensor cut into pieces of 2 float32 values)."""
    folder = tiny_ckpt_factory(**SMALL, **kw)
    plain = load_model(folder, dtype=torch.float32)
    staged(chunk, buffers)
    _same_parameters(load_model(folder, dtype=torch.float32), plain)


@pytest.mark.parametrize("stored", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("run", ["bfloat16", "float32", "float16"])
def test_staged_casts_like_the_plain_path(tiny_ckpt_factory, staged, stored, run):
    folder = tiny_ckpt_factory(**SMALL, tie=False, shards=2, dtype=stored)
    plain = load_model(folder, dtype=run)
    staged(3000 // 8 * 8, 2)
    model = load_model(folder, dtype=run)
    _same_parameters(model, plain)
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()


def test_staged_tied_lm_head_shares_the_embedding(tiny_ckpt_factory, staged):
    staged()
    model = load_model(tiny_ckpt_factory(**SMALL, tie=True), dtype=torch.float32)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_staged_names_the_first_non_finite_tensor(tiny_ckpt_factory, staged, tmp_path, bad):
    """Two bad tensors, the second in a later chunk: the message names the first in load order,
    as the plain path does."""
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt_factory(**SMALL, tie=False, dtype="float16"), folder)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.norm.weight"][3] = bad
    tensors["model.layers.0.mlp.down_proj.weight"][-1, -1] = bad
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ValueError) as plain:
        load_model(folder, dtype=torch.float32)
    staged(2048, 2)
    with pytest.raises(ValueError) as info:
        load_model(folder, dtype=torch.float32)
    assert str(info.value) == str(plain.value)
    assert "holds non-finite values (inf or NaN)" in str(info.value)


def test_staged_names_a_value_beyond_the_run_dtype(tiny_ckpt_factory, staged, tmp_path):
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt_factory(**SMALL, tie=False, dtype="float32"), folder)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.layers.1.self_attn.v_proj.weight"][0, 0] = 1e6
    save_file(tensors, folder / "model.safetensors")
    staged(4096, 2)
    load_model(folder, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"^tensor model\.layers\.1\.self_attn\.v_proj\.weight in "
                                         r"model\.safetensors has values beyond the range of "
                                         r"float16"):
        load_model(folder, dtype=torch.float16)


@pytest.mark.parametrize("env,device,want", [(None, "cuda", True), ("1", "cuda", True),
                                             ("0", "cuda", False), (None, "cpu", False),
                                             ("1", "cpu", False)])
def test_staged_is_the_cuda_default_and_opts_out(monkeypatch, env, device, want):
    if env is None:
        monkeypatch.delenv("INFER_STAGED_LOAD", raising=False)
    else:
        monkeypatch.setenv("INFER_STAGED_LOAD", env)
    assert loader._staged(torch.device(device)) is want


@pytest.mark.parametrize("env", ["false", "off", "yes", "2"])
def test_staged_refuses_other_values(monkeypatch, env):
    monkeypatch.setenv("INFER_STAGED_LOAD", env)
    with pytest.raises(ValueError, match="INFER_STAGED_LOAD must be 0 .* or 1"):
        loader._staged(torch.device("cpu"))


def test_mixed_dtypes_with_odd_sizes_are_aligned_and_exact(tmp_path):
    """A file whose float32 tensors sit at offsets that are not multiples of 4 (after odd-sized
    float16 ones): each piece starts a batch where its dtype's view would be misaligned."""
    gen = torch.Generator().manual_seed(0)
    want = {}
    for k in range(12):
        dtype = (torch.float16, torch.float32, torch.bfloat16)[k % 3]
        want[f"t{k:02d}"] = torch.randn(1 + 7 * k, generator=gen).to(dtype)
    path = tmp_path / "mixed.safetensors"
    _write_in_order(path, want)  # save_file would sort them by alignment
    assert {n: t.tolist() for n, t in load_file(path).items()} == \
        {n: t.tolist() for n, t in want.items()}
    offsets = tensor_offsets(path)
    assert any(b % 4 for name, (b, _) in offsets.items() if want[name].dtype == torch.float32)
    for chunk in (8, 64, 1 << 12):
        for run in (None, torch.float64):
            outs = {n: torch.empty(t.numel(), dtype=run or t.dtype) for n, t in want.items()}
            copies = [TensorCopy(n, path, *_span(offsets[n]), want[n].dtype, outs[n])
                      for n in want]
            assert copy_tensors(copies, "cpu", chunk_bytes=chunk, buffers=2) == [True] * 12
            for n, t in want.items():
                assert torch.equal(outs[n], t.to(outs[n].dtype)), (chunk, n)


def _write_in_order(path, tensors: dict[str, torch.Tensor]) -> None:
    """A safetensors file with the tensors' data in the dict's order, unaligned."""
    codes = {torch.float16: "F16", torch.float32: "F32", torch.bfloat16: "BF16"}
    header, data, at = {}, b"", 0
    for name, t in tensors.items():
        raw = t.contiguous().view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": codes[t.dtype], "shape": list(t.shape),
                        "data_offsets": [at, at + len(raw)]}
        data, at = data + raw, at + len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)


def _span(begin_end: tuple[int, int]) -> tuple[int, int]:
    begin, end = begin_end
    return begin, end - begin


def test_the_plan_covers_every_byte_once():
    """Random tensors over two files: pieces tile each tensor in order, stay inside their
    batch and its chunk, and start at offsets aligned to their element size."""
    rng = random.Random(0)
    dtypes = (torch.float16, torch.float32, torch.bfloat16)
    copies, pos = [], {"a": 8 + 64, "b": 8 + 128}
    for k in range(200):
        file = rng.choice("ab")
        dtype = rng.choice(dtypes)
        n = rng.choice([0, 1, 3, 17, 500, 5000])
        nbytes = n * dtype.itemsize
        copies.append(TensorCopy(f"t{k}", file, pos[file], nbytes, dtype, torch.empty(0)))
        pos[file] += nbytes
    for chunk in (8, 96, 4096, 1 << 16):
        seen = {k: [] for k in range(len(copies))}
        for batch in plan_batches(copies, chunk):
            assert 0 < batch.nbytes <= chunk
            for p in batch.pieces:
                c = copies[p.item]
                assert c.file == batch.file and p.offset % c.dtype.itemsize == 0
                assert batch.begin + p.offset == c.begin + p.lo * c.dtype.itemsize
                assert p.offset + (p.hi - p.lo) * c.dtype.itemsize <= batch.nbytes
                seen[p.item].append((p.lo, p.hi))
        for k, c in enumerate(copies):
            spans = sorted(seen[k])
            n = c.nbytes // c.dtype.itemsize
            if n == 0:
                assert spans == [], (chunk, k)
                continue
            assert [lo for lo, _ in spans] == [0] + [hi for _, hi in spans[:-1]], (chunk, k)
            assert spans[-1][1] == n and all(lo < hi for lo, hi in spans), (chunk, k)


def test_a_file_shorter_than_its_header_is_named(tmp_path):
    path = tmp_path / "short.safetensors"
    save_file({"w": torch.ones(100)}, path)
    (begin, end) = tensor_offsets(path)["w"]
    out = torch.empty(200)
    with pytest.raises(ValueError, match=r"cannot read .*short\.safetensors: it ends at byte "
                                         r"\d+, before the tensors its header lists"):
        copy_tensors([TensorCopy("w", path, begin, 800, torch.float32, out)], "cpu")


@pytest.mark.parametrize("content", [b"", b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ",
                                     b"\x02\x00\x00\x00\x00\x00\x00\x00[]"])
def test_a_corrupt_header_is_named(tmp_path, content):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"cannot read .*bad\.safetensors: not a valid "
                                         "safetensors file"):
        tensor_offsets(path)


def test_offsets_match_safetensors(tiny_ckpt_factory):
    """Our header reading agrees with the safetensors library on every tensor's bytes."""
    folder = tiny_ckpt_factory(**SMALL, tie=False)
    path = folder / "model.safetensors"
    header_len = int.from_bytes(path.read_bytes()[:8], "little")
    header = json.loads(path.read_bytes()[8:8 + header_len])
    raw = path.read_bytes()
    for name, t in load_file(path).items():
        begin, end = tensor_offsets(path)[name]
        assert end - begin == t.numel() * t.element_size() == \
            header[name]["data_offsets"][1] - header[name]["data_offsets"][0]
        assert raw[begin:end] == t.contiguous().view(torch.uint8).numpy().tobytes(), name


@pytest.mark.gpu
@pytest.mark.parametrize("stored", ["float32", "bfloat16"])
@pytest.mark.parametrize("run", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("chunk,buffers", [(None, None), (4096, 3), (8, 1)])
def test_gpu_staged_load_equals_the_cpu_load(tiny_ckpt_factory, monkeypatch, stored, run, chunk,
                                             buffers):
    """On CUDA (pinned buffers, async copies, casts on the device): the CPU's parameters."""
    monkeypatch.setenv("INFER_STAGED_LOAD", "1")
    folder = tiny_ckpt_factory(**SMALL, tie=False, shards=2, dtype=stored)
    want = load_model(folder, dtype=run)
    if chunk is not None:
        monkeypatch.setattr(weight_stream, "CHUNK_BYTES", chunk)
        monkeypatch.setattr(weight_stream, "BUFFERS", buffers)
    got = load_model(folder, device="cuda", dtype=run)
    assert got.model.embed_tokens.weight.is_cuda
    _same_parameters(got.cpu(), want)


@pytest.mark.gpu
def test_gpu_staged_load_names_a_non_finite_tensor(tiny_ckpt_factory, tmp_path, monkeypatch):
    monkeypatch.setenv("INFER_STAGED_LOAD", "1")
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_ckpt_factory(**SMALL, tie=False, dtype="float16"), folder)
    tensors = load_file(folder / "model.safetensors")
    tensors["model.layers.1.mlp.up_proj.weight"][2, 2] = float("nan")
    save_file(tensors, folder / "model.safetensors")
    with pytest.raises(ValueError, match=r"^tensor model\.layers\.1\.mlp\.up_proj\.weight in "
                                         r"model\.safetensors holds non-finite values"):
        load_model(folder, device="cuda", dtype=torch.bfloat16)
