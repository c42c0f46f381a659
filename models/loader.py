"""Strict, streaming safetensors loader for Qwen3 checkpoints in the Hugging Face layout.

Design (after mini-sglang ``models/weight.py`` and nano-vllm ``utils/loader.py``):

1. Read ``config.json`` (``models.config.Qwen3Config``; wrong architecture -> ValueError).
2. Find the files: ``model.safetensors``, or the shards named in ``model.safetensors.index.json``.
3. Read only the safetensors headers and check every name, shape and dtype against the model
   before any weight memory is allocated: missing and unexpected tensors are errors naming them.
   (Steps 1-3 read the folder through ``models/checkpoint_folder.py``; the checks are here.)
4. Build the model on the ``meta`` device, materialize it empty on the target device in the run
   dtype, then copy every tensor straight into its place (a fused ``qkv_proj``/``gate_up_proj``
   receives each part into its rows, per ``Qwen3ForCausalLM.packed_modules_mapping``). Host
   memory never holds a second copy of the model. The tensors are read one at a time
   (``safe_open``) and copied into place on the CPU. On CUDA (the default there;
   ``INFER_STAGED_LOAD=0`` opts out) ``models/weight_stream.py`` reads the files into a few
   pinned staging buffers on reader threads while the previous buffers' host-to-device copies
   run (the casts to the run dtype on the GPU): the same bytes, bit for bit, 2-3x faster than
   tensor by tensor in a fresh process (BENCHMARKS.md, "Start-up").
   Each tensor is checked for inf/NaN after the copy, on its device (non-finite weights would
   give garbage text with exit 0); the first one in load order is named.

Tied embeddings are an explicit branch: with ``tie_word_embeddings`` and no ``lm_head.weight``
stored, lm_head shares the embedding matrix; a stored ``lm_head.weight`` is always used.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import torch
from safetensors import safe_open

from models.checkpoint_folder import checkpoint_files, read_config, read_headers
from models.config import Qwen3Config
from models.dtypes import SAFETENSORS_DTYPES, TORCH_DTYPES
from models.meta_modules import empty, meta_modules, to_empty
from models.qwen3 import Qwen3ForCausalLM
from models.weight_stream import TensorCopy, copy_tensors, tensor_offsets

LM_HEAD = "lm_head.weight"
_MAX_NAMES = 8  # tensor names listed in an error message


def _name_list(names) -> str:
    names = sorted(names)
    more = f" (and {len(names) - _MAX_NAMES} more)" if len(names) > _MAX_NAMES else ""
    return ", ".join(names[:_MAX_NAMES]) + more


def checkpoint_targets(model: Qwen3ForCausalLM) -> dict[str, tuple[str, int, int]]:
    """Checkpoint name -> (parameter name, first row, end row) for every model parameter: the one
    home of the name mapping, read by the loader and by writers of trained checkpoints. A tied
    model has no ``lm_head.weight`` entry (the embedding is its one parameter)."""
    packed: dict[str, list[tuple[str, int]]] = {}
    for part, (fused, idx) in model.packed_modules_mapping.items():
        packed.setdefault(fused, []).append((part, idx))
    shard_rows = model.packed_shards()
    out = {}
    for pname, p in model.named_parameters():
        fused = next((f for f in packed if f".{f}." in pname), None)
        if fused is None:
            out[pname] = (pname, 0, p.shape[0])
            continue
        starts = [0]
        for rows in shard_rows[fused]:
            starts.append(starts[-1] + rows)
        for part, idx in packed[fused]:
            out[pname.replace(f".{fused}.", f".{part}.")] = (pname, starts[idx], starts[idx + 1])
    return out


# Config fields that fix the weights' shapes and layout: an overriding config must keep them.
SHAPE_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                "num_attention_heads", "num_key_value_heads", "head_dim", "tie_word_embeddings")


def check_same_shapes(ours: Qwen3Config, checkpoint: Qwen3Config, folder: str | Path) -> None:
    """Raise ValueError unless ``ours`` has the checkpoint's ``SHAPE_FIELDS`` (naming each that
    differs). The other fields (RoPE, norms' eps, stored dtype) may differ."""
    diff = [f"{f} {getattr(ours, f)} (the checkpoint has {getattr(checkpoint, f)})"
            for f in SHAPE_FIELDS if getattr(ours, f) != getattr(checkpoint, f)]
    if diff:
        raise ValueError(f"the config passed to load_model does not fit the checkpoint {folder}: "
                         f"{'; '.join(diff)}; derive it from that folder's config.json "
                         "(models.checkpoint_folder.read_config)")


def load_model(folder: str | Path, device: str | torch.device = "cpu",
               dtype: torch.dtype | str = torch.bfloat16,
               config: Qwen3Config | None = None) -> Qwen3ForCausalLM:
    """Load a Qwen3 checkpoint folder (Hugging Face layout) into ``Qwen3ForCausalLM``.

    Args:
        folder: holds ``config.json`` and ``model.safetensors`` or sharded files plus
            ``model.safetensors.index.json``.
        device: where the weights go (e.g. "cuda"); tensors are copied there one at a time.
        dtype: run dtype (torch dtype or "bfloat16"/"float16"/"float32"); stored bf16/fp16/fp32
            tensors are cast to it.
        config: build the model from this config instead of the folder's ``config.json``, e.g.
            ``models.context.plan_context(read_config(folder), ctx).config`` with YaRN added. It
            must keep the checkpoint's ``SHAPE_FIELDS``; RoPE and the other fields are its own.

    Returns:
        The model in eval mode, without gradients.

    Raises:
        ValueError: missing/unreadable/unsupported config, a ``config`` whose shapes differ from
            the checkpoint's, missing files or shards, missing or unexpected tensors, wrong shapes,
            unsupported stored dtypes, or a tensor with inf/NaN values, stored or from the cast
            to ``dtype`` (each names the problem).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"model folder {folder} does not exist")
    if isinstance(dtype, str):
        if dtype not in TORCH_DTYPES:
            raise ValueError(f"unsupported dtype {dtype!r}: use one of {', '.join(TORCH_DTYPES)}")
        dtype = TORCH_DTYPES[dtype]
    if config is None:
        config = read_config(folder)
    else:
        check_same_shapes(config, read_config(folder), folder)
    stored = read_headers(checkpoint_files(folder))

    with meta_modules():
        model = Qwen3ForCausalLM(config)
        if config.tie_word_embeddings and LM_HEAD in stored:
            model.lm_head.weight = torch.nn.Parameter(empty(model.lm_head.weight))
    params = dict(model.named_parameters())
    targets = checkpoint_targets(model)
    _check(folder, stored, targets, params)

    to_empty(model.to(dtype), device)
    if config.tie_word_embeddings and LM_HEAD not in stored:
        model.tie_weights()  # to_empty gave lm_head its own storage
    params = dict(model.named_parameters())
    with torch.no_grad():
        if _staged(torch.device(device)):
            _copy_staged(stored, targets, params, torch.device(device))
        else:
            _copy_plain(stored, targets, params)
    return model.eval().requires_grad_(False)


def _staged(device: torch.device) -> bool:
    """Whether the weights go through ``models.weight_stream``'s pinned staging buffers (CUDA,
    unless ``INFER_STAGED_LOAD=0``), or tensor by tensor (that opt-out, and always on the CPU,
    where there is no host-to-device copy to overlap).

    Raises:
        ValueError: ``INFER_STAGED_LOAD`` set to anything but 0 or 1 (a typo would otherwise
            leave the default on unnoticed).
    """
    value = os.environ.get("INFER_STAGED_LOAD", "1").strip() or "1"
    if value not in ("0", "1"):
        raise ValueError(f"INFER_STAGED_LOAD must be 0 (load tensor by tensor) or 1 (staged, "
                         f"the default), got {value!r}")
    return device.type == "cuda" and value == "1"


def _copy_plain(stored: dict, targets: dict, params: dict) -> None:
    """One tensor at a time: read it (``safe_open``), copy it into its place, check it."""
    for path in dict.fromkeys(p for p, _, _ in stored.values()):
        with safe_open(path, framework="pt") as f:
            for name, (file, _, _) in stored.items():
                if file == path:
                    pname, lo, hi = targets[name]
                    src = f.get_tensor(name)
                    dst = params[pname][lo:hi]
                    dst.copy_(src)
                    if not _all_finite(dst):
                        raise ValueError(_non_finite_message(name, file, src, dst.dtype))


def _copy_staged(stored: dict, targets: dict, params: dict, device: torch.device) -> None:
    """Every tensor read into pinned buffers and copied straight into its place (fused rows
    included) by ``models.weight_stream.copy_tensors``; the first non-finite one in load order
    (the plain path's) is re-read to word the error."""
    files = dict.fromkeys(p for p, _, _ in stored.values())
    offsets = {path: tensor_offsets(path) for path in files}
    copies = []
    for name, (file, shape, st_dtype) in stored.items():
        pname, lo, hi = targets[name]
        dtype = SAFETENSORS_DTYPES[st_dtype]
        begin, end = offsets[file][name]
        if end - begin != math.prod(shape) * dtype.itemsize:
            raise ValueError(f"cannot read {file}: tensor {name}'s data takes {end - begin} "
                             f"bytes, but its shape {list(shape)} needs "
                             f"{math.prod(shape) * dtype.itemsize}: the file is corrupt")
        copies.append(TensorCopy(name, file, begin, end - begin, dtype, params[pname][lo:hi]))
    for c, finite in zip(copies, copy_tensors(copies, device), strict=True):
        if not finite:
            with safe_open(c.file, framework="pt") as f:
                src = f.get_tensor(c.name)
            raise ValueError(_non_finite_message(c.name, c.file, src, c.out.dtype))


_CHECK_CHUNK = 1 << 24  # elements per finiteness check: bounds its temporary bool tensor


def _all_finite(t: torch.Tensor) -> bool:
    """Whether every value of ``t`` is finite, checked in chunks (one host sync per chunk)."""
    flat = t.reshape(-1)
    return all(bool(torch.isfinite(c).all()) for c in flat.split(_CHECK_CHUNK))


def _non_finite_message(name: str, file: Path, src: torch.Tensor, dtype: torch.dtype) -> str:
    """One line naming the tensor with inf/NaN values, and whether the checkpoint holds them or
    the cast to the run dtype made them (float16 ends at 65504)."""
    if _all_finite(src):
        run = str(dtype).removeprefix("torch.")
        return (f"tensor {name} in {file.name} has values beyond the range of {run} (largest "
                f"{torch.finfo(dtype).max:g}), which become inf when loaded as {run}: "
                "run the model in bfloat16 or float32")
    return (f"tensor {name} in {file.name} holds non-finite values (inf or NaN): the checkpoint "
            "is corrupt; download or convert it again")


def _check(folder: Path, stored: dict, targets: dict, params: dict) -> None:
    """Raise ValueError unless the stored tensors are exactly the model's, with right shapes."""
    unexpected = set(stored) - set(targets)
    if unexpected:
        raise ValueError(f"checkpoint {folder} has {len(unexpected)} unexpected tensor(s): "
                         f"{_name_list(unexpected)}; infer supports dense Qwen3ForCausalLM "
                         "checkpoints only")
    missing = set(targets) - set(stored)
    if missing:
        raise ValueError(f"checkpoint {folder} is missing {len(missing)} tensor(s): "
                         f"{_name_list(missing)}; the checkpoint is incomplete or not Qwen3")
    for name, (file, shape, st_dtype) in stored.items():
        pname, lo, hi = targets[name]
        want = (hi - lo, *params[pname].shape[1:])
        if shape != want:
            raise ValueError(f"tensor {name} in {file.name} has shape {list(shape)}, but the "
                             f"config implies {list(want)}: config.json does not match the weights")
        if st_dtype not in SAFETENSORS_DTYPES:
            raise ValueError(f"tensor {name} in {file.name} is stored as {st_dtype}; only "
                             "bfloat16, float16 and float32 checkpoints are supported")
