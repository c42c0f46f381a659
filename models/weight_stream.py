"""Stream safetensors bytes from local files into device tensors through pinned staging buffers.

The loader's CUDA path (``models/loader.py``). The target is the disk-to-GPU rate: 16 GB of
Qwen3-8B weights, page cache warm, in about 2 s (>= 8 GB/s), where copying one tensor at a time
(``safe_open(...).get_tensor`` then ``.to("cuda")``) waits for each read before its copy starts
and each copy before the next read.

Design (after fastsafetensors' parallel reads into bounce buffers with the type conversion done
on the GPU, and SGLang's weight loading without mmap, which found page faults in ``copy_`` from
mmap'd tensors the slow part; neither is copied):

1. Plan. The byte range of every tensor comes from the file's header (8-byte little-endian
   length, JSON with ``data_offsets``). Tensors are taken in file order and cut into batches of
   at most ``chunk_bytes`` contiguous bytes of one file: small tensors share a batch, a large one
   spans several (cut at element boundaries). A tensor's bytes start at an offset in the batch
   that is a multiple of its element size, so the buffer can be viewed in its dtype.
2. Read. ``buffers`` pinned host buffers of ``chunk_bytes`` each; reader threads fill them with
   ``readinto`` straight from the file (one host copy: page cache -> pinned buffer; no mmap, no
   tensor object per read), several batches at a time (reading the page cache is the slow part,
   and ``readinto`` releases the GIL).
3. Copy. The main thread takes the batches in order and, per tensor piece, issues
   ``copy_(non_blocking=True)`` from the pinned buffer into the piece's final place: a slice of
   the device parameter, rows of a fused ``qkv_proj``/``gate_up_proj`` included. A piece stored in
   another dtype than the parameter's goes to a device scratch buffer in its stored dtype first
   and is cast there, on the GPU. Then ``isfinite(piece).all()`` is enqueued (no host sync), and an
   event marks the buffer's copies; a buffer is refilled only once its event has completed.

::

    reader threads:  read b0 -> buf0 | read b1 -> buf1 | read b2 -> buf2 | read b3 -> buf0 ...
    stream:                     H2D b0 + isfinite | H2D b1 + isfinite | H2D b2 ...
    host:            wait read b_i, enqueue its copies, record event_i, refill the slot of b_(i-1)

One host sync at the end reads every piece's finiteness. On the CPU (tests) the same code runs
with plain (unpinned) buffers and synchronous copies: the results are the bytes the plain loader
copies, bit for bit.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

CHUNK_BYTES = 32 << 20  # bytes per staging buffer (a multiple of 8)
BUFFERS = max(2, min(8, (os.cpu_count() or 2) // 2))  # staging buffers = batches read at once


@dataclass(frozen=True)
class TensorCopy:
    """One stored tensor and where it goes.

    Attributes:
        name: the checkpoint name (for messages).
        file: the safetensors file holding it.
        begin: absolute byte offset of its data in ``file``.
        nbytes: its size in bytes.
        dtype: the stored dtype.
        out: the destination: a contiguous tensor (any dtype and device) with as many elements.
    """

    name: str
    file: Path
    begin: int
    nbytes: int
    dtype: torch.dtype
    out: torch.Tensor


@dataclass
class _Piece:
    item: int  # index into the copies
    lo: int  # first element of the tensor in this piece
    hi: int  # end element
    offset: int  # byte offset of the piece in the batch


@dataclass
class _Batch:
    file: Path
    begin: int  # absolute byte offset of the batch in the file
    nbytes: int = 0
    pieces: list[_Piece] = field(default_factory=list)


def tensor_offsets(path: Path) -> dict[str, tuple[int, int]]:
    """name -> (absolute begin, end) byte offsets of each tensor's data in a safetensors file.

    Raises:
        ValueError: the header cannot be read or parsed (naming the file).
    """
    try:
        with open(path, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
        start = 8 + n
        return {name: (start + int(v["data_offsets"][0]), start + int(v["data_offsets"][1]))
                for name, v in header.items() if name != "__metadata__"}
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError,
            struct.error) as e:
        raise ValueError(f"cannot read {path}: not a valid safetensors file ({e})") from None


def plan_batches(copies: Sequence[TensorCopy], chunk_bytes: int = CHUNK_BYTES) -> list[_Batch]:
    """Cut the copies, in file order, into batches of at most ``chunk_bytes`` contiguous bytes of
    one file (see the module docstring); every byte of every copy lands in exactly one piece."""
    assert chunk_bytes % 8 == 0 and chunk_bytes >= 8, chunk_bytes
    order = sorted(range(len(copies)), key=lambda k: (str(copies[k].file), copies[k].begin))
    batches: list[_Batch] = []
    cur: _Batch | None = None
    for k in order:
        c = copies[k]
        esize = c.dtype.itemsize
        pos, end = c.begin, c.begin + c.nbytes
        while pos < end:
            if cur is not None and (cur.file != c.file or pos < cur.begin + cur.nbytes
                                    or (pos - cur.begin) % esize
                                    or pos - cur.begin + esize > chunk_bytes):
                cur = None  # another file, overlapping bytes, misaligned, or full
            if cur is None:
                cur = _Batch(c.file, pos)
                batches.append(cur)
            at = pos - cur.begin
            take = min(end - pos, (chunk_bytes - at) // esize * esize)
            lo = (pos - c.begin) // esize
            cur.pieces.append(_Piece(k, lo, lo + take // esize, at))
            cur.nbytes = at + take
            pos += take
    return batches


def copy_tensors(copies: Sequence[TensorCopy], device: torch.device | str, *,
                 chunk_bytes: int | None = None, buffers: int | None = None) -> list[bool]:
    """Copy every stored tensor's bytes into its ``out`` (cast to ``out``'s dtype on ``device``).

    Args:
        copies: the tensors; their ``out`` tensors are on ``device``.
        device: CUDA: pinned staging buffers, copies overlapped with the reads; CPU: the same
            steps with plain buffers.
        chunk_bytes: size of one staging buffer (a multiple of 8; default ``CHUNK_BYTES``).
        buffers: staging buffers, and reader threads (>= 1; default ``BUFFERS``).

    Returns:
        Per copy, whether all its values are finite (after the cast).

    Raises:
        ValueError: a file ends before a tensor's bytes (naming it), or cannot be read.
    """
    device = torch.device(device)
    batches = plan_batches(copies, chunk_bytes or CHUNK_BYTES)
    buffers = buffers or BUFFERS
    if not batches:
        return [True] * len(copies)
    cuda = device.type == "cuda"
    # NOTE: the events and copies use the current stream of `device`, the destinations' device
    with torch.cuda.device(device) if cuda else contextlib.nullcontext():
        return _copy(copies, batches, device, max(1, min(buffers, len(batches))))


def _copy(copies: Sequence[TensorCopy], batches: list[_Batch], device: torch.device, n: int
          ) -> list[bool]:
    """``copy_tensors`` after the plan, with ``n`` buffers (see the module docstring)."""
    cuda = device.type == "cuda"
    size = max(b.nbytes for b in batches)
    host = [_host_buffer(size, pin=cuda) for _ in range(n)]
    fences = [torch.cuda.Event() if cuda else None for _ in range(n)]
    casts = any(c.out.dtype != c.dtype for c in copies)
    scratch = torch.empty(size, dtype=torch.uint8, device=device) if casts else None
    finite: list[tuple[int, torch.Tensor]] = []
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="weights") as pool:
        reads, submitted = {}, 0
        for i, batch in enumerate(batches):
            while submitted < min(len(batches), i + n):  # read ahead into the free buffers
                slot = submitted % n
                if fences[slot] is not None and submitted >= n:
                    fences[slot].synchronize()  # NOTE: its previous batch's copies are done
                reads[submitted] = pool.submit(_read, batches[submitted], host[slot])
                submitted += 1
            reads.pop(i).result()
            buf = host[i % n]
            for p in batch.pieces:
                c = copies[p.item]
                nbytes = (p.hi - p.lo) * c.dtype.itemsize
                src = buf[p.offset:p.offset + nbytes].view(c.dtype)
                dst = c.out.view(-1)[p.lo:p.hi]
                if c.out.dtype == c.dtype:
                    dst.copy_(src, non_blocking=True)
                else:  # cast on the device, from the stored dtype
                    raw = scratch[:nbytes].view(c.dtype)
                    raw.copy_(src, non_blocking=True)
                    dst.copy_(raw)
                finite.append((p.item, torch.isfinite(dst).all()))
            if fences[i % n] is not None:
                fences[i % n].record()
    ok = [True] * len(copies)
    flags = torch.stack([f for _, f in finite]).tolist()  # the one host sync
    for (k, _), good in zip(finite, flags, strict=True):
        ok[k] = ok[k] and good
    return ok


def _host_buffer(nbytes: int, *, pin: bool) -> torch.Tensor:
    """A uint8 host buffer; pinned when asked and possible (pinning can fail where locked memory
    is limited: pageable memory is then staged by the driver, correct but slower)."""
    if pin:
        with contextlib.suppress(RuntimeError):  # else pageable memory, below
            return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    return torch.empty(nbytes, dtype=torch.uint8)


def _read(batch: _Batch, buf: torch.Tensor) -> None:
    """Fill ``buf[:batch.nbytes]`` with the batch's bytes, read straight from its file."""
    view = memoryview(buf.numpy())[:batch.nbytes]
    got = 0
    with open(batch.file, "rb", buffering=0) as f:
        f.seek(batch.begin)
        while got < batch.nbytes:
            n = f.readinto(view[got:])
            if not n:
                raise ValueError(f"cannot read {batch.file}: it ends at byte {batch.begin + got},"
                                 " before the tensors its header lists (a truncated download?)")
            got += n
