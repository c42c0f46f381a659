"""Building a model's modules on the meta device without running their initializers.

``load_model`` builds the model on the meta device and then overwrites every weight from the
checkpoint, so the initializers are wasted work; and on meta tensors torch runs
``nn.Linear``'s and ``nn.Embedding``'s (``kaiming_uniform_``, ``normal_``) through its reference
implementations, whose first call imports ``torch._dynamo``: about 0.9 s of every start-up.
Same idea as transformers' ``no_init_weights`` and torch's ``nn.utils.skip_init``.
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


def _no_init(self) -> None:
    """``reset_parameters`` while building on the meta device: nothing to initialize."""
