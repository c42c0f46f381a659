"""Errors that the CLI words for the user: a bad value of one option (``OptionError``), runtime
failures of decoding (``NonFiniteLogits``). Kept free of heavy imports, so that ``infer/ui/`` can
name them without importing torch."""

from __future__ import annotations


class NonFiniteLogits(RuntimeError):
    """A decode step's logits held NaN or inf (``infer.sampling.NON_FINITE``): the model's
    weights or its activations overflow in the model dtype. Raised by the decode loop with the
    step's tokens read; the reply stops there (``stop_reason`` "interrupted")."""

    def __init__(self, detail: str = ""):
        msg = ("the model produced non-finite (NaN or inf) logits: its weights or activations "
               "overflow in the model dtype (a float16 checkpoint run in float16?)")
        super().__init__(f"{msg}: {detail}" if detail else msg)


class OptionError(ValueError):
    """A value one option refuses (``infer/config.py``, ``infer/sampling_params.py``): ``option``
    is the parameter's name (``page_size``), ``rule`` the rest of the message (``must be one of
    16, 32, 64, 128, got 7``). The message is the two together, as a Python caller wrote the
    parameter; the command line names the flag instead (``--page-size must be ...``:
    ``infer.ui.prepare.flag_message``)."""

    def __init__(self, option: str, rule: str):
        super().__init__(f"{option} {rule}")
        self.option, self.rule = option, rule
