"""Building a model's modules on the meta device without running their initializers.

``load_model`` builds the model on the meta device and then overwrites every weight from the
checkpoint, so the initializers are wasted work; and on meta tensors torch runs
``nn.Linear``'s and ``nn.Embedding``'s (``kaiming_uniform_``, ``normal_``) through its reference
implementations, whose first call imports ``torch._dynamo``: about 0.9 s of every start-up.
Same idea as transformers' ``no_init_weights`` and torch's ``nn.utils.skip_init``.

``to_empty`` then gives the modules storage on the target device. Not ``Module.to_empty``: its
``torch.empty_like`` on a meta tensor also runs through a reference implementation
(``torch._refs.empty_like``), whose first call imports ``torch.fx.experimental.symbolic_shapes``
and with it sympy: about 0.3 s of every start-up on the CPU. ``empty`` stands in for
``empty_like`` for the same reason where the loader makes one meta parameter like another.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

SKIPPED = (torch.nn.Linear, torch.nn.Embedding)  # the module classes our models build


@contextlib.contextmanager
def meta_modules() -> Iterator[None]:
    """Inside: new modules go to the meta device, and ``SKIPPED``'s ``reset_parameters`` do
    nothing (their parameters hold no values until ``to_empty`` and a load). Restored on exit,
    also after an exception."""
    saved = [cls.reset_parameters for cls in SKIPPED]
    for cls in SKIPPED:
        cls.reset_parameters = _no_init
    try:
        with torch.device("meta"):
            yield
    finally:
        for cls, method in zip(SKIPPED, saved, strict=True):
            cls.reset_parameters = method


def empty(like: torch.Tensor, device: torch.device | str | None = None) -> torch.Tensor:
    """``torch.empty_like(like, device=device)`` for a dense ``like`` (every parameter and buffer
    a module builds is), without ``empty_like``'s reference implementation on a meta tensor (the
    module docstring says why): same shape, strides and dtype; ``device`` defaults to ``like``'s."""
    return torch.empty_strided(like.shape, like.stride(), dtype=like.dtype,
                               device=like.device if device is None else device)


def to_empty(module: torch.nn.Module, device: torch.device | str) -> torch.nn.Module:
    """``module.to_empty(device=device)``: every parameter and buffer replaced by an
    uninitialized tensor of its shape and dtype on ``device`` (``Module._apply``, as ``to_empty``
    itself does), through ``empty``. Returns ``module``."""
    return module._apply(lambda t: empty(t, device))


def _no_init(self) -> None:
    """``reset_parameters`` while building on the meta device: nothing to initialize."""
