"""Runtime failures of decoding that the CLI words for the user (kept free of heavy imports, so
that ``infer/ui/console.py`` can name them without importing torch)."""

from __future__ import annotations


class NonFiniteLogits(RuntimeError):
    """A decode step's logits held NaN or inf (``infer.sampling.NON_FINITE``): the model's
    weights or its activations overflow in the model dtype. Raised by the decode loop with the
    step's tokens read; the reply stops there (``stop_reason`` "interrupted")."""

    def __init__(self, detail: str = ""):
        msg = ("the model produced non-finite (NaN or inf) logits: its weights or activations "
               "overflow in the model dtype (a float16 checkpoint run in float16?)")
        super().__init__(f"{msg}: {detail}" if detail else msg)
