"""The paged KV pool: one allocation at start-up, a free list of pages, a page-table row per
sequence.

Layout per layer (DESIGN.md, "The KV pool"): K and V each ``[num_pages, kv_heads, page_size,
head_dim]``, so one page of one KV head is a contiguous ``page_size x head_dim`` tile. BF16 pools
store the values; INT8 pools store codes plus one float32 scale per (token, KV head) in
``[num_pages, kv_heads, page_size]`` (scale = amax / 127, codes = round(x / scale) in [-127, 127]).

INT8 pools keep each page of V transposed, ``[num_pages, kv_heads, head_dim, page_size]`` (a
page of one KV head is a contiguous ``head_dim x page_size`` tile, positions contiguous): in the
P.V product the positions are the reduction dimension, and tensor-core operands built from 8-bit
codes need it contiguous (with V stored like K, the decode kernel gathers every value code with a
one-byte shared-memory load; BENCHMARKS.md has the measurements). The same reason makes Triton's
FP8 attention store V transposed.

Paging after vLLM's PagedAttention (Kwon et al. 2023); the per-layer views are what the kernels
take.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

PAGE_SIZES = (16, 32, 64, 128)
KV_DTYPES = ("bf16", "int8")


def pages_for(num_positions: int, page_size: int) -> int:
    """Pages needed to hold ``num_positions`` positions (the one home of this rule)."""
    return -(-num_positions // page_size)


def int8_v_shape(k_shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    """Shape of an INT8 pool's V for a K of ``k_shape`` ``[num_pages, kv_heads, page_size,
    head_dim]``: ``[num_pages, kv_heads, head_dim, page_size]`` (pages transposed)."""
    num_pages, kv_heads, page_size, head_dim = k_shape
    return (num_pages, kv_heads, head_dim, page_size)


@dataclass
class LayerCache:
    """One layer's view of the pool.

    Attributes:
        k: [num_pages, kv_heads, page_size, head_dim], the model dtype (bf16/fp16/fp32) or int8.
        v: the same as k for a 16-bit pool; int8 pages transposed, [num_pages, kv_heads,
            head_dim, page_size] (see the module docstring).
        k_scale, v_scale: float32 [num_pages, kv_heads, page_size] for an INT8 pool, else None.
    """

    k: torch.Tensor
    v: torch.Tensor
    k_scale: torch.Tensor | None = None
    v_scale: torch.Tensor | None = None

    @property
    def page_size(self) -> int:
        return self.k.shape[2]

    @property
    def is_int8(self) -> bool:
        return self.k.dtype == torch.int8


class OutOfPages(RuntimeError):
    """The pool has no free page left for a sequence's next position."""


class KVPool:
    """Fixed-size paged KV cache for all layers.

    Args:
        num_layers, kv_heads, head_dim: model shape.
        num_pages: pages per layer (each holds ``page_size`` positions of every KV head).
        page_size: positions per page, one of 16, 32, 64, 128.
        kv_dtype: ``"bf16"`` (stores ``dtype``) or ``"int8"`` (codes + float32 scales).
        dtype: the model's activation dtype, used for a ``"bf16"`` pool (float32 on CPU tests).
        device: where to allocate.

    Raises:
        ValueError: on an unsupported page size or cache dtype.
        torch.OutOfMemoryError: if the allocation does not fit (callers size it first with
            ``bytes_per_page``).
    """

    def __init__(self, num_layers: int, kv_heads: int, head_dim: int, num_pages: int,
                 page_size: int = 64, kv_dtype: str = "bf16",
                 dtype: torch.dtype = torch.bfloat16, device: torch.device | str = "cpu"):
        if page_size not in PAGE_SIZES:
            raise ValueError(f"page size must be one of {PAGE_SIZES}, got {page_size}")
        if kv_dtype not in KV_DTYPES:
            raise ValueError(f"KV cache dtype must be one of {KV_DTYPES}, got {kv_dtype!r}")
        if num_pages < 1:
            raise ValueError("the KV pool needs at least one page")
        self.num_layers, self.kv_heads, self.head_dim = num_layers, kv_heads, head_dim
        self.num_pages, self.page_size, self.kv_dtype = num_pages, page_size, kv_dtype
        self.device = torch.device(device)
        shape = (num_pages, kv_heads, page_size, head_dim)
        store = torch.int8 if kv_dtype == "int8" else dtype
        self.layers: list[LayerCache] = []
        for _ in range(num_layers):
            if kv_dtype == "int8":
                sshape = (num_pages, kv_heads, page_size)
                self.layers.append(LayerCache(
                    torch.zeros(shape, dtype=store, device=device),
                    torch.zeros(int8_v_shape(shape), dtype=store, device=device),
                    torch.ones(sshape, dtype=torch.float32, device=device),
                    torch.ones(sshape, dtype=torch.float32, device=device)))
            else:
                self.layers.append(LayerCache(torch.zeros(shape, dtype=store, device=device),
                                              torch.zeros(shape, dtype=store, device=device)))
        # Page 0 first out: low ids are handed out first (deterministic for tests).
        self._free: list[int] = list(range(num_pages - 1, -1, -1))
        self._is_free = [True] * num_pages

    @staticmethod
    def bytes_per_page(num_layers: int, kv_heads: int, head_dim: int, page_size: int,
                       kv_dtype: str, dtype_bytes: int = 2) -> int:
        """Bytes one page takes over all layers, K and V, scales included."""
        per_pos = head_dim * (1 if kv_dtype == "int8" else dtype_bytes)
        if kv_dtype == "int8":
            per_pos += 4
        return 2 * num_layers * kv_heads * page_size * per_pos

    @property
    def bytes_per_position(self) -> int:
        """Bytes one cached position takes over all layers, K and V, INT8 scales included: what
        decode reads per cached position per token."""
        dtype_bytes = self.layers[0].k.element_size()
        return self.bytes_per_page(self.num_layers, self.kv_heads, self.head_dim, 1,
                                   self.kv_dtype, dtype_bytes)

    def layer(self, i: int) -> LayerCache:
        return self.layers[i]

    @property
    def capacity(self) -> int:
        """Positions the whole pool holds (tokens)."""
        return self.num_pages * self.page_size

    @property
    def num_free_pages(self) -> int:
        return len(self._free)

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` pages off the free list. Raises ``OutOfPages`` if fewer are free."""
        if n > len(self._free):
            raise OutOfPages(f"KV pool exhausted: need {n} more pages, {len(self._free)} free "
                             f"({self.capacity} positions in all)")
        pages = [self._free.pop() for _ in range(n)]
        for p in pages:
            self._is_free[p] = False
        return pages

    def free(self, pages: list[int]) -> None:
        """Return pages to the free list (a sequence ended or was reset).

        Raises:
            RuntimeError: if a page is out of range or already free (a double free would hand one
                page to two sequences).
        """
        for p in pages:
            if not 0 <= p < self.num_pages or self._is_free[p]:
                raise RuntimeError(f"page {p} is not an allocated page of this pool")
        if len(set(pages)) != len(pages):
            raise RuntimeError(f"pages freed twice in one call: {sorted(pages)}")
        for p in pages:
            self._is_free[p] = True
        self._free.extend(reversed(pages))

    def pages_for(self, num_positions: int) -> int:
        """Pages needed to hold ``num_positions`` positions (``pages_for``)."""
        return pages_for(num_positions, self.page_size)
