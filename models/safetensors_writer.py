"""Stream tensors into a (sharded) safetensors checkpoint, in the Hugging Face layout.

Design: a small writer of our own for the safetensors format of huggingface/safetensors (8-byte
little-endian header length, JSON header with dtype/shape/data_offsets per tensor padded to 8
bytes, then the raw little-endian data). The header is written first from the shapes alone, so
tensors can be produced one at a time (``make(name, shape)``) and handed to a background thread
that writes them: host memory holds at most a few tensors, never a whole shard. Each shard is
written to ``<name>.partial`` and renamed when complete, and any error removes the partial files,
so a crash never leaves a truncated ``*.safetensors`` that a loader would take for a checkpoint.
Shards are contiguous groups of about equal bytes, named and indexed as transformers'
``save_pretrained`` names them (``model-00001-of-00003.safetensors`` +
``model.safetensors.index.json``).
"""

from __future__ import annotations

import json
import math
import os
import queue
import struct
import threading
from collections.abc import Callable
from pathlib import Path

import torch

from models.dtypes import SAFETENSORS_CODES

PARTIAL_SUFFIX = ".partial"  # a shard being written; renamed when complete
INDEX_FILE = "model.safetensors.index.json"

MakeTensor = Callable[[str, tuple[int, ...]], torch.Tensor]


def split_shards(sizes: list[int], shards: int) -> list[int]:
    """Shard index per tensor: contiguous groups of about equal bytes, none empty."""
    shards = max(1, min(shards, len(sizes)))
    target = sum(sizes) / shards
    out, cur, acc, done = [], 0, 0, 0  # acc: bytes in shard `cur`; done: bytes before it
    for k, nbytes in enumerate(sizes):
        must_move = len(sizes) - k <= shards - 1 - cur  # one tensor per remaining shard
        want_move = done + acc + nbytes / 2 > (cur + 1) * target
        if acc > 0 and cur < shards - 1 and (must_move or want_move):
            cur, done, acc = cur + 1, done + acc, 0
        out.append(cur)
        acc += nbytes
    return out


def shard_names(n_shards: int) -> list[str]:
    """File names of ``n_shards`` shards, as transformers names them."""
    if n_shards == 1:
        return ["model.safetensors"]
    return [f"model-{k + 1:05d}-of-{n_shards:05d}.safetensors" for k in range(n_shards)]


class StreamingWriter:
    """Writes one safetensors file tensor by tensor (``write`` in header order, then ``close``).

    The bytes go to ``<name>.partial``, renamed to ``path`` by ``close()``.
    """

    def __init__(self, path: Path, entries: list[tuple[str, tuple[int, ...]]], dtype: torch.dtype):
        esize = torch.empty((), dtype=dtype).element_size()
        header, offset = {"__metadata__": {"format": "pt"}}, 0
        for name, shape in entries:
            nbytes = math.prod(shape) * esize
            header[name] = {"dtype": SAFETENSORS_CODES[dtype], "shape": list(shape),
                            "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)
        self.path, self.tmp = path, path.with_name(path.name + PARTIAL_SUFFIX)
        self.f = open(self.tmp, "wb")  # noqa: SIM115 (closed in close())
        self.f.write(struct.pack("<Q", len(raw)) + raw)
        self.total = offset

    def write(self, t: torch.Tensor) -> None:
        """t: a CPU tensor in the writer's dtype (its bytes are written as they are)."""
        self.f.write(t.contiguous().view(torch.uint8).numpy().data)

    def close(self) -> None:
        self.f.close()
        os.replace(self.tmp, self.path)


def write_checkpoint_files(out: Path, entries: list[tuple[str, tuple[int, ...]]],
                           dtype: torch.dtype, make: MakeTensor, shards: int) -> list[Path]:
    """Write tensors ``entries`` (name, shape), in order, into ``shards`` safetensors files.

    Args:
        out: an existing folder; stale ``model*.safetensors``, partial files and the index there
            are removed first.
        entries: (name, shape) of every tensor, in file order.
        dtype: the stored dtype (bfloat16, float16 or float32).
        make: ``make(name, shape)`` returns the CPU tensor in ``dtype``; called in order, on this
            thread (it may use the GPU), while the previous tensors are written.
        shards: number of files (at most one per tensor); more than one also writes
            ``model.safetensors.index.json`` with ``metadata.total_size`` and ``weight_map``.

    Returns:
        The paths of the files written. An exception from ``make`` or the writer is re-raised
        after the partial files are removed.
    """
    esize = torch.empty((), dtype=dtype).element_size()
    sizes = [math.prod(s) * esize for _, s in entries]
    shard_of = split_shards(sizes, shards)
    names = shard_names(shard_of[-1] + 1)
    for stale in (list(out.glob("model*.safetensors")) + list(out.glob("*" + PARTIAL_SUFFIX))
                  + [out / INDEX_FILE]):
        stale.unlink(missing_ok=True)

    q: queue.Queue = queue.Queue(maxsize=3)
    errors: list[BaseException] = []

    def drain():
        try:
            while (item := q.get()) is not None:
                writer, tensor = item
                if tensor is None:
                    writer.close()
                else:
                    writer.write(tensor)
        except BaseException as e:  # re-raised in the main thread below
            errors.append(e)
            while q.get() is not None:
                pass

    worker = threading.Thread(target=drain, daemon=True)
    worker.start()
    done = False
    try:
        for k, file in enumerate(names):
            mine = [e for e, sh in zip(entries, shard_of, strict=True) if sh == k]
            writer = StreamingWriter(out / file, mine, dtype)
            for name, shape in mine:
                q.put((writer, make(name, shape)))
            q.put((writer, None))
            if errors:
                break
        done = True
    finally:
        q.put(None)
        worker.join()
        if errors or not done:  # leave no half-written checkpoint behind
            for partial in out.glob("*" + PARTIAL_SUFFIX):
                partial.unlink(missing_ok=True)
    if errors:
        raise errors[0]
    if len(names) > 1:
        weight_map = {n: names[sh] for (n, _), sh in zip(entries, shard_of, strict=True)}
        index = {"metadata": {"total_size": sum(sizes)}, "weight_map": weight_map}
        (out / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
    return [out / n for n in names]
